"""What the Python benchmarks (images.py, sessions.py, egress.py) set up before their imports:
the build directory (the script's first argument, else $CORRAL_BUILD_DIR, else ./build) in
CORRAL_BUILD_DIR, which tests/e2e/corral_e2e.py reads when imported, and the test suite's e2e and
fixtures directories on sys.path. Import it first: `from bench_env import HERE, REPO, BUILD`."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if len(sys.argv) > 1:
    os.environ["CORRAL_BUILD_DIR"] = os.path.abspath(sys.argv[1])
BUILD = os.environ.setdefault("CORRAL_BUILD_DIR", os.path.join(REPO, "build"))
for _path in (os.path.join(REPO, "tests", "e2e"), os.path.join(REPO, "tests", "fixtures")):
    if _path not in sys.path:
        sys.path.insert(0, _path)
