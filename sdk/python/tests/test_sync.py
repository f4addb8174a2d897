"""Corral, the synchronous client, against the real corrald: the same calls without asyncio;
output and session events iterated with plain `for`; a client tool written as a plain function
that calls the client itself (it runs in a worker thread) answers the agent (the scenario of the
client tools test); a callback that calls the client back gets a RuntimeError, not a deadlock."""
import threading
import unittest

import corral
from helpers import ENV, ai_budget, have_daemon, main_requests, play, scenario, token, tool_results


class Sync(unittest.TestCase):
    def setUp(self):
        if not have_daemon():
            self.fail("run through run_tests.py")
        self.c = corral.Corral(ENV["url"], token("py-sync", budget=ai_budget()))
        self.addCleanup(self.c.close)
        self.box = self.c.create_sandbox(name="sync")
        self.addCleanup(self.c.destroy_sandbox, self.box.id)

    def test_inside_a_running_event_loop_a_clear_error_not_a_blocked_loop(self):
        import asyncio

        async def inside():
            with self.assertRaisesRegex(RuntimeError, "inside a running asyncio event loop.*AsyncCorral"):
                self.c.list_sandboxes()
            with self.assertRaisesRegex(RuntimeError, "inside a running asyncio event loop"):
                corral.Corral(ENV["url"], token("py-sync"))
            # Control: the same call from a thread of that loop's works.
            return await asyncio.to_thread(self.c.list_sandboxes)
        self.assertEqual([s.id for s in asyncio.run(inside())], [self.box.id])
        threads = [t.name for t in threading.enumerate() if t.name == "corral-client"]
        self.assertEqual(len(threads), 1, "the refused Corral() started no loop thread")

    def test_commands_and_files_without_asyncio(self):
        self.assertEqual([s.id for s in self.c.list_sandboxes()], [self.box.id])
        self.assertEqual(self.c.run(self.box.id, "echo hi; echo oops >&2; exit 4").stdout, "hi\n")
        lines, callback_threads = [], set()

        def on_stdout(text):
            callback_threads.add(threading.current_thread().name)
            lines.append(text)
        command = self.c.exec(self.box.id, "for i in 1 2 3; do echo $i; sleep 0.1; done", on_stdout=on_stdout)
        chunks = [chunk for chunk in command]
        self.assertEqual(b"".join(ch.data for ch in chunks), b"1\n2\n3\n")
        self.assertEqual(command.wait(timeout=30).exit_code, 0)
        self.assertEqual("".join(lines), "1\n2\n3\n")
        self.assertEqual(callback_threads, {"corral-client"})

        cat = self.c.exec(self.box.id, ["cat"], stdin=True)
        cat.write("typed\n")
        cat.close_stdin()
        self.assertEqual(b"".join(ch.data for ch in cat), b"typed\n")
        watch = self.c.watch_sandbox(self.box.id)
        self.assertEqual(next(iter(watch)).type, "sandbox.created")
        watch.stop()
        self.c.write_file(self.box.id, "/home/agent/s.txt", "sync\n")
        self.assertEqual(self.c.read_text(self.box.id, "/home/agent/s.txt"), "sync\n")
        with self.assertRaises(corral.CorralError) as caught:
            self.c.read_text(self.box.id, "/home/agent/missing")
        self.assertEqual(caught.exception.code, "not_found")

        # A callback that calls the client back: refused at once (it runs in the client's loop).
        errors = []

        def calls_back(text):
            try:
                self.c.list_sandboxes()
            except RuntimeError as error:
                errors.append(str(error))
        self.c.run(self.box.id, "echo x", on_stdout=calls_back)
        self.assertEqual(len(errors), 1)
        self.assertIn("called from one of its callbacks", errors[0])

    def test_a_session_with_a_plain_function_tool_that_calls_the_client(self):
        self.c.write_file(self.box.id, "/home/agent/color", "teal")
        play(scenario("client_tools"))
        seen_threads = []

        @corral.tool(input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
        def page_state(input, context):
            """Reads a key of the page's state"""
            seen_threads.append(threading.current_thread().name)
            self.assertIsInstance(context.session, corral.SyncSession)
            return self.c.read_text(self.box.id, "/home/agent/" + input["key"])

        def broken(input):
            raise RuntimeError("no such state")
        session = self.c.create_session(self.box.id, prompt="what color is it?",
                                        tools=[page_state, corral.ClientTool("broken", broken)])
        result = session.result(timeout=120)
        self.assertEqual(result.text, "The color is teal.")
        self.assertEqual(len(seen_threads), 1)
        self.assertNotEqual(seen_threads[0], "corral-client")
        self.assertEqual(tool_results(main_requests()[1]), [(False, "teal")])
        self.assertIn("broken failed: no such state", tool_results(main_requests()[2])[0][1])
        session.abort()
        end = session.wait(timeout=60)
        self.assertEqual(end.outcome["outcome"], "aborted")
        kinds = [event.kind for event in session]
        self.assertEqual(kinds[-1], "end")
        self.assertEqual(kinds.count("tool_call"), 2)


if __name__ == "__main__":
    unittest.main()
