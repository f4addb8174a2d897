"""The package is typed: pip installed it with its py.typed marker, and Debian's mypy --strict
finds nothing in it nor in a program that uses both clients as the README does; the same
program with a wrong argument type is an error (the check can fail)."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import corral

PROGRAM = textwrap.dedent('''
    import asyncio
    import corral

    async def main(token: str) -> float:
        async with corral.AsyncCorral("http://127.0.0.1:7878", token) as client:
            sandbox = await client.create_sandbox(name="dev")
            result = await client.run(sandbox.id, ["echo", "hi"])
            exit_code: int | None = result.outcome.exit_code
            session = await client.create_session(sandbox.id, prompt="hi")
            turn = await session.result()
            async for event in session:
                if isinstance(event, corral.ToolCallEvent):
                    print(event.name, exit_code)
            return turn.cost_usd

    def sync(token: str) -> str:
        with corral.Corral("http://127.0.0.1:7878", token) as client:
            sandboxes: list[corral.Sandbox] = client.list_sandboxes()
            text: str = client.read_text(sandboxes[0].id, "/home/agent/x")
            return text + ARG

    ARG = corral.create_token(issuer="i", secret="s" * 32, user_id="u")
    asyncio.run(main(ARG))
''')


class Typing(unittest.TestCase):
    def mypy(self, source):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "program.py")
            with open(path, "w") as f:
                f.write(source)
            package = os.path.dirname(corral.__file__)
            return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
                                   package, path], capture_output=True, text=True)

    def test_the_wheel_carries_py_typed_and_mypy_strict_passes(self):
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(corral.__file__), "py.typed")))
        self.assertNotIn("sdk/python/src", corral.__file__, "the installed wheel, not the source tree")
        passed = self.mypy(PROGRAM)
        self.assertEqual(passed.returncode, 0, passed.stdout + passed.stderr)
        # Control: a wrong type in the same program is found.
        failed = self.mypy(PROGRAM.replace('client.run(sandbox.id, ["echo", "hi"])', "client.run(sandbox.id, 42)")
                           .replace('client.read_text(sandboxes[0].id, "/home/agent/x")',
                                    'client.read_text(sandboxes[0].id, 7)'))
        self.assertEqual(failed.returncode, 1, failed.stdout)
        self.assertIn('Argument 2 to "run" of "AsyncCorral"', failed.stdout)
        self.assertIn('Argument 2 has incompatible type "int"; expected "str"', failed.stdout)  # Corral.read_text
        self.assertIn("Found 2 errors", failed.stdout)
