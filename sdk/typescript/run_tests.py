#!/usr/bin/python3
"""Runs the SDK's node tests (test/*.test.mjs, or the files given as arguments) against a real
corrald and the scripted model (tests/e2e/js_harness.py says what they get). Builds the SDK
first (npm ci if node_modules is missing, then tsc). Exit status: node's. Needs root (corrald)
and Claude Code (dist/install-deps.sh installs both's needs)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
os.environ.setdefault("CORRAL_BUILD_DIR", os.path.join(REPO, "build"))
import js_harness  # noqa: E402


def main():
    if not os.path.isdir(os.path.join(HERE, "node_modules")):
        subprocess.run(["npm", "ci", "--no-fund", "--no-audit", "--loglevel=error"], cwd=HERE, check=True)
    subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=HERE, check=True)
    return js_harness.run_node_tests(HERE, sys.argv[1:] or js_harness.test_files(HERE), issuer="sdk-tests")


if __name__ == "__main__":
    sys.exit(main())
