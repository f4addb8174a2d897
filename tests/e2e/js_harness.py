"""Runs JavaScript tests (node's test runner) against a real corrald, for the TypeScript SDK
(sdk/typescript/run_tests.py) and the web page (web/run_tests.py): the daemon and the scripted
model of sdk_harness.py, and `node --test` with the environment it describes."""
import os

from sdk_harness import run_with_daemon


def run_node_tests(cwd, tests, extra_env=None, issuer="js-tests", api_config=""):
    """Runs `node --test` on the test files (one at a time: they share the scripted server's
    scenario) in cwd. Returns node's exit status."""
    return run_with_daemon(["node", "--test", "--test-concurrency=1", *tests], cwd, issuer, extra_env, api_config)


def test_files(directory):
    return sorted(os.path.join("test", f) for f in os.listdir(os.path.join(directory, "test"))
                  if f.endswith(".test.mjs"))
