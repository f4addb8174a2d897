"""Headless execute and git out of a sandbox, with the real Claude Code CLI against the scripted
Messages API server (tests/fixtures/scripted_model.py) behind corrald's model relay.

An execution takes a git bundle of a repository made here (or a host directory the daemon's
config allows), the agent changes it with a tool call, and what comes back must be exactly that
change: the diff, the files, and a bundle that `git fetch` takes into the original repository.
The cost must be the scripted usage, priced, to the micro-dollar.
"""
import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient, micro_usd, operator_key_file, relay_config, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-e2e-execute-operator-key"


def usd(micro):
    return f"{micro // 1000000}.{micro % 1000000:06d}"


_upstream = scripted_model.serve({"turns": []}, port=0)
_tmp, _key_file = operator_key_file("corral-e2e-execute-", REAL_KEY)
# Host repositories the daemon may bundle itself ([execute] allowed_repo_paths), and one it may not.
_allowed = os.path.join(_tmp, "allowed")
_elsewhere = os.path.join(_tmp, "elsewhere")
os.makedirs(_allowed)
os.makedirs(_elsewhere)


def tearDownModule():
    _upstream.shutdown()
    _upstream.server_close()
    shutil.rmtree(_tmp, ignore_errors=True)


def git(*args, cwd=None, check=True, input=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@example.invalid",
               GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@example.invalid", GIT_CONFIG_NOSYSTEM="1",
               HOME=_tmp)
    proc = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True,
                          input=input, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def make_repo(path):
    """A repository with one commit: README.md says 'old text'."""
    os.makedirs(path, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=path)
    with open(os.path.join(path, "README.md"), "w") as f:
        f.write("old text\n")
    git("add", "README.md", cwd=path)
    git("commit", "-q", "-m", "initial", cwd=path)
    return git("rev-parse", "HEAD", cwd=path).decode().strip()


