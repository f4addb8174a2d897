#!/usr/bin/python3
"""Runs the SDK's node tests (test/*.test.mjs) against a real corrald: started, given an issuer,
and removed with everything it made by tests/e2e/corral_e2e.py's Daemon. Builds the SDK first
(npm ci if node_modules is missing, then tsc). Exit status: node's. Needs root (corrald)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
os.environ.setdefault("CORRAL_BUILD_DIR", os.path.join(REPO, "build"))
from corral_e2e import Daemon  # noqa: E402


def main():
    if not os.path.isdir(os.path.join(HERE, "node_modules")):
        subprocess.run(["npm", "ci", "--no-fund", "--no-audit", "--loglevel=error"], cwd=HERE, check=True)
    subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=HERE, check=True)
    daemon = Daemon()
    try:
        daemon.start()
        secret = daemon.add_issuer("sdk-tests")
        env = dict(os.environ, CORRAL_URL=f"http://127.0.0.1:{daemon.port}", CORRAL_ISSUER="sdk-tests",
                   CORRAL_SECRET=secret)
        tests = sorted(os.path.join("test", f) for f in os.listdir(os.path.join(HERE, "test")) if f.endswith(".test.mjs"))
        return subprocess.run(["node", "--test", *tests], cwd=HERE, env=env).returncode
    finally:
        daemon.cleanup()


if __name__ == "__main__":
    sys.exit(main())
