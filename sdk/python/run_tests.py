#!/usr/bin/python3
"""Builds the Python SDK's wheel, installs it with pip into a fresh virtual environment (on
Debian's python3-httpx and python3-websockets: --system-site-packages, no index), and runs its
tests (tests/test_*.py, or the modules given as arguments) with that environment's python:
against a real corrald and the scripted model (tests/e2e/sdk_harness.py says what they get),
with the real Claude Code CLI. Builds the TypeScript SDK first (npm ci if node_modules is
missing, then tsc): the token test mints with both. `--unit` runs only the tests that need no
daemon (token, webhook, types). Exit status: unittest's. Needs root (corrald)."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TS_SDK = os.path.join(REPO, "sdk", "typescript")
UNIT = ["test_token", "test_webhook", "test_typing", "test_tar_extract", "test_hostile_daemon", "test_readme.Readme.test_every_python_example_compiles"]
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from build_wheel import build_wheel  # noqa: E402
os.environ.setdefault("CORRAL_BUILD_DIR", os.path.join(REPO, "build"))


def install(wheel, out_dir):
    """A virtual environment that sees Debian's packages, with the wheel installed by pip."""
    venv = os.path.join(out_dir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", wheel],
                   check=True)
    return python


def build_typescript_sdk():
    if not os.path.isdir(os.path.join(TS_SDK, "node_modules")):
        subprocess.run(["npm", "ci", "--no-fund", "--no-audit", "--loglevel=error"], cwd=TS_SDK, check=True)
    subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=TS_SDK, check=True)


def main(args):
    unit_only = "--unit" in args
    modules = [a for a in args if a != "--unit"] or (UNIT if unit_only else sorted(
        f[:-3] for f in os.listdir(os.path.join(HERE, "tests")) if f.startswith("test_") and f.endswith(".py")))
    build_typescript_sdk()
    out_dir = tempfile.mkdtemp(prefix="corral-pysdk-")
    try:
        python = install(build_wheel(out_dir), out_dir)
        argv = [python, "-m", "unittest", "-v", *modules]
        env = {"CORRAL_TS_SDK": os.path.join(TS_SDK, "dist"), "PYTHONDONTWRITEBYTECODE": "1"}
        if unit_only:
            return subprocess.run(argv, cwd=os.path.join(HERE, "tests"), env=dict(os.environ, **env)).returncode
        import sdk_harness
        return sdk_harness.run_with_daemon(argv, os.path.join(HERE, "tests"), "py-sdk-tests", env)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
