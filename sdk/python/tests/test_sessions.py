"""Agent sessions through the SDK (the scenarios of sdk/typescript/test/sessions.test.mjs, from
tests/e2e/sdk_scenarios.json): the real Claude Code CLI in a real sandbox, its model calls
answered by the scripted Messages API server behind corrald's relay. Events arrive as an async
iterator of typed events and as callbacks; a turn's result carries its cost and the session's
ledger matches the scripted usage to the micro-dollar; resume continues the history, fork
diverges; client tools written as Python functions are called by the agent and their answers
reach the model; a permission callback denies one tool use and allows another."""
import asyncio

import corral
from helpers import (DaemonTest, ENV, ai_budget, main_requests, micro_usd, play, scenario, tool_results, usd,
                     user_texts)


class Sessions(DaemonTest):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.c = self.client("py-agent", {"budget": ai_budget()})
        self.box = await self.sandbox(self.c, name="agent")

    async def test_events_stream_the_turns_result_has_its_cost_and_the_ledger_matches(self):
        turns = scenario("file_turn")
        play(turns)
        texts, uses, outputs, states = [], [], [], []
        session = self.c.prepare_session(self.box.id)
        session.on("text", texts.append)
        session.on("tool_use", uses.append)
        session.on("tool_output", outputs.append)
        session.on("state", states.append)
        await session.start("create hello.txt containing hi")
        self.assertTrue(session.id.startswith("ses_"))

        result = await self.within(session.result(), 120, "the first turn's result")
        self.assertIsInstance(result, corral.TurnResult)
        self.assertFalse(result.is_error)
        self.assertEqual(result.text, "Created hello.txt.")
        self.assertGreater(result.cost_usd, 0, "the CLI's own estimate of the cost")
        self.assertEqual(texts, ["I'll create the file.", "Created hello.txt."])
        self.assertEqual([(u.name, u.input["command"]) for u in uses], [("Bash", "echo hi > hello.txt")])
        self.assertEqual([o.id for o in outputs], [uses[0].id])
        self.assertIn("processing", states)
        self.assertEqual(await self.c.read_text(self.box.id, "/home/agent/hello.txt"), "hi\n")

        # The relay's ledger: each scripted call's usage, priced, to the micro-dollar.
        expected = usd(sum(micro_usd(t["usage"]) for t in turns))
        self.assertEqual(session.cost_usd, expected)
        self.assertEqual((await self.c.get_session(session.id)).cost_usd, expected)
        self.assertEqual((await self.c.usage()).session_cost(session.id), expected)
        metered = [e for e in session.history if isinstance(e, corral.UsageEvent)]
        self.assertEqual([e.output_tokens for e in metered], [t["usage"]["output_tokens"] for t in turns])

        play(scenario("second_turn"))
        second = await self.within(session.turn("are you there?"), 120, "the second turn")
        self.assertEqual(second.text, "Still here.")
        self.assertTrue(any("create hello.txt containing hi" in t for t in user_texts(main_requests()[0])))

        await session.close()
        end = await self.within(session.wait(), 60, "the session's end")
        self.assertIsInstance(end, corral.EndEvent)
        self.assertEqual(end.outcome["outcome"], "completed")
        self.assertEqual(session.state, "completed")

        # The iterator replays what this object received, in order, typed, ending with the end.
        events = [event async for event in session]
        self.assertIsInstance(events[-1], corral.EndEvent)
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)))
        agent_types = [e.type for e in events if isinstance(e, corral.AgentEvent)]
        self.assertEqual(agent_types[0], "system")
        self.assertEqual(agent_types.count("result"), 2)
        self.assertTrue(any(isinstance(e, corral.UserEvent) and "are you there?" in str(e.raw) for e in events))
        for request in main_requests():
            self.assertEqual(request["headers"]["x-api-key"], ENV["real_key"])
        # A finished session refuses a turn with the API's code.
        with self.assertRaises(corral.CorralError) as caught:
            await session.turn("more?")
        self.assertEqual(caught.exception.code, "conflict")

    async def test_resume_continues_the_history_fork_diverges_and_follow_replays(self):
        play(scenario("remember"))
        first = await self.c.create_session(self.box.id, prompt="remember PELICAN")
        self.assertEqual((await self.within(first.result(), 120, "first")).text, "noted: the word is PELICAN")
        await first.close()
        await self.within(first.wait(), 60, "first's end")

        play(scenario("recall"))
        resumed = await self.c.resume_session(first.id, prompt="what was it?")
        self.assertEqual(resumed.id, first.id)
        self.assertEqual((await self.within(resumed.result(), 120, "resumed")).text, "it was PELICAN")
        texts = user_texts(main_requests()[0])
        self.assertTrue(any("remember PELICAN" in t for t in texts), texts)
        self.assertTrue(any("what was it?" in t for t in texts), texts)

        # Another client follows the same running session from its first event.
        watcher = self.client("py-agent", {"budget": ai_budget()})
        followed = await watcher.follow_session(first.id)
        await resumed.close()
        end = await self.within(followed.wait(), 60, "the followed session's end")
        self.assertEqual(end.outcome["outcome"], "completed")
        self.assertEqual([e.seq for e in followed.history], list(range(1, len(followed.history) + 1)))
        self.assertTrue(any(isinstance(e, corral.AgentEvent) and e.type == "result" for e in followed.history))
        await resumed.wait()

        play(scenario("fork"))
        fork = await self.c.fork_session(first.id, prompt="only in the fork")
        self.assertNotEqual(fork.id, first.id)
        await self.within(fork.result(), 120, "fork")
        self.assertEqual((await self.c.get_session(fork.id)).parent, first.id)
        self.assertTrue(any("remember PELICAN" in t for t in user_texts(main_requests()[0])))
        await fork.close()
        await fork.wait()

        play(scenario("again"))
        again = await self.c.resume_session(first.id, prompt="and now?")
        await self.within(again.result(), 120, "again")
        texts = user_texts(main_requests()[0])
        self.assertTrue(any("what was it?" in t for t in texts), texts)
        self.assertFalse(any("only in the fork" in t for t in texts), texts)
        await again.abort()
        aborted = await self.within(again.wait(), 60, "abort")
        self.assertEqual(aborted.outcome["outcome"], "aborted")
        self.assertIn(fork.id, [s.id for s in await self.c.list_sessions(self.box.id)])

    async def test_client_tools_written_as_python_functions_are_called_by_the_agent(self):
        play(scenario("client_tools"))
        calls = []

        @corral.tool(input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
        async def page_state(input, context):
            """Reads a key of the page's state"""
            calls.append((input, context.call))
            return {"color": "teal"}.get(input["key"], "unknown")

        session = self.c.prepare_session(self.box.id, tools=[page_state])

        @session.tool()
        def broken(input):
            raise RuntimeError("no such state")
        with self.assertRaisesRegex(ValueError, "A-Z a-z 0-9"):
            session.register_tool(corral.ClientTool("bad name!", lambda i: ""))
        with self.assertRaisesRegex(ValueError, "registered already"):
            session.register_tool(corral.ClientTool("page_state", lambda i: ""))
        await session.start("what color is it?")
        with self.assertRaisesRegex(RuntimeError, "has started"):
            session.register_tool(corral.ClientTool("late", lambda i: ""))

        result = await self.within(session.result(), 120, "the tool turn")
        self.assertEqual(result.text, "The color is teal.")
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][0], {"key": "color"})
        requests = main_requests()
        offered = {t["name"]: t for t in requests[0]["body"]["tools"]}
        self.assertEqual(offered["mcp__corral__page_state"]["input_schema"]["required"], ["key"])
        self.assertEqual(offered["mcp__corral__page_state"]["description"], "Reads a key of the page's state")
        self.assertEqual(tool_results(requests[1]), [(False, "teal")])
        failed = tool_results(requests[2])
        self.assertEqual(len(failed), 1)
        self.assertTrue(failed[0][0])
        self.assertIn("broken failed: no such state", failed[0][1])
        tool_calls = [e for e in session.history if isinstance(e, corral.ToolCallEvent)]
        self.assertEqual([(e.name, e.call) for e in tool_calls][0], ("page_state", calls[0][1]))
        answered = [e for e in session.history if isinstance(e, corral.ToolResultEvent)]
        self.assertEqual([e.is_error for e in answered], [False, True])
        await session.abort()
        await session.wait()

    async def test_a_permission_callback_denies_one_tool_use_and_allows_another(self):
        play(scenario("permissions"))
        asked = []

        def decide(request, session):
            asked.append(request.tool_name)
            if "allowed.txt" in request.input.get("command", ""):
                return True
            return corral.PermissionAnswer(False, "not that one")
        session = await self.c.create_session(self.box.id, prompt="write two files", permission_mode="default",
                                              on_permission=decide)
        result = await self.within(session.result(), 120, "the turn with permission requests")
        self.assertEqual(result.text, "done")
        self.assertEqual(asked, ["Bash", "Bash"])
        self.assertEqual(len([e for e in session.history if isinstance(e, corral.PermissionRequestEvent)]), 2)
        self.assertEqual(len([e for e in session.history if isinstance(e, corral.PermissionAnswerEvent)]), 2)
        # Denied: never ran, and the agent was told why; allowed: ran in the sandbox.
        with self.assertRaises(corral.CorralError) as caught:
            await self.c.stat(self.box.id, "/home/agent/denied.txt")
        self.assertEqual(caught.exception.code, "not_found")
        self.assertEqual(await self.c.read_text(self.box.id, "/home/agent/allowed.txt"), "yes\n")
        self.assertIn("not that one", tool_results(main_requests()[1])[0][1])
        await session.abort()
        await session.wait()

    async def test_an_interrupted_turn_is_an_error_and_an_abort_ends_a_waiting_turn(self):
        play(scenario("slow"))
        session = await self.c.create_session(self.box.id, prompt="take your time")
        for _ in range(600):
            if main_requests():
                break
            await asyncio.sleep(0.1)
        await session.interrupt()
        result = await self.within(session.result(), 60, "the interrupted turn")
        self.assertTrue(result.is_error)
        play(scenario("slow"))
        pending = asyncio.ensure_future(session.turn("one more"))
        await asyncio.sleep(0.5)
        await session.abort()
        with self.assertRaises(corral.SessionEndedError) as caught:
            await self.within(pending, 60, "abort")
        self.assertEqual(caught.exception.outcome["outcome"], "aborted")
        self.assertEqual(caught.exception.code, "session_ended")
