#!/usr/bin/python3
"""Runs the web page's browser tests (test/*.test.mjs: Playwright driving Debian's Chromium)
against a real corrald serving the page that the CMake build put beside it (build/tools/web),
with the scripted model behind its relay (tests/e2e/js_harness.py). Screenshots go to
$CORRAL_ARTIFACTS (default web/test-artifacts). Exit status: node's. Needs root."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
os.environ.setdefault("CORRAL_BUILD_DIR", os.path.join(REPO, "build"))
import js_harness  # noqa: E402


def main():
    if not os.path.isdir(os.path.join(HERE, "node_modules")):
        subprocess.run(["npm", "ci", "--no-fund", "--no-audit", "--loglevel=error"], cwd=HERE, check=True)
    page = os.path.join(os.environ["CORRAL_BUILD_DIR"], "tools", "web", "index.html")
    if not os.path.exists(page):
        print(f"web/run_tests.py: {page} is missing: the build made no web page (npm ci in web/, then build)",
              file=sys.stderr)
        return 1
    artifacts = os.environ.get("CORRAL_ARTIFACTS", os.path.join(HERE, "test-artifacts"))
    os.makedirs(artifacts, exist_ok=True)
    return js_harness.run_node_tests(HERE, sys.argv[1:] or js_harness.test_files(HERE), issuer="web-tests",
                                     extra_env={"CORRAL_ARTIFACTS": artifacts})


if __name__ == "__main__":
    sys.exit(main())
