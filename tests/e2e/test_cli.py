"""The `corral` CLI against a real corrald: sandbox lifecycle, exec, stdin, cp, an interactive
shell on a real pseudo-terminal, and the errors a user sees."""
import base64
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient, mint, wait_until


class CliTestCase(DaemonTestCase):
    def setUp(self):
        if not os.path.exists(CORRAL):
            self.skipTest(f"{CORRAL} is not built")
        self.tmp = tempfile.mkdtemp(prefix="corral-cli-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def url(self):
        return f"http://127.0.0.1:{self.daemon.port}"

    def env(self, token=None, url=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        if url is not False:
            env["CORRAL_URL"] = url or self.url()
        if token:
            env["CORRAL_TOKEN"] = token
        return env

    def corral(self, *args, token=None, env=None, input=None, timeout=60, check_rc=None):
        """Runs the CLI; returns (exit code, stdout bytes, stderr text)."""
        proc = subprocess.run([CORRAL, *args], env=env if env is not None else self.env(token),
                              input=input if input is not None else b"", capture_output=True, timeout=timeout)
        if check_rc is not None:
            self.assertEqual(proc.returncode, check_rc, (args, proc.stdout[-2000:], proc.stderr.decode()[-2000:]))
        return proc.returncode, proc.stdout, proc.stderr.decode()

    def new_sandbox(self, token, *args):
        _, out, _ = self.corral("sandbox", "create", *args, token=token, check_rc=0)
        sid = out.decode().strip()
        self.assertRegex(sid, r"^sb_[a-z0-9]+$")
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        return sid


class SandboxCommands(CliTestCase):
    def test_create_ls_get_stop_start_rm_with_env_vars(self):
        token = self.token("cli-ann")
        sid = self.new_sandbox(token, "--name", "box", "--memory", "300M", "--cpus", "0.5")

        _, out, _ = self.corral("sandbox", "ls", token=token, check_rc=0)
        lines = out.decode().splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "STATE", "IMAGE", "CREATED"])
        row = [l for l in lines if l.startswith(sid)]
        self.assertEqual(len(row), 1, lines)
        self.assertEqual(row[0].split()[:4], [sid, "box", "running", "host"])

        _, out, _ = self.corral("sandbox", "get", sid, token=token, check_rc=0)
        sandbox = json.loads(out)
        self.assertEqual((sandbox["id"], sandbox["state"], sandbox["name"]), (sid, "running", "box"))
        self.assertEqual(sandbox["limits"]["memory_bytes"], 300 << 20)
        self.assertEqual(sandbox["limits"]["cpus"], 0.5)

        _, out, _ = self.corral("sandbox", "stop", sid, token=token, check_rc=0)
        self.assertEqual(out.decode().strip(), sid)
        _, out, _ = self.corral("sandbox", "get", sid, token=token, check_rc=0)
        self.assertEqual(json.loads(out)["state"], "stopped")
        # exec in a stopped sandbox is a conflict, not a hang
        rc, _, err = self.corral("exec", sid, "--", "true", token=token)
        self.assertEqual(rc, 125)
        self.assertIn("conflict", err)

        _, out, _ = self.corral("sandbox", "start", sid, "--json", token=token, check_rc=0)
        self.assertEqual(json.loads(out)["state"], "running")
        self.corral("exec", sid, "--", "true", token=token, check_rc=0)

        _, out, _ = self.corral("sandbox", "rm", sid, token=token, check_rc=0)
        self.assertEqual(out.decode().strip(), sid)
        rc, _, err = self.corral("sandbox", "get", sid, token=token)
        self.assertEqual(rc, 1)
        self.assertIn("not_found", err)
        _, out, _ = self.corral("sandbox", "ls", "--json", token=token, check_rc=0)
        self.assertEqual(json.loads(out)["sandboxes"], [])

    def test_flags_instead_of_env_vars(self):
        token = self.token("cli-ben")
        env = self.env(token=None, url=False)  # neither CORRAL_URL nor CORRAL_TOKEN
        rc, out, err = self.corral("sandbox", "create", "--url", self.url(), "--token", token, env=env)
        self.assertEqual(rc, 0, err)
        sid = out.decode().strip()
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        rc, out, err = self.corral("exec", "--url", self.url(), "--token", token, sid, "--", "echo", "flags",
                                   env=env)
        self.assertEqual((rc, out), (0, b"flags\n"), err)
        # The flags win over the environment.
        rc, out, err = self.corral("sandbox", "ls", "--url", self.url(), "--token", token,
                                   env=self.env(token="not.a.token", url="http://127.0.0.1:1"))
        self.assertEqual(rc, 0, err)
        self.assertIn(sid, out.decode())
        # Without any token: a clear error, before anything is sent.
        rc, _, err = self.corral("sandbox", "ls", "--url", self.url(), env=env)
        self.assertNotEqual(rc, 0)
        self.assertIn("no token", err)

    def test_a_bad_token_is_refused_clearly(self):
        good = self.token("cli-cat")
        sid = self.new_sandbox(good)
        bad_tokens = {"garbage": "not.a.token", "wrong secret": mint("acme", "y" * 43, "cli-cat"),
                      "expired": mint("acme", self.secret, "cli-cat", ttl=-3600)}
        for name, bad in bad_tokens.items():
            with self.subTest(name):
                rc, out, err = self.corral("sandbox", "ls", token=bad)
                self.assertEqual(rc, 1)
                self.assertEqual(out, b"")
                self.assertIn("unauthorized", err)
                # exec goes over the WebSocket: the refused upgrade is reported as clearly.
                rc, out, err = self.corral("exec", sid, "--", "echo", "never", token=bad)
                self.assertEqual(rc, 125)
                self.assertEqual(out, b"")
                self.assertIn("unauthorized", err)
        # Positive control: the same commands with a good token.
        rc, out, _ = self.corral("sandbox", "ls", token=good, check_rc=0)
        self.assertIn(sid, out.decode())
        rc, out, _ = self.corral("exec", sid, "--", "echo", "ok", token=good, check_rc=0)
        self.assertEqual(out, b"ok\n")

    def test_a_missing_or_foreign_sandbox_is_not_found(self):
        owner, other = self.token("cli-dan"), self.token("cli-eve")
        sid = self.new_sandbox(owner)
        missing = "sb_" + "z" * 20
        for token, target in [(owner, missing), (other, sid)]:
            with self.subTest(target=target):
                for args, code in [(("sandbox", "get", target), 1), (("sandbox", "stop", target), 1),
                                   (("sandbox", "rm", target), 1), (("exec", target, "--", "true"), 125),
                                   (("cp", "/etc/hostname", f"{target}:/tmp/x"), 1)]:
                    rc, _, err = self.corral(*args, token=token)
                    self.assertNotEqual(rc, 0, args)
                    self.assertEqual(rc, code, (args, err))
                    self.assertIn("not_found", err, args)
        # Positive control: the owner reaches it with each of them.
        self.corral("sandbox", "get", sid, token=owner, check_rc=0)
        self.corral("exec", sid, "--", "true", token=owner, check_rc=0)
        self.corral("cp", "/etc/hostname", f"{sid}:/tmp/x", token=owner, check_rc=0)
        self.corral("sandbox", "stop", sid, token=owner, check_rc=0)
        self.corral("sandbox", "rm", sid, token=owner, check_rc=0)


