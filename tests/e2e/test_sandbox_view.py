"""What a program in a corrald sandbox sees of itself (issue 16 §5), through the API as users run it:
its own stdio, reopenable by path as in a container; its own cgroup at /sys/fs/cgroup, read-only and
nothing else of the hierarchy; CPUs and memory that follow the sandbox's limits, as Node, Python and
nproc read them. The agent's own stdio stays out of reach: test_sessions.py, the forging test."""
import os
import unittest

from corral_e2e import DaemonTestCase, WsClient

# Every way a program names its own stdio.
REOPEN = ("echo out >/dev/stdout && echo err >/dev/stderr && echo fd >/proc/self/fd/1 && echo fd2 >/dev/fd/2 && "
          "echo tee | tee /dev/stderr && python3 -c 'open(\"/dev/stdout\", \"w\").write(\"py\\n\")' && cat /dev/stdin")

NODE = "console.log(process.constrainedMemory(), require('os').availableParallelism())"
MEMORY_MAX = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"


class CommandStdio(DaemonTestCase):
    def test_a_command_reopens_its_own_stdio_by_path_as_agent_and_as_root(self):
        token = self.token("stdio")
        sandbox = self.create_sandbox(token)

        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return [await c.run(sandbox["id"], ["sh", "-c", REOPEN], stdin=b"in\n", user=user)
                        for user in ("agent", "root")]
            finally:
                await c.close()
        for user, (out, err, outcome, _) in zip(("agent", "root"), self.run_async(go())):
            self.assertEqual(outcome["outcome"], "exited", (user, err))
            self.assertEqual(outcome["exit_code"], 0, (user, err))
            self.assertEqual(out, b"out\nfd\ntee\npy\nin\n", user)
            self.assertEqual(err, b"err\nfd2\ntee\n", user)

    def test_a_terminal_command_reopens_its_terminal(self):
        token = self.token("pty")
        sandbox = self.create_sandbox(token)

        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sandbox["id"], ["sh", "-c", "echo out >/dev/stdout; echo err >/dev/stderr; "
                                                   "echo tty >$(tty); stat -L -c %U /dev/stdout"],
                                   pty={"rows": 24, "cols": 80})
            finally:
                await c.close()
        out, _, outcome, _ = self.run_async(go())
        self.assertEqual(outcome.get("exit_code"), 0, out)
        self.assertEqual(out.replace(b"\r\n", b"\n"), b"out\nerr\ntty\nagent\n")

    def test_another_user_in_the_sandbox_cannot_open_a_commands_stdio(self):
        # The pipes are the command's user's (mode 0600) and reopening needs ptrace access to a
        # process that holds them: root inside (no capabilities) is another user.
        token = self.token("other-user")
        sandbox = self.create_sandbox(token)
        target = "/proc/$(pgrep -u agent -x sleep)/fd/1"

        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await c.request("exec", sandbox=sandbox["id"], argv=["sh", "-c", "exec sleep 60"])
                assert reply["ok"], reply
                sleeper, channel = reply["result"]["command"], reply["result"]["channel"]
                for _ in range(100):
                    out, _, _, _ = await c.run(sandbox["id"], ["sh", "-c", "pgrep -u agent -x sleep || true"])
                    if out.strip():
                        break
                # (c.run collects every output event on this connection; the sleeper's are told
                # apart by their channel below.)
                as_root = await c.run(sandbox["id"], ["sh", "-c", f"echo forged > {target} || echo refused"],
                                      user="root")
                as_agent = await c.run(sandbox["id"], ["sh", "-c", f"echo same-user > {target} && echo wrote"])
                await c.request("signal", command=sleeper, signal="KILL")
                seen = b""
                for event in c.events:
                    if event.get("event") == "output" and event["channel"] == channel:
                        seen += event["data"]
                while True:
                    event = await c.next_event()
                    if event.get("event") == "output" and event["channel"] == channel:
                        seen += event["data"]
                    if event.get("event") == "exit" and event.get("command") == sleeper:
                        return as_root, as_agent, seen
            finally:
                await c.close()
        (root_out, root_err, _, _), (agent_out, agent_err, _, _), seen = self.run_async(go())
        self.assertNotIn(b"forged", root_out + agent_out + seen)
        self.assertIn(b"refused\n", root_out)
        self.assertIn(b"Permission denied", root_err)
        # Control: the command's own user can, as in a container: it reached the sleeper's stdout.
        self.assertIn(b"wrote\n", agent_out, agent_err)
        self.assertIn(b"same-user\n", agent_out + seen)

class SandboxLimits(DaemonTestCase):
    def run_in(self, token, sandbox, script, **fields):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sandbox["id"], ["sh", "-c", script], **fields)
            finally:
                await c.close()
        out, err, outcome, _ = self.run_async(go())
        return out.decode(), err.decode(), outcome

    @unittest.skipUnless(os.access("/usr/bin/node", os.X_OK), "no /usr/bin/node on this host")
    def test_node_python_and_nproc_see_the_sandboxs_own_limits(self):
        token = self.token("limits")
        small = self.create_sandbox(token, limits={"memory_bytes": 256 << 20, "cpus": 1})
        big = self.create_sandbox(token, limits={"memory_bytes": 384 << 20, "cpus": 0.5})
        script = (f"node -e \"{NODE}\"; nproc; python3 -c 'import os; print(os.cpu_count())'; {MEMORY_MAX}")
        out, err, _ = self.run_in(token, small, script)
        self.assertEqual(out, f"{256 << 20} 1\n1\n1\n{256 << 20}\n", err)
        # Control: another sandbox, other limits, its own figures.
        out, err, _ = self.run_in(token, big, script)
        self.assertEqual(out, f"{384 << 20} 1\n1\n1\n{384 << 20}\n", err)

    def test_a_sandbox_without_a_cpu_limit_below_the_hosts_sees_every_cpu(self):
        cpus = len(os.sched_getaffinity(0))
        token = self.token("wide")
        sandbox = self.create_sandbox(token, limits={"cpus": cpus})
        out, err, _ = self.run_in(token, sandbox, "nproc; python3 -c 'import os; print(os.cpu_count())'")
        self.assertEqual(out, f"{cpus}\n{cpus}\n", err)

    def test_the_cgroup_view_is_read_only_and_shows_only_the_sandbox(self):
        token = self.token("view")
        mine = self.create_sandbox(token, limits={"memory_bytes": 256 << 20})
        other = self.create_sandbox(token)
        write = ("for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do "
                 "[ -e $f ] && { echo 1 > $f || echo refused; }; done; mkdir /sys/fs/cgroup/x || echo refused; "
                 + MEMORY_MAX)
        for user in ("agent", "root"):
            out, err, _ = self.run_in(token, mine, write, user=user)
            self.assertEqual(out, f"refused\nrefused\n{256 << 20}\n", (user, err))
            self.assertIn("Read-only file system", err)
        # Only its own subtree: its commands and init, never the other sandbox, its parent or the host's.
        out, err, _ = self.run_in(token, mine, "cat /proc/self/cgroup; find /sys/fs/cgroup -type d; "
                                               "cat /proc/self/mountinfo")
        self.assertNotIn(other["id"], out)
        self.assertNotIn(mine["id"], out)
        self.assertIn("/init", out)
        self.assertNotIn(self.daemon.cgroup_parent, out)


if __name__ == "__main__":
    unittest.main()
