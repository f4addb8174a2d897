#!/usr/bin/python3
"""Compatibility suite: CPython's own regression tests, on the host and in a corral sandbox.

The suite is Debian's libpython3.11-testsuite (/usr/lib/python3.11/test), run with regrtest
(`python3 -m test`, through regrtest_ids.py so that every test case has its id in the JUnit XML).
MODULES picks the parts that exercise the kernel interface. They run twice, the same way: on the
host as an unprivileged user (nobody, through setpriv; see HostSide) and inside a fresh `corral
run` sandbox with corrald's default limits as its `agent` (uid 1000), each with the same
environment (PATH, HOME=/home/agent, TMPDIR=/tmp, LANG; USER and LOGNAME name the user), stdin
/dev/null, and regrtest's output to a file.

Every test case's result (passed, failed, skipped, or absent when it did not run at all) must be
the same on both sides, except the differences listed in expected-differences.txt, each with its
reason; a listed difference that no longer occurs fails the run too, so the list stays true. A
difference that is not listed is run again, just those test cases, on both sides; it fails the
run only if it shows again (the suite has timing-sensitive tests, and this machine is shared).

Usage (as root; `corral run` needs it):
  tests/compat/run_compat.py [--build-dir BUILD] [--modules test_os,test_pty] [--jobs N]
The logs and both sides' JUnit XML go to $CORRAL_ARTIFACTS (default BUILD/test-artifacts/compat).
Exit status: 0 same results, 1 differences (or the run could not be made), 77 skipped (not root).
"""

import argparse
import fnmatch
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3.11"
SUITE_DIR = "/usr/lib/python3.11/test"
DIFFERENCES_FILE = os.path.join(HERE, "expected-differences.txt")

# CPython's test modules that exercise the kernel interface, by area, the longest first (regrtest
# runs them in this order, -j at a time). Chosen for coverage per second: the whole selection
# takes one to two minutes a side on 2 cores (README, "Tests").
MODULES = [
    # signals, and faulthandler (signal handlers, alternate stacks, timers)
    "test_signal", "test_faulthandler", "test_threadsignals",
    # processes, waiting, fork
    "test_subprocess", "test_wait3", "test_wait4", "test_fork1",
    # sockets and readiness: socket, select, poll, epoll, selectors
    "test_socket", "test_selectors", "test_poll", "test_select", "test_epoll",
    # multiprocessing: semaphores and shared memory in /dev/shm, fds passed over AF_UNIX
    "test_multiprocessing_forkserver",
    # asyncio over the kernel: event loops, sockets, pipes, subprocesses, child watchers, sendfile
    "test_asyncio.test_events", "test_asyncio.test_subprocess", "test_asyncio.test_unix_events",
    "test_asyncio.test_sock_lowlevel", "test_asyncio.test_sendfile", "test_asyncio.test_streams",
    "test_asyncio.test_server", "test_asyncio.test_base_events",
    "test_asyncio.test_selector_events",
    # threads, clocks, pseudo-terminals, the machine's identity (uuid1's MAC address)
    "test_threading", "test_thread", "test_time", "test_pty", "test_uuid",
    # files and directories, file descriptors, locks, memory maps, limits, users
    "test_os", "test_posix", "test_pathlib", "test_shutil", "test_tempfile", "test_fileio",
    "test_fcntl", "test_stat", "test_mmap", "test_resource", "test_pwd", "test_grp",
    # imports: .pyc files written beside sources and in __pycache__, unwritable directories
    "test_import",
    # servers on loopback: HTTP (with CGI scripts as processes), urllib against them
    "test_httpservers", "test_urllib2_localnet",
]

# Modules of which only some test cases run (fnmatch on the id after `test.MODULE.`).
SUBSETS = {
    # Its tests with processes; the same tests again over threads and over a manager
    # process would add a minute and nothing of the kernel's.
    "test_multiprocessing_forkserver": "WithProcessesTest*",
}