class Exec(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "cli-fay")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    def test_exit_code_and_separate_stdout_stderr(self):
        rc, out, err = self.corral("exec", self.sid, "--", "sh", "-c", "echo out; echo err >&2; exit 7",
                                   token=self.owner)
        self.assertEqual(rc, 7)
        self.assertEqual(out, b"out\n")
        self.assertEqual(err, "err\n")
        rc, out, err = self.corral("exec", self.sid, "--", "sh", "-c", "echo fine", token=self.owner)
        self.assertEqual((rc, out, err), (0, b"fine\n", ""))

    def test_a_signal_is_128_plus_n_and_the_outcome_json(self):
        outcome_path = os.path.join(self.tmp, "outcome.json")
        rc, _, _ = self.corral("exec", "--outcome-json", outcome_path, self.sid, "--", "sh", "-c", "kill -TERM $$",
                               token=self.owner)
        self.assertEqual(rc, 128 + signal.SIGTERM)
        with open(outcome_path) as f:
            outcome = json.load(f)
        self.assertEqual((outcome["outcome"], outcome["signal"]), ("signaled", signal.SIGTERM))

    def test_env_cwd_and_user(self):
        rc, out, err = self.corral("exec", "--env", "GREETING=hi there", "--cwd", "/tmp", "--user", "root", self.sid,
                                   "--", "sh", "-c", 'echo "$GREETING"; pwd; id -un', token=self.owner)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, b"hi there\n/tmp\nroot\n")

    def test_stdin_is_forwarded_with_dash_i_only(self):
        data = os.urandom(300 * 1024) + b"\nlast line\n"
        rc, out, err = self.corral("exec", "-i", self.sid, "--", "cat", token=self.owner, input=data, timeout=120)
        self.assertEqual(rc, 0, err)
        self.assertEqual(hashlib.sha256(out).hexdigest(), hashlib.sha256(data).hexdigest())
        self.assertEqual(len(out), len(data))
        # Without -i the command's stdin is at EOF: the same input does not reach it.
        rc, out, err = self.corral("exec", self.sid, "--", "cat", token=self.owner, input=data)
        self.assertEqual((rc, out), (0, b""), err)

    def test_a_missing_program_is_125_with_a_reason(self):
        rc, _, err = self.corral("exec", self.sid, "--", "/no/such/program", token=self.owner)
        self.assertEqual(rc, 125)
        self.assertIn("ENOENT", err)
        self.corral("exec", self.sid, "--", "/bin/true", token=self.owner, check_rc=0)