# The agent adds a file and edits one, with one Bash call, then says it is done.
EDIT_TURNS = [
    {"text": "I'll make the change.",
     "tool_use": {"name": "Bash", "input": {"command": "echo 'made by the agent' > NEW.md && "
                                                       "sed -i 's/old text/new text/' README.md",
                                            "description": "edit"}},
     "usage": {"input_tokens": 1500, "output_tokens": 60, "cache_creation_input_tokens": 200}},
    {"text": "Added NEW.md and updated README.md.",
     "usage": {"input_tokens": 1600, "output_tokens": 12, "cache_read_input_tokens": 200}},
]


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
@unittest.skipUnless(shutil.which("git"), "git is not installed")
class Execute(DaemonTestCase):
    # corral_e2e appends this after the [sandbox] table: each table brings its own header.
    extra_config = relay_config(_upstream.port, _key_file) + f"""
[execute]
allowed_repo_paths = ["{_allowed}"]
timeout = 120
"""

    def setUp(self):
        self.owner = self.token("exec-user", budget={"ai_usd": 5, "window": "day"})
        self.work = tempfile.mkdtemp(prefix="repo-", dir=_tmp)

    def play(self, turns):
        _upstream.script = scripted_model.Script({"turns": turns})
        _upstream.requests.clear()

    def bundle_of(self, repo):
        return base64.b64encode(git("bundle", "create", "-", "--all", cwd=repo)).decode()

    def execute(self, body, token=None, expect=202):
        status, reply = self.daemon.http("POST", "/v1/execute", token or self.owner, body)
        self.assertEqual(status, expect, reply)
        return reply

    def wait_done(self, execution_id, timeout=90):
        def done():
            status, row = self.daemon.http("GET", f"/v1/executions/{execution_id}", self.owner)
            self.assertEqual(status, 200, row)
            return row if row["state"] != "running" else None
        return wait_until(done, timeout=timeout, interval=0.2, what=f"execution {execution_id} to end")

    def test_an_execution_returns_the_agents_change_as_diff_files_and_a_fetchable_bundle(self):
        base = make_repo(self.work)
        self.play(EDIT_TURNS)
        started = self.execute({"repo": {"bundle": self.bundle_of(self.work)},
                                "task": "Add NEW.md and change README.md\nsecond line of the task"})
        self.assertEqual(started["state"], "running")
        self.assertTrue(started["id"].startswith("exe_"), started)
        self.assertTrue(started["sandbox"].startswith("sb_"), started)
        self.assertTrue(started["session"].startswith("ses_"), started)
        self.assertEqual(started["base"], base)

        row = self.wait_done(started["id"])
        self.assertEqual(row["state"], "completed", row)
        self.assertNotIn("error", row)
        self.assertEqual(row["outcome"], "completed")
        self.assertEqual(row["summary"], "Added NEW.md and updated README.md.")
        self.assertEqual(row["base"], base)
        self.assertNotEqual(row["head"], base)
        self.assertEqual(sorted((f["path"], f["status"]) for f in row["files_changed"]),
                         [("NEW.md", "added"), ("README.md", "modified")])
        self.assertIn("+made by the agent", row["diff"])
        self.assertIn("-old text", row["diff"])
        self.assertIn("+new text", row["diff"])
        self.assertFalse(row["truncated"])
        # Metered: the scripted usage, priced, to the micro-dollar; and summed from the calls.
        self.assertEqual(row["cost_usd"], usd(sum(micro_usd(t["usage"]) for t in EDIT_TURNS)))
        for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            self.assertEqual(row["usage"][key], sum(t["usage"].get(key, 0) for t in EDIT_TURNS), key)
        self.assertEqual(row["usage"]["calls"], len(EDIT_TURNS))

        # The bundle goes into the original repository with `git fetch`, as the new commit.
        status, bundle = self.daemon.http("GET", f"/v1/executions/{started['id']}/bundle", self.owner)
        self.assertEqual(status, 200, bundle)
        self.assertEqual(len(bundle), row["bundle_bytes"])
        bundle_path = os.path.join(self.work, "..", os.path.basename(self.work) + ".bundle")
        with open(bundle_path, "wb") as f:
            f.write(bundle)
        git("fetch", "-q", bundle_path, cwd=self.work)
        self.assertEqual(git("rev-parse", "FETCH_HEAD", cwd=self.work).decode().strip(), row["head"])
        log = git("log", "--format=%s %an", f"{base}..FETCH_HEAD", cwd=self.work).decode().splitlines()
        self.assertEqual(log, ["corral execute: Add NEW.md and change README.md corral"])
        self.assertEqual(git("show", "FETCH_HEAD:NEW.md", cwd=self.work), b"made by the agent\n")
        self.assertEqual(git("show", "FETCH_HEAD:README.md", cwd=self.work), b"new text\n")
        # The original's own branch and files are untouched until the user merges.
        self.assertEqual(git("rev-parse", "main", cwd=self.work).decode().strip(), base)

        # The sandbox is gone; the record stays.
        status, _ = self.daemon.http("GET", f"/v1/sandboxes/{started['sandbox']}", self.owner)
        self.assertEqual(status, 404)
        status, listed = self.daemon.http("GET", "/v1/executions", self.owner)
        self.assertEqual(status, 200, listed)
        mine = [e for e in listed["executions"] if e["id"] == started["id"]]
        self.assertEqual(len(mine), 1)
        self.assertNotIn("diff", mine[0])  # lists leave the diffs out
        self.assertEqual(mine[0]["state"], "completed")

        # Another user: not found, exactly like an id that does not exist (the owner, as control,
        # was answered above).
        stranger = self.token("stranger", budget={"ai_usd": 5})
        for path in (f"/v1/executions/{started['id']}", f"/v1/executions/{started['id']}/bundle"):
            status, body = self.daemon.http("GET", path, stranger)
            self.assertEqual((status, body["error"]["code"]), (404, "not_found"), path)
        status, listed = self.daemon.http("GET", "/v1/executions", stranger)
        self.assertEqual((status, listed["executions"]), (200, []))
        status, body = self.daemon.http("DELETE", f"/v1/executions/{started['id']}", stranger)
        self.assertEqual((status, body["error"]["code"]), (404, "not_found"))

        # The owner deletes it: record and bundle are gone.
        status, body = self.daemon.http("DELETE", f"/v1/executions/{started['id']}", self.owner)
        self.assertEqual(status, 200, body)
        for path in (f"/v1/executions/{started['id']}", f"/v1/executions/{started['id']}/bundle"):
            status, body = self.daemon.http("GET", path, self.owner)
            self.assertEqual(status, 404, path)

    def test_a_host_path_needs_the_config_and_keep_sandbox_keeps_the_sandbox(self):
        # Refused: a path outside execute.allowed_repo_paths (it exists and is a repository).
        if not os.path.isdir(os.path.join(_elsewhere, ".git")):
            make_repo(_elsewhere)
        reply = self.execute({"repo": {"path": _elsewhere}, "task": "anything"}, expect=403)
        self.assertEqual(reply["error"]["code"], "forbidden")
        self.assertIn("allowed_repo_paths", reply["error"]["message"])
        # ... also through a symlink from inside the allowed directory, which resolves outside it.
        link = os.path.join(_allowed, "escape")
        if not os.path.islink(link):
            os.symlink(_elsewhere, link)
        reply = self.execute({"repo": {"path": link}, "task": "anything"}, expect=403)
        self.assertEqual(reply["error"]["code"], "forbidden")
        status, listed = self.daemon.http("GET", "/v1/executions", self.owner)
        self.assertEqual(status, 200)
        self.assertFalse([e for e in listed["executions"] if e.get("path") in (_elsewhere, link)])

        # Accepted: a repository under it, bundled by the daemon (as the repository's owner, here
        # nobody); the sandbox is kept.
        repo = os.path.join(_allowed, f"app-{os.getpid()}-{time.time_ns()}")
        base = make_repo(repo)
        os.chmod(_tmp, 0o755)
        subprocess.run(["chown", "-R", "65534:65534", repo], check=True)
        self.play(EDIT_TURNS)
        started = self.execute({"repo": {"path": repo}, "task": "Add NEW.md", "keep_sandbox": True})
        self.assertEqual(started["base"], base)
        row = self.wait_done(started["id"])
        self.assertEqual(row["state"], "completed", row)
        self.assertEqual(row["path"], repo)
        self.assertEqual(sorted(f["path"] for f in row["files_changed"]), ["NEW.md", "README.md"])
        status, sandbox = self.daemon.http("GET", f"/v1/sandboxes/{started['sandbox']}", self.owner)
        self.assertEqual((status, sandbox["state"]), (200, "running"), sandbox)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{started['sandbox']}", self.owner)
        # The kept sandbox has the repository at HEAD, the change committed, the tree clean: the git
        # routes see no further change there.
        status, diff = self.daemon.http("GET", f"/v1/sandboxes/{started['sandbox']}/git/diff", self.owner)
        self.assertEqual(status, 200, diff)
        self.assertEqual((diff["head"], diff["files_changed"], diff["diff"]), (row["head"], [], ""))
        # The host repository itself is unchanged.
        self.assertEqual(git("rev-parse", "HEAD", cwd=repo).decode().strip(), base)

    def test_requests_that_are_refused_leave_nothing_behind(self):
        make_repo(self.work)
        bundle = self.bundle_of(self.work)
        cases = [
            ({"repo": {"bundle": "not base64!"}, "task": "x"}, 400),
            ({"repo": {"bundle": bundle}}, 400),                                    # no task
            ({"task": "x"}, 400),                                                   # no repo
            ({"repo": {"bundle": bundle, "path": _allowed}, "task": "x"}, 400),     # both
            ({"repo": {"bundle": bundle}, "task": "x", "timeout_s": 100000}, 400),  # above execute.timeout
            ({"repo": {"bundle": bundle}, "task": "x", "permission_mode": "yolo"}, 400),
            ({"repo": {"bundle": base64.b64encode(b"not a bundle\n").decode()}, "task": "x"}, 400),
        ]
        for body, expected in cases:
            reply = self.execute(body, expect=expected)
            self.assertIn("error", reply)
        # Scopes: both sandboxes and sessions are needed.
        for scope in ("sandboxes", "sessions files exec"):
            reply = self.execute({"repo": {"bundle": bundle}, "task": "x"},
                                 token=self.token("exec-user", scope=scope, budget={"ai_usd": 5}), expect=403)
            self.assertEqual(reply["error"]["code"], "forbidden")
        # Nothing was recorded and no sandbox is left (the bad bundle's sandbox was made, then
        # destroyed).
        status, listed = self.daemon.http("GET", "/v1/executions", self.owner)
        self.assertEqual(status, 200)
        self.assertEqual([e for e in listed["executions"] if e["state"] == "running"], [])
        status, sandboxes = self.daemon.http("GET", "/v1/sandboxes", self.owner)
        self.assertEqual((status, sandboxes["sandboxes"]), (200, []))

    # ---- git in an interactive sandbox ----

    def sh(self, sandbox, script, token=None):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token or self.owner)
            try:
                return await c.run(sandbox, ["sh", "-c", script])
            finally:
                await c.close()
        out, err, outcome, _ = asyncio.run(go())
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        return out.decode()

    def test_git_diff_and_bundle_of_a_repository_in_a_running_sandbox(self):
        sandbox = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", self.owner)
        # A repository the agent made: two commits, then a tracked file changed and an untracked
        # one added, nothing staged.
        self.sh(sandbox, "set -e; mkdir -p /home/agent/repo && cd /home/agent/repo && git init -q -b main && "
                         "git config user.name a && git config user.email a@b.invalid && "
                         "echo one > a.txt && git add a.txt && git commit -qm one && "
                         "echo two >> a.txt && git commit -qam two && "
                         "echo changed >> a.txt && echo fresh > untracked.txt")
        head = self.sh(sandbox, "cd /home/agent/repo && git rev-parse HEAD").strip()
        first = self.sh(sandbox, "cd /home/agent/repo && git rev-parse HEAD~1").strip()
        status_before = self.sh(sandbox, "cd /home/agent/repo && git status --porcelain")

        status, diff = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo", self.owner)
        self.assertEqual(status, 200, diff)
        self.assertEqual(diff["head"], head)
        self.assertEqual(sorted((f["path"], f["status"]) for f in diff["files_changed"]),
                         [("a.txt", "modified"), ("untracked.txt", "added")])
        self.assertIn("+changed", diff["diff"])
        self.assertIn("+fresh", diff["diff"])
        self.assertNotIn("+two", diff["diff"])
        # The user's index is as it was: the untracked file is still untracked, nothing staged.
        self.assertEqual(self.sh(sandbox, "cd /home/agent/repo && git status --porcelain"), status_before)
        self.assertIn("?? untracked.txt", status_before)
        # Against an older base, the last commit's change is in it too.
        status, older = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo&base=HEAD~1",
                                         self.owner)
        self.assertEqual(status, 200, older)
        self.assertIn("+two", older["diff"])

        # A bundle of base..HEAD that git fetch takes into a repository that has the base.
        status, bundle = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/bundle?path=/home/agent/repo&base={first}",
                                          self.owner)
        self.assertEqual(status, 200, bundle)
        status, whole = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/bundle?path=/home/agent/repo", self.owner)
        self.assertEqual(status, 200, whole)
        with open(os.path.join(_tmp, "whole.bundle"), "wb") as f:
            f.write(whole)
        with open(os.path.join(_tmp, "range.bundle"), "wb") as f:
            f.write(bundle)
        clone = os.path.join(self.work, "clone")
        git("clone", "-q", os.path.join(_tmp, "whole.bundle"), clone)
        self.assertEqual(git("rev-parse", "HEAD", cwd=clone).decode().strip(), head)
        git("reset", "-q", "--hard", first, cwd=clone)
        git("fetch", "-q", os.path.join(_tmp, "range.bundle"), cwd=clone)
        self.assertEqual(git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip(), head)
        # An empty range: git refuses it, so do we.
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/bundle?path=/home/agent/repo&base=HEAD",
                                        self.owner)
        self.assertEqual(status, 400, body)

        # Refusals, each beside the positive control above.
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent", self.owner)
        self.assertEqual((status, body["error"]["code"]), (400, "bad_request"), body)
        self.assertIn("not a git repository", body["error"]["message"])
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo&base=nope",
                                        self.owner)
        self.assertEqual(status, 400, body)
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo&base=--output=/tmp/x",
                                        self.owner)
        self.assertEqual(status, 400, body)
        stranger = self.token("stranger")
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo", stranger)
        self.assertEqual(status, 404, body)
        no_files = self.token("exec-user", scope="sandboxes exec")
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/diff?path=/home/agent/repo", no_files)
        self.assertEqual(status, 403, body)
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/stop", self.owner)
        self.assertEqual(status, 200)
        for route in ("diff", "bundle"):
            status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/git/{route}?path=/home/agent/repo",
                                            self.owner)
            self.assertEqual((status, body["error"]["code"]), (409, "conflict"), body)

    # ---- the CLI ----

    def corral(self, *args, cwd=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=self.owner)
        return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd,
                              stdin=subprocess.DEVNULL)

    def test_corral_execute_writes_the_result_and_a_bundle_to_fetch(self):
        base = make_repo(self.work)
        self.play(EDIT_TURNS)
        out_dir = os.path.join(self.work, "..", os.path.basename(self.work) + "-out")
        proc = self.corral("execute", "--repo", self.work, "--out", out_dir, "Add NEW.md")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("Added NEW.md and updated README.md.", proc.stdout)
        self.assertIn("NEW.md", proc.stdout)
        self.assertIn(f"USD {usd(sum(micro_usd(t['usage']) for t in EDIT_TURNS))}", proc.stdout)
        self.assertIn("git fetch", proc.stdout)
        with open(os.path.join(out_dir, "result.json")) as f:
            result = json.load(f)
        self.assertEqual(result["state"], "completed")
        git("fetch", "-q", os.path.join(out_dir, "changes.bundle"), cwd=self.work)
        self.assertEqual(git("show", "FETCH_HEAD:NEW.md", cwd=self.work), b"made by the agent\n")
        self.assertEqual(git("rev-parse", "FETCH_HEAD~1", cwd=self.work).decode().strip(), base)
        # corral git diff on a sandbox: the same JSON route, printed as a patch.
        sandbox = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", self.owner)
        self.sh(sandbox, "set -e; mkdir -p /home/agent/w && cd /home/agent/w && git init -q && echo x > f.txt")
        proc = self.corral("git", "diff", sandbox, "--path", "/home/agent/w")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("+x", proc.stdout)
        proc = self.corral("git", "diff", sandbox, "--path", "/home/agent")
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("not a git repository", proc.stderr)

    def test_an_agent_past_its_timeout_is_stopped_and_the_execution_fails_with_what_there_is(self):
        base = make_repo(self.work)
        self.play([{"text": "thinking", "delay": 10}])
        started = self.execute({"repo": {"bundle": self.bundle_of(self.work)}, "task": "slow", "timeout_s": 2})
        row = self.wait_done(started["id"], timeout=30)
        self.assertEqual((row["state"], row["outcome"]), ("failed", "aborted"), row)
        self.assertIn("did not finish within 2 s", row["error"])
        # Collected all the same: nothing changed, so no diff and no bundle; the sandbox is gone.
        self.assertEqual((row["head"], row["files_changed"], row["diff"], row["bundle_bytes"]), (base, [], "", 0))
        status, _ = self.daemon.http("GET", f"/v1/executions/{started['id']}/bundle", self.owner)
        self.assertEqual(status, 404)
        status, _ = self.daemon.http("GET", f"/v1/sandboxes/{started['sandbox']}", self.owner)
        self.assertEqual(status, 404)

    # ---- restart ----

    def test_a_daemon_restart_fails_a_running_execution_and_removes_its_sandbox(self):
        make_repo(self.work)
        # The model takes its time: the execution is still running when the daemon goes.
        self.play([{"text": "thinking", "delay": 20}])
        started = self.execute({"repo": {"bundle": self.bundle_of(self.work)}, "task": "slow"})
        status, row = self.daemon.http("GET", f"/v1/executions/{started['id']}", self.owner)
        self.assertEqual((status, row["state"]), (200, "running"))
        self.daemon.stop()
        self.daemon.start()
        status, row = self.daemon.http("GET", f"/v1/executions/{started['id']}", self.owner)
        self.assertEqual((status, row["state"], row.get("error")), (200, "failed", "daemon restarted"), row)
        wait_until(lambda: self.daemon.http("GET", f"/v1/sandboxes/{started['sandbox']}", self.owner)[0] == 404,
                   timeout=30, what="the execution's sandbox to go")
        status, body = self.daemon.http("GET", f"/v1/executions/{started['id']}/bundle", self.owner)
        self.assertEqual(status, 404, body)


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
@unittest.skipUnless(shutil.which("git"), "git is not installed")
class ExecuteCaps(DaemonTestCase):
    """Small caps on what an execution keeps: the diff is cut, the bundle refused."""
    extra_config = relay_config(_upstream.port, _key_file) + """
[execute]
max_diff = 64
max_bundle = 100
"""

    def test_a_long_diff_is_truncated_and_a_large_bundle_is_refused_with_a_reason(self):
        work = tempfile.mkdtemp(prefix="repo-", dir=_tmp)
        base = make_repo(work)
        _upstream.script = scripted_model.Script({"turns": EDIT_TURNS})
        _upstream.requests.clear()
        token = self.token("exec-user", budget={"ai_usd": 5})
        status, started = self.daemon.http("POST", "/v1/execute", token, {
            "repo": {"bundle": base64.b64encode(git("bundle", "create", "-", "--all", cwd=work)).decode()},
            "task": "Add NEW.md"})
        self.assertEqual(status, 202, started)
        row = wait_until(lambda: (lambda r: r if r["state"] != "running" else None)(
            self.daemon.http("GET", f"/v1/executions/{started['id']}", token)[1]), timeout=60, what="the end")
        # The result stands: the agent's work, its files, its cost.
        self.assertEqual(row["state"], "completed", row)
        self.assertNotEqual(row["head"], base)
        self.assertEqual(sorted(f["path"] for f in row["files_changed"]), ["NEW.md", "README.md"])
        self.assertEqual(row["cost_usd"], usd(sum(micro_usd(t["usage"]) for t in EDIT_TURNS)))
        # The diff is cut at 64 bytes and says so.
        self.assertTrue(row["truncated"])
        self.assertEqual(len(row["diff"].encode()), 64)
        self.assertTrue(row["diff"].startswith("diff --git"), row["diff"])
        # The bundle is not kept, and the record says why.
        self.assertEqual(row["bundle_bytes"], 0)
        self.assertIn("execute.max_bundle", row["error"])
        status, body = self.daemon.http("GET", f"/v1/executions/{started['id']}/bundle", token)
        self.assertEqual((status, body["error"]["code"]), (404, "not_found"), body)
        self.assertIn("execute.max_bundle", body["error"]["message"])


class ExecuteDefaults(DaemonTestCase):
    """A daemon with the shipped defaults: execute.allowed_repo_paths is empty."""

    def test_no_host_path_is_allowed_by_default(self):
        token = self.token("exec-user", budget={"ai_usd": 5})
        status, reply = self.daemon.http("POST", "/v1/execute", token, {"repo": {"path": _allowed}, "task": "x"})
        self.assertEqual((status, reply["error"]["code"]), (403, "forbidden"), reply)
        self.assertIn("allows no host repositories", reply["error"]["message"])
        # Control: the same token and route get past scopes and config to the request itself.
        status, reply = self.daemon.http("POST", "/v1/execute", token, {"repo": {"bundle": "%%%"}, "task": "x"})
        self.assertEqual((status, reply["error"]["code"]), (400, "bad_request"), reply)
        status, sandboxes = self.daemon.http("GET", "/v1/sandboxes", token)
        self.assertEqual((status, sandboxes["sandboxes"]), (200, []))


if __name__ == "__main__":
    unittest.main()
