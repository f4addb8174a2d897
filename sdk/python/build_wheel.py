#!/usr/bin/python3
"""Builds the Python SDK's wheel (corral_sdk-<version>-py3-none-any.whl) into OUT_DIR with
Debian's pip, setuptools and wheel: no registry, no build isolation, and nothing left in the
source tree (it builds from a copy). `cmake --build build --target sdk_python_wheel` runs it;
then `pip install <wheel>` (in a virtual environment made with --system-site-packages, to use
Debian's python3-httpx and python3-websockets). Usage: build_wheel.py OUT_DIR; prints the path."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def build_wheel(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corral-wheel-") as tmp:
        source = os.path.join(tmp, "source")
        shutil.copytree(HERE, source, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
        built = os.path.join(tmp, "wheels")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--disable-pip-version-check", "--wheel-dir", built, source], check=True)
        wheels = [f for f in os.listdir(built) if f.endswith(".whl")]
        assert len(wheels) == 1, wheels
        target = os.path.join(out_dir, wheels[0])
        shutil.copyfile(os.path.join(built, wheels[0]), target)
        return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build_wheel(sys.argv[1]))