# regrtest's resources: all but those that need the internet, a display, a sound card, or
# gigabytes of disk and minutes of CPU.
RESOURCES = "all,-network,-urlfetch,-gui,-audio,-largefile,-cpu,-decimal,-tzdata"
MODULE_TIMEOUT_S = 300   # regrtest's --timeout: a hung module dumps its stacks and fails
SIDE_TIMEOUT_S = 1200    # one side's whole run
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_USER = "nobody"
SANDBOX_RUNNER = "/opt/corral-compat/regrtest_ids.py"
SANDBOX_MEMORY, SANDBOX_PIDS, SANDBOX_CPUS = "1G", 512, "1"
# The sandbox's /tmp (corral run's default --disk): its size and inodes, copied on the host.
TMP_SIZE, TMP_INODES = "1g", 65536
RESULTS = ("passed", "failed", "skipped", "absent")


class Side:
    """One place the suite runs: how to start a shell command there, and its paths."""

    def __init__(self, name, home, tmpdir, runner):
        self.name, self.home, self.tmpdir, self.runner = name, home, tmpdir, runner

    def script(self, modules, jobs, match=(), ignore=()):
        """The shell command that runs regrtest; the same on both sides but for the paths.
        It writes the log to stderr and then the JUnit XML to stdout. `match` runs only the
        test cases whose ids match those patterns, `ignore` all but those."""
        out = f"{self.home}/.compat"
        regrtest = [PYTHON, self.runner, "-j", str(jobs), "--python", f"{PYTHON} {self.runner}",
                    "--timeout", str(MODULE_TIMEOUT_S), "--slowest", "-u", RESOURCES,
                    "--junit-xml", f"{out}/junit.xml"]
        lines = ["umask 022", f"rm -rf {out} && mkdir {out} && cd {self.home} || exit 1"]
        for option, patterns in (("--matchfile", match), ("--ignorefile", ignore)):
            if patterns:
                name = f"{out}/{option[2:]}"
                lines.append(f"printf '%s\\n' {shlex.join(patterns)} >{name}")
                regrtest += [option, name]
        lines += [f"{shlex.join(regrtest + list(modules))} >{out}/log 2>&1",
                  "rc=$?", f"cat {out}/log >&2", f"cat {out}/junit.xml", "exit $rc"]
        return "\n".join(lines)

    def env(self):
        return {"PATH": SANDBOX_PATH, "HOME": self.home, "TMPDIR": self.tmpdir, "LANG": "C.UTF-8"}


