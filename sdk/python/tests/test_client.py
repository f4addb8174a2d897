"""The SDK against a real corrald (the scenarios of sdk/typescript/test/client.test.mjs, and what
only this SDK has): tokens from create_token verify; scopes reach corrald; sandboxes are made,
listed, run commands whose output streams as an async iterator and through callbacks, and are
destroyed; stdin, signals, a PTY; files, tar archives both ways; snapshots and forks; egress
rules and the event log; errors are CorralErrors with the API's codes."""
import io
import os
import tarfile
import tempfile

import corral
from helpers import ENV, DaemonTest


class Client(DaemonTest):
    async def test_a_token_from_create_token_verifies_and_a_wrong_secret_is_unauthorized(self):
        self.assertEqual(await self.client("py-alice").list_sandboxes(), [])
        forged = corral.AsyncCorral(ENV["url"], corral.create_token(issuer=ENV["issuer"], secret="x" * 43, user_id="py-alice"))
        self.addAsyncCleanup(forged.close)
        with self.assertRaises(corral.CorralError) as caught:
            await forged.list_sandboxes()
        self.assertEqual((caught.exception.code, caught.exception.status), ("unauthorized", 401))
        self.assertTrue(caught.exception.request_id)
        with self.assertRaisesRegex(ValueError, "at least 32 bytes"):
            corral.create_token(issuer=ENV["issuer"], secret="short", user_id="u")

    async def test_scopes_and_budget_reach_corrald(self):
        read_only = self.client("py-scoped", {"scopes": ["exec"]})
        with self.assertRaises(corral.CorralError) as caught:
            await read_only.create_sandbox(start=False)
        self.assertEqual((caught.exception.code, caught.exception.status), ("forbidden", 403))
        # Positive control: the default scopes may create.
        full = self.client("py-scoped", {"budget": corral.TokenBudget(window="day", compute_seconds=3600)})
        sandbox = await self.sandbox(full, start=False, name="scoped")
        self.assertEqual(sandbox.state, "created")
        self.assertEqual((await full.usage()).compute["budget_s"], 3600)

    async def test_a_sandbox_runs_commands_whose_output_streams_and_is_destroyed(self):
        c = self.client("py-bob")
        sandbox = await c.create_sandbox(name="sdk", egress={"domains": []})
        try:
            self.assertEqual(sandbox.state, "running")
            self.assertEqual(sandbox.network, "loopback")
            self.assertIsInstance(sandbox.limits, corral.SandboxLimits)
            self.assertEqual([s.id for s in await c.list_sandboxes()], [sandbox.id])
            self.assertEqual((await c.get_sandbox(sandbox.id)).name, "sdk")

            # Output as an async iterator and, at once, through the callbacks.
            by_callback = {"out": "", "err": ""}
            command = await c.exec(sandbox.id, ["sh", "-c", "echo one; sleep 0.2; echo two >&2; printf 'caf\\303'; "
                                                "sleep 0.2; printf '\\251\\n'; exit 3"],
                                   on_stdout=lambda t: by_callback.__setitem__("out", by_callback["out"] + t),
                                   on_stderr=lambda t: by_callback.__setitem__("err", by_callback["err"] + t))
            seen = [(chunk.fd, chunk.data) async for chunk in command]
            outcome = await command.wait()
            self.assertEqual((outcome.outcome, outcome.exit_code), ("exited", 3))
            self.assertGreater(outcome.wall_s, 0.3)
            self.assertEqual(b"".join(d for fd, d in seen if fd == 1), "one\ncafé\n".encode())
            self.assertEqual(b"".join(d for fd, d in seen if fd == 2), b"two\n")
            self.assertGreaterEqual(len([1 for fd, _ in seen if fd == 1]), 3, "streamed in several chunks")
            # The é split across two chunks is decoded whole.
            self.assertEqual(by_callback, {"out": "one\ncafé\n", "err": "two\n"})

            ran = await c.run(sandbox.id, ["id", "-un"])
            self.assertEqual((ran.stdout, ran.exit_code), ("agent\n", 0))
            self.assertEqual((await c.run(sandbox.id, ["id", "-un"], user="root")).stdout, "root\n")
            self.assertEqual((await c.run(sandbox.id, "echo $X $PWD", env={"X": "from-env"}, cwd="/tmp")).stdout,
                             "from-env /tmp\n")
            records = await c.list_commands(sandbox.id)
            self.assertIn(command.id, [r["id"] for r in records])
            self.assertEqual((await c.get_command(sandbox.id, command.id))["outcome"]["exit_code"], 3)

            stopped = await c.stop_sandbox(sandbox.id)
            self.assertEqual(stopped.state, "stopped")
            with self.assertRaises(corral.CorralError) as caught:
                await c.run(sandbox.id, ["true"])
            self.assertEqual(caught.exception.code, "conflict")
            self.assertEqual((await c.start_sandbox(sandbox.id)).state, "running")
            self.assertEqual((await c.run(sandbox.id, ["true"])).exit_code, 0)
        finally:
            await c.destroy_sandbox(sandbox.id)
        with self.assertRaises(corral.CorralError) as caught:
            await c.get_sandbox(sandbox.id)
        self.assertEqual((caught.exception.code, caught.exception.status), ("not_found", 404))

    async def test_errors_over_the_websocket_are_corral_errors_too(self):
        c = self.client("py-carol")
        with self.assertRaises(corral.CorralError) as caught:
            await c.exec("sb_aaaaaaaaaaaaaaaaaaaa", ["true"])
        self.assertEqual((caught.exception.code, caught.exception.status), ("not_found", None))
        with self.assertRaisesRegex(ValueError, "argv must not be empty"):
            await c.exec("sb_aaaaaaaaaaaaaaaaaaaa", [])
        # Another user's sandbox is not found either, exactly like a missing one.
        owner = self.client("py-dave")
        theirs = await self.sandbox(owner, start=False)
        with self.assertRaises(corral.CorralError) as caught:
            await c.get_sandbox(theirs.id)
        self.assertEqual(caught.exception.code, "not_found")

    async def test_files_and_tar_archives_both_ways(self):
        c = self.client("py-files")
        sandbox = await self.sandbox(c, name="files")
        await c.mkdir(sandbox.id, "/home/agent/a/b", parents=True)
        data = bytes([0, 1, 2, 250, 255])
        written = await c.write_file(sandbox.id, "/home/agent/a/b/bin", data)
        self.assertEqual((written.path, written.size), ("/home/agent/a/b/bin", 5))
        self.assertEqual(await c.read_file(sandbox.id, "/home/agent/a/b/bin"), data)
        await c.write_file(sandbox.id, "/home/agent/a/note.txt", "one\n", mode=0o600)
        await c.write_file(sandbox.id, "/home/agent/a/note.txt", "two\n", append=True)
        self.assertEqual(await c.read_text(sandbox.id, "/home/agent/a/note.txt"), "one\ntwo\n")
        stat = await c.stat(sandbox.id, "/home/agent/a/note.txt")
        self.assertEqual((stat.type, stat.size, stat.mode), ("file", 8, "0600"))
        self.assertEqual((await c.run(sandbox.id, ["stat", "-c", "%U", "/home/agent/a/note.txt"])).stdout, "agent\n")
        await c.rename(sandbox.id, "/home/agent/a/note.txt", "/home/agent/a/renamed.txt")
        self.assertEqual([(e.name, e.type) for e in await c.list_dir(sandbox.id, "/home/agent/a")],
                         [("b", "dir"), ("renamed.txt", "file")])
        for call, code, status in ((c.read_file(sandbox.id, "/home/agent/a/note.txt"), "not_found", 404),
                                   (c.read_file(sandbox.id, "/proc/1/environ"), "forbidden", 403),
                                   (c.mkdir(sandbox.id, "/home/agent/a"), "conflict", 409)):
            with self.assertRaises(corral.CorralError) as caught:
                await call
            self.assertEqual((caught.exception.code, caught.exception.status), (code, status))

        # A tar archive down: the directory's contents, as tarfile reads them.
        archive = tarfile.open(fileobj=io.BytesIO(await c.download_tar(sandbox.id, "/home/agent/a")))
        names = sorted(m.name.rstrip("/").removeprefix("./") for m in archive.getmembers())
        self.assertEqual([n for n in names if n], ["b", "b/bin", "renamed.txt"])
        # And up: a local directory, through upload_dir, then back with download_dir.
        with tempfile.TemporaryDirectory() as local:
            os.makedirs(os.path.join(local, "up", "deep"))
            with open(os.path.join(local, "up", "deep", "x.txt"), "w") as f:
                f.write("uploaded\n")
            os.symlink("deep/x.txt", os.path.join(local, "up", "link"))
            await c.mkdir(sandbox.id, "/home/agent/up")
            self.assertGreaterEqual(await c.upload_dir(sandbox.id, os.path.join(local, "up"), "/home/agent/up"), 3)
            self.assertEqual(await c.read_text(sandbox.id, "/home/agent/up/deep/x.txt"), "uploaded\n")
            self.assertEqual((await c.stat(sandbox.id, "/home/agent/up/link")).type, "symlink")
            self.assertEqual((await c.run(sandbox.id, "cat /home/agent/up/link")).stdout, "uploaded\n")
            back = os.path.join(local, "back")
            await c.download_dir(sandbox.id, "/home/agent/up", back)
            with open(os.path.join(back, "deep", "x.txt")) as f:
                self.assertEqual(f.read(), "uploaded\n")
            self.assertEqual(os.readlink(os.path.join(back, "link")), "deep/x.txt")
        # An archive whose entry leaves the directory is refused by corrald.
        evil = io.BytesIO()
        with tarfile.open(fileobj=evil, mode="w") as t:
            info = tarfile.TarInfo("../escaped.txt")
            info.size = 3
            t.addfile(info, io.BytesIO(b"bad"))
        with self.assertRaises(corral.CorralError) as caught:
            await c.upload_tar(sandbox.id, "/home/agent/up", evil.getvalue())
        self.assertEqual(caught.exception.code, "bad_request")
        with self.assertRaises(corral.CorralError):
            await c.stat(sandbox.id, "/home/agent/escaped.txt")

        await c.remove(sandbox.id, "/home/agent/a", recursive=True)
        with self.assertRaises(corral.CorralError) as caught:
            await c.stat(sandbox.id, "/home/agent/a")
        self.assertEqual(caught.exception.code, "not_found")

    async def test_a_snapshot_outlives_its_sandbox_and_a_fork_copies_a_running_one(self):
        c = self.client("py-snap")
        first = await self.sandbox(c, name="original")
        await c.write_file(first.id, "/home/agent/state.txt", "v1\n")
        snap = await c.snapshot(first.id)
        self.assertTrue(snap.id.startswith("snap_"))
        self.assertEqual(snap.sandbox, first.id)
        self.addAsyncCleanup(self._delete_snapshots, c)
        self.assertEqual([s.id for s in await c.list_snapshots()], [snap.id])

        await c.write_file(first.id, "/home/agent/state.txt", "v2\n")
        fork = await c.fork_sandbox(first.id, name="fork")
        self.addAsyncCleanup(c.destroy_sandbox, fork.id)
        self.assertEqual((fork.source, fork.state), (first.id, "running"))
        self.assertEqual(await c.read_text(fork.id, "/home/agent/state.txt"), "v2\n")
        await c.write_file(fork.id, "/home/agent/state.txt", "fork\n")
        self.assertEqual(await c.read_text(first.id, "/home/agent/state.txt"), "v2\n")

        await c.destroy_sandbox(first.id)
        restored = await self.sandbox(c, name="restored", snapshot=snap.id)
        self.assertEqual(await c.read_text(restored.id, "/home/agent/state.txt"), "v1\n")
        await c.delete_snapshot(snap.id)
        self.assertEqual(await c.list_snapshots(), [])

    async def _delete_snapshots(self, c):
        for snap in await c.list_snapshots():
            await c.delete_snapshot(snap.id)

    async def test_a_command_takes_stdin_a_signal_and_a_pty_of_the_size_asked(self):
        c = self.client("py-stdin")
        sandbox = await self.sandbox(c, name="stdin")
        cat = await c.exec(sandbox.id, ["sh", "-c", "tr a-z A-Z"], stdin=True)
        await cat.write("hello ")
        await cat.write("world\n".encode())
        await cat.close_stdin()
        self.assertEqual(b"".join([chunk.data async for chunk in cat]), b"HELLO WORLD\n")
        self.assertEqual((await cat.wait()).exit_code, 0)

        sleeper = await c.exec(sandbox.id, ["sleep", "60"])
        await sleeper.signal("TERM")
        outcome = await self.within(sleeper.wait(), 30, "the signalled command")
        self.assertEqual((outcome.outcome, outcome.signal), ("signaled", 15))

        tty = await c.exec(sandbox.id, ["sh", "-c", "stty size; test -t 0 && echo tty; read line; stty size"],
                           pty=(33, 101))
        screen = b""
        async for chunk in tty:
            screen += chunk.data
            if b"tty" in screen and b"resized" not in screen:
                await tty.resize(40, 120)
                await tty.write("resized\n")
                screen += b"resized"
        self.assertRegex(screen.decode(), r"33 101\r?\n")
        self.assertRegex(screen.decode(), r"40 120\r?\n")

    async def test_egress_rules_and_the_sandbox_event_log(self):
        c = self.client("py-egress")
        sandbox = await self.sandbox(c, egress={"domains": ["example.test"]})
        self.assertEqual(sandbox.egress.domains, ["example.test"])
        rules = await c.set_egress(sandbox.id, domains=["a.test", "*.b.test"], ports=[443])
        self.assertEqual((sorted(rules.domains), rules.ports), (["*.b.test", "a.test"], [443]))
        self.assertEqual(sorted((await c.get_egress(sandbox.id)).domains), ["*.b.test", "a.test"])
        await c.run(sandbox.id, ["true"])
        log = await c.sandbox_events(sandbox.id)
        types = [e.type for e in log.events]
        self.assertIn("sandbox.created", types)
        self.assertEqual(log.last_seq, log.events[-1].seq)
        self.assertEqual([e.seq for e in log.events], sorted(e.seq for e in log.events))
        later = await c.sandbox_events(sandbox.id, after_seq=log.events[0].seq, limit=1)
        self.assertEqual(len(later.events), 1)
        self.assertEqual(later.events[0].seq, log.events[1].seq)
        self.assertTrue(later.more)

    async def test_the_event_log_followed_live_across_a_dropped_connection(self):
        c = self.client("py-watch")
        sandbox = await self.sandbox(c)
        watch = await c.watch_sandbox(sandbox.id)
        events = aiter(watch)
        first = await self.within(anext(events), 10, "the log's first event")
        self.assertEqual(first.type, "sandbox.created")
        await c.run(sandbox.id, ["true"])
        await c.connection.drop()  # a reconnect: the watch goes on after the last event seen
        await c.set_egress(sandbox.id, domains=["watched.test"])
        seen = [first]
        while not any(e.type == "sandbox.egress" for e in seen):
            seen.append(await self.within(anext(events), 10, "the egress rule change"))
        self.assertGreaterEqual(c.connection.reconnects, 1)
        self.assertEqual([e.seq for e in seen], sorted({e.seq for e in seen}), "in order, each once")
        self.assertIn("watched.test", str(seen[-1].data))  # the new rules
        # Control: the log over HTTP holds the same events.
        logged = (await c.sandbox_events(sandbox.id)).events
        self.assertEqual([e.seq for e in logged][:len(seen)], [e.seq for e in seen])
        await watch.stop()
        self.assertEqual([e async for e in watch], [])

