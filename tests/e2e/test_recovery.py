"""corrald restarts: after `kill -9` and after SIGTERM the sandboxes, their commands, their
streams and their files are still there; what died while the daemon was down is cleaned up;
nothing leaks."""
import base64
import os
import signal
import subprocess
import time
import unittest

import websockets.exceptions

from corral_e2e import (DaemonTestCase, WsClient, init_pids, process_gone, sandbox_cgroups,
                        wait_until)

# Prints 1, 2, 3, ... every 50 ms until the file STOP exists, then "end" (at most ~2 minutes,
# so a failed test cannot leave it running for long).
COUNTER = "i=0; while [ ! -e {stop} ] && [ $i -lt 2000 ]; do i=$((i+1)); echo $i; sleep 0.05; done; echo end"


def counter_argv(stop):
    return ["sh", "-c", COUNTER.format(stop=stop)]


class Stream:
    """What one client saw of one command: its output, the seqs and the exit event."""

    def __init__(self, command):
        self.command = command
        self.data = b""
        self.seqs = []
        self.outcome = None

    def take(self, event):
        if event.get("event") == "output":
            self.data += event["data"]
            self.seqs.append(event["seq"])
        elif event.get("event") == "exit" and event.get("command") == self.command:
            self.seqs.append(event["seq"])
            self.outcome = event["outcome"]

    @property
    def last_seq(self):
        return self.seqs[-1] if self.seqs else 0


async def read_until(client, stream, done, timeout=30):
    """Reads `client`'s events into `stream` until done(stream)."""
    deadline = time.time() + timeout
    while not done(stream):
        left = deadline - time.time()
        if left <= 0:
            raise AssertionError(f"timed out; {stream.command} sent {stream.data[-200:]!r} so far")
        stream.take(await client.next_event(timeout=left))


async def drain_until_closed(client, stream, timeout=15):
    """The daemon died: take what was still in flight, until the connection closes."""
    try:
        while True:
            stream.take(await client.next_event(timeout=timeout))
    except websockets.exceptions.ConnectionClosed:
        return


async def resume(client, stream, test):
    """attach after the last seq `stream` saw. Returns (first seq after a declared gap or None,
    the attach result).

    Across a kill -9 the daemon cannot know what it had delivered, so either answer is right:
    the events that follow (contiguous seqs), or `stream_gap` naming what it still holds (then
    the client takes that and knows it missed something). Silently skipping output is not.
    """
    reply = await client.request("attach", command=stream.command, after_seq=stream.last_seq)
    if reply["ok"]:
        return None, reply["result"]
    test.assertEqual(reply["error"]["code"], "stream_gap", reply)
    first = reply["error"]["first_seq"]
    test.assertGreater(first, stream.last_seq + 1, reply)
    reply = await client.request("attach", command=stream.command, after_seq=first - 1)
    test.assertTrue(reply["ok"], reply)
    return first, reply["result"]


def counter_lines(data):
    return data.decode().split("\n")