class HostSide(Side):
    """The host, as `nobody`, with the sandbox's paths: in a mount namespace of its own (as
    systemd's PrivateTmp makes one) /tmp is a fresh tmpfs of the sandbox's size and /home a tmpfs
    holding /home/agent, so that path lengths and /tmp's file system are the same on both sides."""

    def __init__(self):
        super().__init__("host", "/home/agent", "/tmp", "/home/.corral-compat/regrtest_ids.py")
        user = pwd.getpwnam(HOST_USER)
        self.uid, self.gid = user.pw_uid, user.pw_gid

    def command(self, script):
        runner_dir = os.path.dirname(self.runner)
        setup = [
            "set -e",
            "mount -t tmpfs -o mode=755,nosuid,nodev,size=16m corral-compat-home /home",
            f"mkdir {runner_dir} {self.home}",
            f"chown {self.uid}:{self.gid} {self.home}",
            f"cp {shlex.quote(os.path.join(HERE, 'regrtest_ids.py'))} {runner_dir}/",
            f"mount -t tmpfs -o mode=1777,nosuid,nodev,size={TMP_SIZE},nr_inodes={TMP_INODES} "
            "corral-compat-tmp /tmp",
            shlex.join(["exec", "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                        "--clear-groups", "--inh-caps=-all", "/bin/sh", "-c", script]),
        ]
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                "\n".join(setup)]

    def env(self):
        return dict(super().env(), USER=HOST_USER, LOGNAME=HOST_USER)


class SandboxSide(Side):
    def __init__(self, corral):
        super().__init__("sandbox", "/home/agent", "/tmp", SANDBOX_RUNNER)
        self.corral = corral

    def command(self, script):
        # corral sets HOME, USER, LOGNAME, PATH (the same PATH) and HOSTNAME itself. The limits
        # are what corrald gives a sandbox by default (dist/corrald.toml: 1 GiB, 1 core, 512).
        return [self.corral, "run", "--memory", SANDBOX_MEMORY, "--pids", str(SANDBOX_PIDS),
                "--cpus", SANDBOX_CPUS,
                "--bind", f"{HERE}:{os.path.dirname(SANDBOX_RUNNER)}:ro",
                "--env", f"TMPDIR={self.tmpdir}", "--env", "LANG=C.UTF-8", "--cwd", self.home,
                "--wall-time", str(SIDE_TIMEOUT_S), "--", "/bin/sh", "-c", script]

    def env(self):
        return {"PATH": os.environ.get("PATH", SANDBOX_PATH)}


def run_side(side, modules, jobs, artifacts, tag, match=(), ignore=()):
    """Runs the modules on one side; returns ({test id: (result, detail)}, seconds)."""
    log_path = os.path.join(artifacts, f"{tag}-{side.name}.log")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(side.command(side.script(modules, jobs, match, ignore)),
                                env=side.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True)
        try:
            xml, _ = proc.communicate(timeout=SIDE_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            # Its session; regrtest's workers have sessions of their own and end themselves
            # within --timeout. The sandbox's --wall-time ends it before this.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"{side.name}: no result in {SIDE_TIMEOUT_S + 60} s; "
                               f"see {log_path}") from None
    seconds = time.monotonic() - started
    with open(os.path.join(artifacts, f"{tag}-{side.name}.xml"), "wb") as f:
        f.write(xml)
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise RuntimeError(f"{side.name}: no JUnit XML (exit {proc.returncode}, {e}); "
                           f"see {log_path}") from None
    return parse_junit(root), seconds


def parse_junit(root):
    results = {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if name is None:
            raise RuntimeError("a <testcase> without a name: regrtest_ids.py did not apply")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            results[name] = ("failed", failure.get("message", "").strip())
        elif case.get("outcome") == "UNEXPECTED_SUCCESS":
            results[name] = ("failed", "unexpected success")
        elif skipped is not None:
            results[name] = ("skipped", (skipped.text or "").strip())
        else:
            results[name] = ("passed", "")
    return results


def load_expected(path):
    """expected-differences.txt, a line each:
         ID HOST SANDBOX REASON     the run must show exactly this difference
         exclude ID REASON          run on neither side (see the file); must still differ alone
    ID may hold * and ? (fnmatch); blank lines and # comments are skipped."""
    entries, exclusions = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split(None, 3)
            if fields[0] == "exclude" and len(fields) >= 3:
                exclusions.append({"id": fields[1], "reason": " ".join(fields[2:]),
                                   "line": number})
            elif len(fields) == 4 and fields[1] in RESULTS and fields[2] in RESULTS:
                entries.append({"id": fields[0], "host": fields[1], "sandbox": fields[2],
                                "reason": fields[3], "line": number, "seen": 0})
            else:
                raise RuntimeError(f"{path}:{number}: want `ID HOST SANDBOX REASON` (results "
                                   f"{', '.join(RESULTS)}) or `exclude ID REASON`")
    return entries, exclusions


def compare(host, sandbox):
    """Test ids whose result differs, each with (host result, sandbox result)."""
    diffs = {}
    for test_id in sorted(set(host) | set(sandbox)):
        h = host.get(test_id, ("absent", ""))[0]
        s = sandbox.get(test_id, ("absent", ""))[0]
        if h != s:
            diffs[test_id] = (h, s)
    return diffs


def classify(diffs, entries):
    """Splits differences into listed and not listed; an entry matching a test id whose
    results are not the ones it names is a mismatch. Counts each entry's matches."""
    listed, unlisted, mismatched = {}, {}, []
    for test_id, pair in diffs.items():
        entry = next((e for e in entries if fnmatch.fnmatchcase(test_id, e["id"])), None)
        if entry is None:
            unlisted[test_id] = pair
        elif (entry["host"], entry["sandbox"]) != pair:
            mismatched.append((test_id, pair, entry))
        else:
            entry["seen"] += 1
            listed[test_id] = pair
    return listed, unlisted, mismatched


def module_of(test_id, modules):
    """The selected module a test id belongs to (the longest that prefixes it)."""
    owners = [m for m in modules if test_id.startswith(f"test.{m}.")]
    return max(owners, key=len) if owners else None


def skip_reasons_differing(host, sandbox):
    """{(host's reason, sandbox's reason): [test ids]} of test cases skipped on both sides for
    reasons that differ in more than numbers (pids in paths; numbers read N)."""
    groups = {}
    for test_id in sorted(host):
        if host[test_id][0] != "skipped" or sandbox.get(test_id, ("",))[0] != "skipped":
            continue
        pair = tuple(re.sub(r"\d+", "N", r[test_id][1]) for r in (host, sandbox))
        if pair[0] != pair[1]:
            groups.setdefault(pair, []).append(test_id)
    return groups


def counts(results):
    tally = {r: 0 for r in RESULTS[:3]}
    for result, _ in results.values():
        tally[result] += 1
    return tally


def detail(results, test_id):
    result, text = results.get(test_id, ("absent", ""))
    first = text.splitlines()[-1] if text else ""
    return f"{result}{': ' + first[:160] if first else ''}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.environ.get("CORRAL_BUILD_DIR"))
    parser.add_argument("--modules", help="comma-separated test modules (default: the selection); "
                        "with it, listed differences of other modules are not checked")
    parser.add_argument("--jobs", type=int, default=4,
                        help="regrtest worker processes a side (the tests mostly wait)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("compat: skipped: `corral run` needs root", file=sys.stderr)
        return 77
    if not args.build_dir:
        parser.error("--build-dir or CORRAL_BUILD_DIR is required")
    corral = os.path.join(os.path.abspath(args.build_dir), "tools", "corral")
    if not os.access(corral, os.X_OK):
        print(f"compat: {corral} is not built", file=sys.stderr)
        return 1
    if not os.path.exists(os.path.join(SUITE_DIR, "test_os.py")):
        print(f"compat: {SUITE_DIR} lacks the tests: install libpython3.11-testsuite "
              "(dist/install-deps.sh)", file=sys.stderr)
        return 1
    modules = args.modules.split(",") if args.modules else MODULES
    artifacts = os.environ.get("CORRAL_ARTIFACTS",
                               os.path.join(args.build_dir, "test-artifacts", "compat"))
    os.makedirs(artifacts, exist_ok=True)
    entries, exclusions = load_expected(DIFFERENCES_FILE)

    run = Comparison(HostSide(), SandboxSide(corral), modules, args.jobs, artifacts)
    try:
        return run.check(entries, exclusions, whole=not args.modules)
    except RuntimeError as e:
        print(f"compat: FAILED: {e}", file=sys.stderr)
        return 1


class Comparison:
    """The two sides and what is run on them."""

    def __init__(self, host_side, sandbox_side, modules, jobs, artifacts):
        self.sides = (host_side, sandbox_side)
        self.modules, self.jobs, self.artifacts = modules, jobs, artifacts

    def both(self, tag, modules, **patterns):
        (host, host_s), (sandbox, sandbox_s) = (
            run_side(side, modules, self.jobs, self.artifacts, tag, **patterns)
            for side in self.sides)
        return host, sandbox, host_s, sandbox_s

    def modules_of(self, ids):
        return sorted({module_of(t, self.modules) for t in ids} - {None})

    def check(self, entries, exclusions, whole):
        name = os.path.basename(DIFFERENCES_FILE)
        print(f"compat: {len(self.modules)} modules of {SUITE_DIR}, -j{self.jobs}, "
              f"{len(exclusions)} exclusions; artifacts in {self.artifacts}", flush=True)
        subset = [f"test.{m}.{SUBSETS.get(m, '*')}" for m in self.modules]
        host, sandbox, host_s, sandbox_s = self.both(
            "run", self.modules, match=subset if set(SUBSETS) & set(self.modules) else (),
            ignore=[e["id"] for e in exclusions])
        print(f"compat: host {len(host)} test cases in {host_s:.0f} s, sandbox {len(sandbox)} "
              f"in {sandbox_s:.0f} s", flush=True)
        problems = []
        empty = [m for m in self.modules if not any(module_of(t, self.modules) == m for t in host)]
        if empty:
            problems.append(f"modules that ran no test case on the host: {' '.join(empty)}")

        diffs = compare(host, sandbox)
        listed, unlisted, mismatched = classify(diffs, entries)
        flaky = {}
        if unlisted:
            # Once more, just those test cases, on both sides: only what shows again counts.
            print(f"compat: {len(unlisted)} differences not listed; running them again",
                  flush=True)
            host2, sandbox2, _, _ = self.both(
                "again", self.modules_of(unlisted),
                match=sorted({t.split(" ")[0] for t in unlisted}))
            again = compare({t: host2.get(t, ("absent", "")) for t in unlisted},
                            {t: sandbox2.get(t, ("absent", "")) for t in unlisted})
            for test_id in list(unlisted):
                ran_again = test_id in host2 or test_id in sandbox2
                if ran_again and again.get(test_id) != unlisted[test_id]:
                    flaky[test_id] = unlisted.pop(test_id)

        # Each exclusion must still make a difference when its test cases run on their own.
        excluded_ok = 0
        if exclusions and whole:
            patterns = [e["id"] for e in exclusions]
            host3, sandbox3, _, _ = self.both(
                "excluded", self.modules_of(p.replace("*", "x") for p in patterns),
                match=patterns)
            differing = compare(host3, sandbox3)
            for e in exclusions:
                if any(fnmatch.fnmatchcase(t, e["id"]) for t in differing):
                    excluded_ok += 1
                else:
                    problems.append(f"line {e['line']} of {name}: `exclude {e['id']}` runs the "
                                    "same on both sides now: remove it")

        for entry in entries:
            if entry["seen"]:
                print(f"  listed     {entry['id']}: {entry['seen']} test cases {entry['host']} on "
                      f"the host, {entry['sandbox']} inside ({entry['reason']})")
        for test_id in sorted(flaky):
            print(f"  not again  {test_id}: host {detail(host, test_id)}; "
                  f"sandbox {detail(sandbox, test_id)}")
        for test_id in sorted(unlisted):
            problems.append(f"{test_id}: host {detail(host, test_id)}; "
                            f"sandbox {detail(sandbox, test_id)}")
        for test_id, (h, s), entry in mismatched:
            problems.append(f"{test_id}: host {h}, sandbox {s}, but line {entry['line']} of "
                            f"{name} says {entry['host']} -> {entry['sandbox']}")
        if whole:
            for entry in entries:
                if entry["seen"] == 0:
                    problems.append(f"line {entry['line']} of {name} ({entry['id']}) "
                                    "no longer differs: remove it")
        both_failed = sorted(t for t in host if host[t][0] == "failed" and t not in diffs)

        h, s = counts(host), counts(sandbox)
        print(f"compat: host:    {len(host)} test cases: {h['passed']} passed, {h['failed']} "
              f"failed, {h['skipped']} skipped ({host_s:.0f} s)")
        print(f"compat: sandbox: {len(sandbox)} test cases: {s['passed']} passed, "
              f"{s['failed']} failed, {s['skipped']} skipped ({sandbox_s:.0f} s)")
        checked = (f"{excluded_ok} of {len(exclusions)}" if whole
                   else f"not checked (--modules), {len(exclusions)}")
        print(f"compat: {len(diffs)} differences: {len(listed)} listed, {len(flaky)} not shown "
              f"again, {len(unlisted)} not listed, {len(mismatched)} not as listed; "
              f"exclusions still differing alone: {checked}; "
              f"{len(both_failed)} failed on both sides")
        for test_id in both_failed:
            print(f"  both failed  {test_id}: {detail(host, test_id)}")
        # Not a difference, but worth seeing: e.g. a protocol this host's kernel lacks (skipped
        # on the host) that the sandbox refuses anyway (skipped with EPERM).
        reasons = skip_reasons_differing(host, sandbox)
        if reasons:
            print(f"compat: {sum(len(ids) for ids in reasons.values())} test cases skipped on "
                  "both sides, for different reasons:")
        for (on_host, inside), ids in reasons.items():
            print(f"  {len(ids)} like {ids[0]}: host {on_host[:100]!r}; sandbox {inside[:100]!r}")
        if problems:
            print("compat: FAILED", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return 1
        print("compat: same results")
        return 0


if __name__ == "__main__":
    sys.exit(main())
