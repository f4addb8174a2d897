"""The derived session events, typed (docs/PROTOCOL.md "Agent sessions", "Derived events"): the
agent's todo list, the files a turn changed (seen in the workspace, so the Bash tool's count), the
agent awaiting input (a permission prompt, a client tool's call), and each turn's result carrying
its files and their diff summary; result() waits for the daemon's `result` event. The scenarios
are shared with sdk/typescript/test/session_events.test.mjs (tests/e2e/sdk_scenarios.json); the
real Claude Code CLI in a real sandbox, the scripted Messages API behind corrald's relay."""
import corral
from helpers import DaemonTest, ai_budget, play, scenario

MADE = ["/home/agent/b.txt", "/home/agent/notes", "/home/agent/notes/a.md"]


class SessionEvents(DaemonTest):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.c = self.client("py-events", {"budget": ai_budget()})
        self.box = await self.sandbox(self.c, name="events")

    async def test_todo_file_change_and_the_turns_result_with_its_files_arrive_typed_in_order(self):
        play(scenario("events_notes"))
        todos, changes, order, results = [], [], [], []
        session = self.c.prepare_session(self.box.id)
        session.on("todo", lambda e: (todos.append(e), order.append("todo")))
        session.on("file_change", lambda e: (changes.append(e), order.append("file_change")))
        session.on("result", lambda r: (results.append(r), order.append("result")))
        await session.start("make notes")
        result = await self.within(session.result(), 120, "the turn's result")

        self.assertTrue(all(isinstance(e, corral.TodoEvent) for e in todos))
        self.assertEqual([list(e.todos) for e in todos],
                         [[corral.TodoItem("Make notes", "in_progress", "Make notes...")],
                          [corral.TodoItem("Make notes", "completed", "Make notes...")]])
        self.assertEqual(session.todos, list(todos[1].todos))
        self.assertTrue(all(isinstance(e, corral.FileChangeEvent) for e in changes))
        self.assertEqual(sorted(e.path for e in changes), MADE)
        self.assertTrue(all(e.change == "create" for e in changes))
        by_path = {e.path: e for e in changes}
        self.assertEqual(by_path["/home/agent/notes"].type, "dir")
        self.assertEqual(by_path["/home/agent/b.txt"].file, corral.FileChange("/home/agent/b.txt", "create", "file", 2))
        self.assertEqual(sorted(session.changed_files), MADE)

        self.assertIsInstance(result, corral.TurnResult)
        self.assertEqual(result.text, "Notes made.")
        self.assertFalse(result.is_error)
        self.assertEqual(result.turn, 1)
        self.assertEqual(sorted((f.path, f.change) for f in result.files), [(p, "create") for p in MADE])
        self.assertEqual(result.diff, corral.DiffSummary(files=3, created=3, modified=0, deleted=0, truncated=False,
                                                         observed=True))
        self.assertGreater(result.cost_usd, 0, "the agent's own figures come along")
        self.assertEqual(results, [result], "the result listener gets the same TurnResult, once")
        # The daemon's result event ends the turn: after the agent's result line and the last change.
        self.assertEqual(order[-1], "result")
        ends = [e for e in session.history if isinstance(e, corral.ResultEvent)]
        self.assertEqual(len(ends), 1)
        line = next(e for e in session.history if isinstance(e, corral.AgentEvent) and e.type == "result")
        self.assertLess(line.seq, ends[0].seq)
        self.assertEqual(ends[0].subtype, "success")

        # The next turn's result holds only its own changes.
        play(scenario("events_remove"))
        second = await self.within(session.turn("remove b.txt"), 120, "the second turn")
        self.assertEqual(second.turn, 2)
        self.assertEqual([(f.path, f.change, f.size) for f in second.files], [("/home/agent/b.txt", "delete", 0)])
        self.assertEqual(second.diff.deleted, 1)
        self.assertEqual(session.changed_files["/home/agent/b.txt"].change, "delete")
        await session.abort()
        await session.wait()

    async def test_a_permission_prompt_is_awaiting_input_until_the_handler_answers(self):
        play(scenario("events_permission"))
        waiting, asked = [], []

        def decide(request, session):
            asked.append(request.call)
            return True
        session = self.c.prepare_session(self.box.id, permission_mode="default", on_permission=decide)
        session.on("awaiting_input", waiting.append)
        await session.start("ask first")
        result = await self.within(session.result(), 120, "the turn's result")
        self.assertEqual([(w.reason, w.name) for w in waiting], [("permission", "Bash")])
        self.assertIsInstance(waiting[0], corral.AwaitingInputEvent)
        request = next(e for e in session.history if isinstance(e, corral.PermissionRequestEvent))
        self.assertEqual(waiting[0].call, request.call)
        self.assertEqual(asked, [request.call])
        self.assertEqual([f.path for f in result.files], ["/home/agent/asked.txt"])
        await session.abort()
        await session.wait()

    async def test_a_client_tools_call_is_awaiting_input_and_a_turn_without_changes_has_none(self):
        play(scenario("events_client_tool"))

        @corral.tool()
        def lookup(input):
            """Looks a key up"""
            return "teal"
        session = self.c.prepare_session(self.box.id, tools=[lookup])
        await session.start("look it up")
        result = await self.within(session.result(), 120, "the turn's result")
        self.assertEqual(result.text, "Looked it up.")
        waiting = [e for e in session.history if isinstance(e, corral.AwaitingInputEvent)]
        call = next(e for e in session.history if isinstance(e, corral.ToolCallEvent))
        self.assertEqual([(w.reason, w.name, w.call) for w in waiting], [("tool", "lookup", call.call)])
        # Control for the first test: nothing was written, so nothing changed.
        self.assertEqual(result.files, ())
        self.assertEqual(result.diff, corral.DiffSummary(observed=True))
        self.assertEqual(session.changed_files, {})
        await session.abort()
        await session.wait()
