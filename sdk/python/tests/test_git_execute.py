"""Git out of a sandbox and headless execute through the SDK (the cases are
tests/e2e/test_execute.py's; here, what the SDK hands back): a work tree's diff and a bundle that
`git fetch` takes; an execution of a task on a bundle of a local repository, watched as a session,
whose diff, files, cost and bundle come back and whose bundle fetches into the original."""
import os
import subprocess
import tempfile

import corral
from helpers import DaemonTest, ai_budget, micro_usd, play, scenario, usd


def git(*args, cwd):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.invalid", GIT_CONFIG_NOSYSTEM="1", HOME=cwd)
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, check=True,
                          capture_output=True).stdout


class GitAndExecute(DaemonTest):
    async def test_a_work_trees_diff_and_a_bundle_that_git_fetch_takes(self):
        c = self.client("py-git")
        sandbox = await self.sandbox(c)
        made = await c.run(sandbox.id, "set -e; mkdir -p /home/agent/repo && cd /home/agent/repo && git init -q -b main && "
                                       "git config user.name a && git config user.email a@b.invalid && "
                                       "echo one > a.txt && git add a.txt && git commit -qm one && "
                                       "echo two >> a.txt && git commit -qam two && "
                                       "echo changed >> a.txt && echo fresh > untracked.txt && git rev-parse HEAD HEAD~1")
        head, first = made.stdout.split()
        diff = await c.git_diff(sandbox.id)
        self.assertIsInstance(diff, corral.GitDiff)
        self.assertEqual(diff.head, head)
        self.assertEqual(sorted((f.path, f.status) for f in diff.files_changed),
                         [("a.txt", "modified"), ("untracked.txt", "added")])
        self.assertIn("+changed", diff.diff)
        self.assertNotIn("+two", diff.diff)
        self.assertIn("+two", (await c.git_diff(sandbox.id, "/home/agent/repo", base="HEAD~1")).diff)
        with self.assertRaises(corral.CorralError) as caught:
            await c.git_diff(sandbox.id, "/home/agent")
        self.assertEqual(caught.exception.code, "bad_request")

        bundle = await c.git_bundle(sandbox.id, base=first)
        with tempfile.TemporaryDirectory() as local:
            whole = os.path.join(local, "whole.bundle")
            with open(whole, "wb") as f:
                f.write(await c.git_bundle(sandbox.id))
            git("clone", "-q", whole, "clone", cwd=local)
            clone = os.path.join(local, "clone")
            self.assertEqual(git("rev-parse", "HEAD", cwd=clone).decode().strip(), head)
            git("reset", "-q", "--hard", first, cwd=clone)
            with open(os.path.join(local, "range.bundle"), "wb") as f:
                f.write(bundle)
            git("fetch", "-q", os.path.join(local, "range.bundle"), cwd=clone)
            self.assertEqual(git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip(), head)

    async def test_an_execution_hands_back_the_agents_change_as_diff_files_cost_and_bundle(self):
        c = self.client("py-execute", {"budget": ai_budget()})
        turns = scenario("execute_edit")
        play(turns)
        with tempfile.TemporaryDirectory() as work:
            git("init", "-q", "-b", "main", cwd=work)
            with open(os.path.join(work, "README.md"), "w") as f:
                f.write("old text\n")
            git("add", "README.md", cwd=work)
            git("commit", "-q", "-m", "initial", cwd=work)
            base = git("rev-parse", "HEAD", cwd=work).decode().strip()
            started = await c.execute("Add NEW.md and change README.md", bundle=git("bundle", "create", "-", "--all", cwd=work))
            self.assertEqual((started.state, started.base), ("running", base))
            self.assertTrue(started.session.startswith("ses_"))
            # The execution's agent is an ordinary session: followed like any other.
            watched = await c.follow_session(started.session)
            result = await self.within(watched.result(), 120, "the execution's turn")
            self.assertEqual(result.text, "Added NEW.md and updated README.md.")

            record = await c.wait_execution(started.id, timeout=120, interval=0.2)
            self.assertEqual((record.state, record.outcome), ("completed", "completed"), record.raw)
            self.assertEqual(record.summary, "Added NEW.md and updated README.md.")
            self.assertEqual(sorted((f.path, f.status) for f in record.files_changed),
                             [("NEW.md", "added"), ("README.md", "modified")])
            self.assertIn("+made by the agent", record.diff)
            self.assertEqual(record.cost_usd, usd(sum(micro_usd(t["usage"]) for t in turns)))
            self.assertIn(started.id, [e.id for e in await c.list_executions()])

            bundle = await c.execution_bundle(started.id)
            self.assertEqual(len(bundle), record.bundle_bytes)
            with open(os.path.join(work, "..", os.path.basename(work) + ".bundle"), "wb") as f:
                f.write(bundle)
                path = f.name
            try:
                git("fetch", "-q", path, cwd=work)
            finally:
                os.unlink(path)
            self.assertEqual(git("rev-parse", "FETCH_HEAD", cwd=work).decode().strip(), record.head)
            self.assertEqual(git("show", "FETCH_HEAD:NEW.md", cwd=work), b"made by the agent\n")

        with self.assertRaises(corral.CorralError) as caught:
            await self.client("py-execute-stranger").get_execution(started.id)
        self.assertEqual(caught.exception.code, "not_found")
        await c.delete_execution(started.id)
        with self.assertRaises(corral.CorralError) as caught:
            await c.get_execution(started.id)
        self.assertEqual(caught.exception.code, "not_found")
        with self.assertRaisesRegex(ValueError, "exactly one"):
            await c.execute("x")
