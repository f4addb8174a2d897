"""sdk/python/README.md's first example, run as written (a separate python process, the
installed wheel) against the real corrald and the scripted model: it creates a sandbox, runs a
command, runs an agent turn and prints its metered cost, in under 15 lines."""
import ast
import os
import re
import subprocess
import sys
import unittest

import corral
from helpers import ENV, have_daemon, micro_usd, play, usd

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


class Readme(unittest.TestCase):
    def test_every_python_example_compiles(self):
        with open(README) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 7)
        for block in blocks:
            compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        # And the names they use are the SDK's (a renamed method fails here).
        text = "".join(blocks)
        for pattern, owner in ((r"\bclient\.([a-z_]+)\(", corral.AsyncCorral), (r"\bcorral\.([A-Za-z_]+)", corral),
                               (r"\b(?:session|watcher|watch)\.([a-z_]+)\(", corral.Session),
                               (r"\b(?:command|shell)\.([a-z_]+)\(", corral.Command)):
            names = set(re.findall(pattern, text))
            self.assertTrue(names, pattern)
            for name in names:
                self.assertTrue(hasattr(owner, name), f"README.md uses {owner.__name__}.{name}")

    def test_the_first_example_runs_and_prints_the_turn_and_its_cost(self):
        if not have_daemon():
            self.fail("run through run_tests.py")
        with open(README) as f:
            example = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        self.assertLess(len(example.strip().splitlines()), 15)
        turns = [{"text": "Created hello.py; it prints hi.", "usage": {"input_tokens": 900, "output_tokens": 20}}]
        play(turns)
        env = dict(os.environ, CORRAL_ISSUER_SECRET=ENV["secret"], CORRAL_URL=ENV["url"])
        # The example names its issuer "acme": the harness's is another name.
        source = example.replace('issuer="acme"', f'issuer="{ENV["issuer"]}"')
        ran = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=180)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        lines = ran.stdout.splitlines()
        self.assertRegex(lines[0], r"^Linux \d")
        self.assertEqual(lines[-1], "Created hello.py; it prints hi. - metered cost: $" + usd(micro_usd(turns[0]["usage"])))