class Copy(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "cli-gus")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    def inside(self, script):
        rc, out, err = self.corral("exec", self.sid, "--", "sh", "-c", script, token=self.owner)
        self.assertEqual(rc, 0, err)
        return out

    def test_a_file_in_and_out(self):
        data = os.urandom(700 * 1024) + b"\x00end"
        local = os.path.join(self.tmp, "blob.bin")
        with open(local, "wb") as f:
            f.write(data)
        self.corral("cp", local, f"{self.sid}:/home/agent/blob.bin", token=self.owner, check_rc=0)
        # Inside, it is the same bytes, owned by the agent.
        out = self.inside("sha256sum /home/agent/blob.bin; stat -c %U /home/agent/blob.bin")
        self.assertEqual(out.split()[0].decode(), hashlib.sha256(data).hexdigest())
        self.assertEqual(out.split()[-1], b"agent")
        back = os.path.join(self.tmp, "back.bin")
        self.corral("cp", f"{self.sid}:/home/agent/blob.bin", back, token=self.owner, check_rc=0)
        with open(back, "rb") as f:
            self.assertEqual(f.read(), data)
        # Into an existing directory: under its own name.
        self.corral("cp", local, f"{self.sid}:/tmp", token=self.owner, check_rc=0)
        self.assertEqual(self.inside("cmp /tmp/blob.bin /home/agent/blob.bin && echo same"), b"same\n")

    def test_a_missing_source_is_an_error(self):
        rc, _, err = self.corral("cp", f"{self.sid}:/home/agent/no-such-file", os.path.join(self.tmp, "x"),
                                 token=self.owner)
        self.assertEqual(rc, 1)
        self.assertIn("no such file", err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))
        rc, _, err = self.corral("cp", os.path.join(self.tmp, "missing"), f"{self.sid}:/tmp/y", token=self.owner)
        self.assertEqual(rc, 1)
        self.assertIn("missing", err)
        # Positive control: a file that exists.
        self.inside("echo here > /home/agent/present")
        self.corral("cp", f"{self.sid}:/home/agent/present", os.path.join(self.tmp, "x"), token=self.owner,
                    check_rc=0)
        with open(os.path.join(self.tmp, "x"), "rb") as f:
            self.assertEqual(f.read(), b"here\n")

    def test_a_directory_with_r(self):
        src = os.path.join(self.tmp, "tree")
        os.makedirs(os.path.join(src, "a", "b"))
        files = {"top.txt": b"top\n", "a/mid.bin": os.urandom(100 * 1024), "a/b/deep.txt": b"deep\n",
                 "a/b/empty": b""}
        for rel, data in files.items():
            with open(os.path.join(src, rel), "wb") as f:
                f.write(data)
        os.chmod(os.path.join(src, "a/b/deep.txt"), 0o750)
        os.symlink("a/b/deep.txt", os.path.join(src, "link"))

        # Without -r a directory is refused.
        rc, _, err = self.corral("cp", src, f"{self.sid}:/home/agent/tree", token=self.owner)
        self.assertEqual(rc, 1)
        self.assertIn("-r", err)

        self.corral("cp", "-r", src, f"{self.sid}:/home/agent/tree", token=self.owner, check_rc=0)
        out = self.inside("cd /home/agent/tree && cat a/b/deep.txt && readlink link && stat -c %a a/b/deep.txt "
                          "&& sha256sum a/mid.bin")
        lines = out.decode().split("\n")
        self.assertEqual(lines[:3], ["deep", "a/b/deep.txt", "750"])
        self.assertEqual(lines[3].split()[0], hashlib.sha256(files["a/mid.bin"]).hexdigest())

        back = os.path.join(self.tmp, "back")
        self.corral("cp", "-r", f"{self.sid}:/home/agent/tree", back, token=self.owner, check_rc=0)
        for rel, data in files.items():
            with open(os.path.join(back, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
        self.assertEqual(os.readlink(os.path.join(back, "link")), "a/b/deep.txt")
        self.assertEqual(os.stat(os.path.join(back, "a/b/deep.txt")).st_mode & 0o777, 0o750)
        self.assertEqual(sorted(os.listdir(back)), ["a", "link", "top.txt"])


class Shell(CliTestCase):
    """`corral shell` on a real pseudo-terminal, as a user's terminal emulator runs it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "cli-hal")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    def spawn(self, *args, rows=30, cols=100, token=None):
        master, slave = os.openpty()
        set_size(slave, rows, cols)
        env = self.env(token or self.owner)
        env["TERM"] = "xterm"

        def become_terminal_owner():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        proc = subprocess.Popen([CORRAL, "shell", *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                                preexec_fn=become_terminal_owner, close_fds=True)
        os.close(slave)
        screen = Screen(master)
        self.addCleanup(screen.close)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc, screen

    def test_type_commands_and_resize_the_window(self):
        proc, screen = self.spawn(self.sid)
        screen.write(b"echo $((6*7))\n")
        screen.expect(rb"(^|[^0-9])42\r?\n", what="the shell's answer")
        screen.write(b"stty size\n")
        screen.expect(rb"30 100\r?\n", what="the first window size")
        # The user resizes the window: the terminal gets the new size and corral a SIGWINCH.
        set_size(screen.master, 45, 132)
        os.kill(proc.pid, signal.SIGWINCH)

        def resized():
            screen.write(b"stty size\n")
            return screen.wait_for(rb"45 132\r?\n", 1)
        wait_until(resized, 15, interval=0, what=f"the new size in the shell; screen: {screen.text()[-300:]!r}")
        screen.write(b"exit 3\n")
        self.assertEqual(proc.wait(30), 3)

    def test_exit_ends_corral_with_the_shells_code(self):
        proc, screen = self.spawn(self.sid, "--", "/bin/sh")
        screen.write(b"tty; exit\n")
        screen.expect(rb"/dev/pts/\d+", what="the remote terminal's name")
        self.assertEqual(proc.wait(30), 0)

    def test_what_is_typed_before_the_terminal_exists_reaches_the_shell(self):
        """The protocol level under `corral shell`: stdin sent right after the exec reply, before
        the command's terminal exists (the client cannot know when it does), is not refused."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            reply = await c.request("exec", sandbox=self.sid, argv=["/bin/sh"], pty={"rows": 24, "cols": 80})
            self.assertTrue(reply["ok"], reply)
            command = reply["result"]["command"]
            typed = await c.request("stdin", command=command,
                                    data=base64.b64encode(b"echo $((6*7))\nexit 4\n").decode())
            out, outcome = b"", None
            while outcome is None:
                event = await c.next_event()
                if event.get("event") == "output":
                    out += event["data"]
                elif event.get("event") == "exit":
                    outcome = event["outcome"]
            await c.close()
            return typed, out, outcome
        typed, out, outcome = self.run_async(go())
        self.assertTrue(typed["ok"], typed)
        self.assertIn(b"42\r\n", out)  # the typed line itself has no "42"
        self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 4), (outcome, out))

    def test_a_token_without_the_terminal_scope_is_refused(self):
        exec_only = self.token("cli-hal", scope="exec")
        proc, screen = self.spawn(self.sid, "--", "/bin/sh", token=exec_only)
        self.assertEqual(proc.wait(30), 125)
        screen.expect(rb"forbidden", what="the refusal")
        # Positive control: the same token may exec without a terminal.
        rc, out, err = self.corral("exec", self.sid, "--", "echo", "no-tty", token=exec_only)
        self.assertEqual((rc, out), (0, b"no-tty\n"), err)


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Screen:
    """What the terminal emulator sees: everything read from the pty's master side."""

    def __init__(self, master):
        self.master = master
        self.data = b""
        self.closed = False

    def write(self, data):
        os.write(self.master, data)

    def pump(self, timeout):
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the other side closed
            chunk = b""
        if not chunk:
            time.sleep(timeout)  # nothing more will come; do not spin
        self.data += chunk

    def wait_for(self, pattern, timeout):
        deadline = time.time() + timeout
        while True:
            match = re.search(pattern, self.data, re.M)
            if match:
                self.data = self.data[match.end():]  # consume, so the next expect needs new output
                return True
            left = deadline - time.time()
            if left <= 0:
                return False
            self.pump(min(left, 0.2))

    def expect(self, pattern, timeout=30, what="output"):
        if not self.wait_for(pattern, timeout):
            raise AssertionError(f"timed out waiting for {what} ({pattern!r}); screen: {self.data[-500:]!r}")

    def text(self):
        return self.data.decode(errors="replace")

    def close(self):
        if not self.closed:
            os.close(self.master)
            self.closed = True