class Recovery(DaemonTestCase):
    def setUp(self):
        # A test that failed half way may have left the daemon down.
        if self.daemon.proc.poll() is not None:
            self.daemon.start()
        self.token_ = self.token("rita")

    def http(self, method, path, body=None):
        return self.daemon.http(method, path, self.token_, body)

    def get_state(self, sid):
        status, body = self.http("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(status, 200, body)
        return body["state"]

    async def client(self):
        return await WsClient.connect(self.daemon.ws_url(), self.token_)

    async def run_one(self, sid, argv):
        c = await self.client()
        try:
            return await c.run(sid, argv)
        finally:
            await c.close()

    async def start_command(self, sid, argv, stdin=False):
        c = await self.client()
        reply = await c.request("exec", sandbox=sid, argv=argv, stdin=stdin)
        self.assertTrue(reply["ok"], reply)
        return c, Stream(reply["result"]["command"])

    def assert_counter_resumed(self, before, after, first_after):
        """`before` + `after` is the counter's whole output, or (after a declared gap) a prefix and
        a contiguous tail."""
        lines = counter_lines(before.data + after.data)
        self.assertEqual(lines[-2:], ["end", ""], lines[-5:])
        numbers = [int(x) for x in lines[:-2]]
        if first_after is None:
            self.assertEqual(numbers, list(range(1, len(numbers) + 1)),
                             f"output lost without a stream_gap; seqs before {before.seqs}, after {after.seqs}")
            self.assertEqual(after.seqs, list(range(before.last_seq + 1, before.last_seq + 1 + len(after.seqs))),
                             "seqs after the restart must go on from the last one seen before it (a client "
                             "drops a seq it has already seen)")
        else:
            head = [int(x) for x in counter_lines(before.data)[:-1]]
            tail = [int(x) for x in counter_lines(after.data)[:-2]]
            self.assertEqual(head, list(range(1, len(head) + 1)))
            self.assertEqual(tail, list(range(tail[0], tail[0] + len(tail))))
            self.assertGreater(tail[0], head[-1])
            self.assertEqual(after.seqs, list(range(first_after, first_after + len(after.seqs))))

    async def start_commands_and_files_before_kill_9(self, alive, doomed, stop_file):
        """The commands and files of the kill -9 test: returns its (client, Stream) pairs."""
        # A command that streams, one that waits on stdin, one in the sandbox whose init dies.
        counter_c, counter = await self.start_command(alive, counter_argv(stop_file))
        await read_until(counter_c, counter, lambda s: len(s.seqs) >= 5 and s.data.endswith(b"\n"))
        reader_c, reader = await self.start_command(
            alive, ["sh", "-c", 'read a; echo "first:$a"; read b; echo "second:$b"; echo "$b" > ~/got-stdin'],
            stdin=True)
        self.assertTrue((await reader_c.request("stdin", command=reader.command,
                                                data=base64.b64encode(b"one\n").decode()))["ok"])
        await read_until(reader_c, reader, lambda s: b"first:one\n" in s.data)
        sleeper_c, sleeper = await self.start_command(doomed, ["sleep", "1000"])
        # Files written before the crash, through a command and through the file API.
        out, _, outcome, _ = await self.run_one(alive, ["sh", "-c", "echo by-exec > ~/kept"])
        self.assertEqual(outcome["outcome"], "exited")
        out, _, outcome, _ = await self.run_one(doomed, ["sh", "-c", "echo doomed-data > ~/kept"])
        self.assertEqual(outcome["outcome"], "exited")
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{alive}/fs/write?path=/home/agent/by-api",
                                     self.token_, raw=b"by-api\x00\xff")
        self.assertEqual(status, 200)
        return (counter_c, counter), (reader_c, reader), (sleeper_c, sleeper)

    async def kill_9_while_doomed_init_dies(self, doomed, connections):
        """kill -9 of the daemon; then, while it is down, the doomed sandbox's init dies."""
        doomed_inits = init_pids(self.daemon, doomed)
        self.assertEqual(len(doomed_inits), 1, sandbox_cgroups(self.daemon, doomed))
        self.daemon.kill9()
        # Every client sees its connection go (after whatever was still in flight).
        for c, stream in connections:
            await drain_until_closed(c, stream)
        # While the daemon is down, the doomed sandbox's init dies.
        (init_pid,) = doomed_inits
        os.kill(init_pid, signal.SIGKILL)
        wait_until(lambda: process_gone(init_pid), 10, what=f"corral-init {init_pid} to die")
        return init_pid

    async def resume_after_kill_9(self, alive, counter, reader, stop_file):
        """After the restart: the files, the resumed counter and the reader that gets its stdin."""
        # Files from before the crash.
        out, _, outcome, _ = await self.run_one(alive, ["cat", "/home/agent/kept"])
        self.assertEqual((out, outcome["outcome"]), (b"by-exec\n", "exited"))
        status, data = self.daemon.http("GET", f"/v1/sandboxes/{alive}/fs/read?path=/home/agent/by-api",
                                        self.token_)
        self.assertEqual((status, data), (200, b"by-api\x00\xff"))

        # The streaming command: resume, then end it with a new command.
        counter_c = await self.client()
        after = Stream(counter.command)
        first_after, attached = await resume(counter_c, counter, self)
        self.assertEqual(attached["state"], "running")
        # It keeps counting after the restart.
        await read_until(counter_c, after, lambda s: s.data.count(b"\n") >= 3)
        _, _, outcome, _ = await self.run_one(alive, ["touch", stop_file])
        self.assertEqual(outcome["outcome"], "exited")
        await read_until(counter_c, after, lambda s: s.outcome is not None)
        await counter_c.close()

        # The command waiting on stdin gets the input sent after the restart.
        reader_c = await self.client()
        reader_after = Stream(reader.command)
        await resume(reader_c, reader, self)
        self.assertTrue((await reader_c.request("stdin", command=reader.command,
                                                data=base64.b64encode(b"two\n").decode()))["ok"])
        await read_until(reader_c, reader_after, lambda s: s.outcome is not None)
        await reader_c.close()
        got, _, _, _ = await self.run_one(alive, ["cat", "/home/agent/got-stdin"])
        return after, first_after, reader_after, got

    def test_kill_9_keeps_sandboxes_commands_and_files_and_cleans_what_died(self):
        alive = self.create_sandbox(self.token_, name="alive")["id"]
        doomed = self.create_sandbox(self.token_, name="doomed")["id"]
        stop_file = "/home/agent/stop-counter"

        async def before_and_crash():
            pairs = await self.start_commands_and_files_before_kill_9(alive, doomed, stop_file)
            await self.kill_9_while_doomed_init_dies(doomed, pairs)
            return [stream for _, stream in pairs]

        old_port = self.daemon.port
        counter, reader, sleeper = self.run_async(before_and_crash())
        self.assertNotIn(b"end", counter.data)  # it was still running when the daemon died

        self.daemon.start()  # same state dir, run dir, config and port
        self.assertEqual(self.daemon.port, old_port)

        # The sandbox whose init died while the daemon was down: stopped, and nothing of its
        # running self is left on the host (cgroups, control socket dir, loop device).
        self.assertEqual(self.get_state(doomed), "stopped")
        self.assertEqual(sandbox_cgroups(self.daemon, doomed), [])
        self.assertFalse(os.path.exists(os.path.join(self.daemon.run_dir, "sandboxes", doomed)))
        image = os.path.join(self.daemon.state_dir, "sandboxes", doomed, "disk.img")
        self.assertTrue(os.path.exists(image))  # its files stay
        wait_until(lambda: not loop_devices_of(image), 10, what=f"the loop device of {image} to go")
        status, record = self.http("GET", f"/v1/sandboxes/{doomed}/commands/{sleeper.command}")
        self.assertEqual(status, 200, record)
        self.assertEqual((record["state"], record["outcome"]["outcome"]), ("exited", "lost"), record)
        # Positive control: the live sandbox is running, with its cgroups and run dir.
        self.assertEqual(self.get_state(alive), "running")
        self.assertTrue(sandbox_cgroups(self.daemon, alive))
        self.assertTrue(init_pids(self.daemon, alive))
        self.assertTrue(os.path.exists(os.path.join(self.daemon.run_dir, "sandboxes", alive)))

        after, first_after, reader_after, got = self.run_async(
            self.resume_after_kill_9(alive, counter, reader, stop_file))
        self.assertEqual(after.outcome["outcome"], "exited", after.outcome)
        self.assertEqual(after.outcome["exit_code"], 0)
        status, record = self.http("GET", f"/v1/sandboxes/{alive}/commands/{counter.command}")
        self.assertEqual((status, record["state"], record["outcome"]["outcome"]), (200, "exited", "exited"))
        self.assertEqual(reader_after.outcome.get("exit_code"), 0, reader_after.outcome)
        self.assertEqual(got, b"two\n")  # stdin after the restart reached the command

        # The stopped sandbox starts again, with its files.
        status, body = self.http("POST", f"/v1/sandboxes/{doomed}/start")
        self.assertEqual((status, body["state"]), (200, "running"), body)
        out, _, outcome, _ = self.run_async(self.run_one(doomed, ["cat", "/home/agent/kept"]))
        self.assertEqual(out, b"doomed-data\n")

        self.destroy_all_and_check_nothing_is_left([alive, doomed])

        # Last, what the clients saw of the streams across the crash: all of it, or a gap they
        # were told of.
        self.assert_counter_resumed(counter, after, first_after)
        self.assertEqual(reader_after.data, b"second:two\n",
                         f"seqs before the crash {reader.seqs}, after {reader_after.seqs}")

    def test_sigterm_detaches_and_a_new_daemon_takes_over_seamlessly(self):
        sid = self.create_sandbox(self.token_, name="detached")["id"]
        (init_pid,) = init_pids(self.daemon, sid)
        # Ticks every 50 ms into ~/ticks; prints a counter (and notes it in ~/printed) unless
        # ~/pause exists; ends when ~/stop exists.
        script = ("i=0; t=0; while [ ! -e ~/stop ] && [ $t -lt 3000 ]; do t=$((t+1)); echo $t > ~/ticks; "
                  "if [ ! -e ~/pause ]; then i=$((i+1)); echo $i; echo $i > ~/printed; fi; sleep 0.05; done; "
                  "echo end")

        def read_file(path):
            status, data = self.daemon.http("GET", f"/v1/sandboxes/{sid}/fs/read?path={path}", self.token_)
            self.assertEqual(status, 200, data)
            return data

        def read_ticks_api():
            # The loop rewrites ~/ticks with `echo $t > ~/ticks`: a read can fall between the
            # truncation and the write and see nothing, so an empty read is read again.
            data = b""
            for _ in range(100):
                data = read_file("/home/agent/ticks").strip()
                if data:
                    return int(data)
                time.sleep(0.01)
            self.fail(f"~/ticks stayed empty: {data!r}")

        def fs(op, path):
            status, body = self.daemon.http("PUT" if op == "write" else "POST",
                                            f"/v1/sandboxes/{sid}/fs/{op}?path={path}", self.token_, raw=b"")
            self.assertEqual(status, 200, body)

        async def before_and_stop():
            c, stream = await self.start_command(sid, ["sh", "-c", script])
            await read_until(c, stream, lambda s: len(s.seqs) >= 3 and s.data.endswith(b"\n"))
            # Quiesce the output, and take all of it, so that a clean stop has nothing in flight.
            fs("write", "/home/agent/pause")
            ticks = read_ticks_api()
            wait_until(lambda: read_ticks_api() >= ticks + 2, 10, what="the loop to see ~/pause")
            printed = read_file("/home/agent/printed")
            await read_until(c, stream, lambda s: s.data.endswith(b"\n" + printed) or s.data == printed)
            self.daemon.stop(signal.SIGTERM)
            await drain_until_closed(c, stream)
            return stream

        counter = self.run_async(before_and_stop())
        self.assertEqual(self.daemon.proc.returncode, 0, self.daemon.log()[-2000:])
        self.assertIn("sandboxes keep running", self.daemon.log())

        # With no daemon, the sandbox and its command run on: the tick file keeps growing.
        self.assertFalse(process_gone(init_pid))
        ticks_path = f"/proc/{init_pid}/root/home/agent/ticks"

        def read_ticks():
            try:
                with open(ticks_path) as f:
                    return int(f.read().strip() or 0)
            except (FileNotFoundError, ValueError):
                return 0
        def positive_ticks():
            # The loop rewrites ~/ticks (`echo $t > ~/ticks`): a read can fall between its
            # truncate and its write, as read_ticks_api knows.
            for _ in range(200):
                value = read_ticks()
                if value > 0:
                    return value
                time.sleep(0.01)
            self.fail("~/ticks read through /proc stayed empty")
        seen = positive_ticks()
        self.assertGreater(seen, 0)
        wait_until(lambda: read_ticks() >= seen + 5, 10, what="the command to go on without corrald")

        self.daemon.start()
        self.assertEqual(self.get_state(sid), "running")
        self.assertEqual(init_pids(self.daemon, sid), {init_pid})  # the same init, adopted

        async def after_restart():
            c2 = await self.client()
            after = Stream(counter.command)
            # The client had every event the old daemon numbered, and the daemon stopped cleanly:
            # the stream goes on from there, with no gap.
            reply = await c2.request("attach", command=counter.command, after_seq=counter.last_seq)
            self.assertTrue(reply["ok"], f"resume after {counter.last_seq} following a clean stop: {reply}")
            self.assertEqual(reply["result"]["state"], "running")
            fs("remove", "/home/agent/pause")
            await read_until(c2, after, lambda s: s.data.count(b"\n") >= 3)
            fs("write", "/home/agent/stop")
            await read_until(c2, after, lambda s: s.outcome is not None)
            await c2.close()
            return after

        after = self.run_async(after_restart())
        self.assertEqual((after.outcome["outcome"], after.outcome.get("exit_code")), ("exited", 0), after.outcome)
        self.destroy_all_and_check_nothing_is_left([sid])
        self.assert_counter_resumed(counter, after, None)

    def destroy_all_and_check_nothing_is_left(self, ids):
        for sid in ids:
            status, body = self.http("DELETE", f"/v1/sandboxes/{sid}")
            self.assertEqual((status, body["state"]), (200, "destroyed"), body)
        status, body = self.http("GET", "/v1/sandboxes")
        self.assertEqual(body["sandboxes"], [])
        self.assertEqual(self.daemon.cgroups(), [])
        left = os.listdir(os.path.join(self.daemon.run_dir, "sandboxes")) \
            if os.path.isdir(os.path.join(self.daemon.run_dir, "sandboxes")) else []
        self.assertEqual(left, [])
        for sid in ids:
            self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "sandboxes", sid)))


def loop_devices_of(path):
    out = subprocess.run(["losetup", "-j", path], capture_output=True, text=True, check=True).stdout
    return out.strip()


if __name__ == "__main__":
    unittest.main()