class AdminGroup(CliTestCase):
    """daemon.admin_group: the admin socket is 0660 with that group, so its members run `corral
    admin` without root, and nobody else does. nogroup stands in for the package's corral group
    (the test adds no group to the host)."""
    extra_daemon_config = 'admin_group = "nogroup"'

    def as_user(self, uid, gid, *args):
        # A copy of the CLI where any uid can run it (the build tree may sit under /root): the
        # front, and the full client it runs for `admin` beside it.
        binary = os.path.join(self.tmp, "corral")
        if not os.path.exists(binary):
            shutil.copy(CORRAL, binary)
            shutil.copy(os.path.join(os.path.dirname(CORRAL), "corral-cli"), os.path.join(self.tmp, "corral-cli"))
            os.chmod(self.tmp, 0o755)
        env = {"PATH": "/usr/bin:/bin", "CORRAL_ADMIN_SOCKET": self.daemon.admin_socket}
        proc = subprocess.run([binary, *args], env=env, capture_output=True, timeout=30,
                              user=uid, group=gid, extra_groups=[])
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

    def test_members_of_the_group_may_use_the_admin_socket_and_others_may_not(self):
        import grp
        nogroup = grp.getgrnam("nogroup").gr_gid
        st = os.stat(self.daemon.admin_socket)
        self.assertEqual(st.st_mode & 0o777, 0o660)
        self.assertEqual((st.st_uid, st.st_gid), (0, nogroup))
        # In the group (nobody:nogroup): the admin commands work.
        rc, out, err = self.as_user(65534, nogroup, "admin", "issuer", "ls")
        self.assertEqual(rc, 0, err)
        self.assertIn("acme", out)
        # The same uid outside the group: refused by the socket's mode, with the reason.
        rc, out, err = self.as_user(65534, 65533, "admin", "issuer", "ls")
        self.assertNotEqual(rc, 0)
        self.assertIn("EACCES", err)
        self.assertIn("daemon.admin_group", err)
        self.assertNotIn("acme", out)

    def test_a_group_the_host_does_not_have_leaves_the_socket_to_root(self):
        import grp
        missing = "corraltest%d" % os.getpid()
        with self.assertRaises(KeyError):
            grp.getgrnam(missing)
        self.daemon.stop()
        self.daemon.extra_daemon_config = f'admin_group = "{missing}"'
        try:
            self.daemon.start()
            st = os.stat(self.daemon.admin_socket)
            self.assertEqual(st.st_mode & 0o777, 0o600)
            self.assertEqual((st.st_uid, st.st_gid), (0, 0))
            self.assertIn(f"no group {missing}", self.daemon.log())
        finally:
            self.daemon.stop()
            self.daemon.extra_daemon_config = 'admin_group = "nogroup"'
            self.daemon.start()


if __name__ == "__main__":
    unittest.main()
