#!/usr/bin/python3
"""bench/RESULTS.md holds one section per benchmark, each between HTML comment markers:

    <!-- BEGIN name -->
    ...
    <!-- END name -->

A benchmark rewrites only its own section and leaves the rest of the file as it was. A section
not yet in the file is appended at its end; a missing file is created.

  results_md.py NAME PATH < TEXT     (or write_section() from Python)
"""
import os
import sys


def markers(name):
    return f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"


def write_section(path, name, body):
    begin, end = markers(name)
    block = f"{begin}\n{body.strip(chr(10))}\n{end}"
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    i = text.find(begin)
    j = text.find(end, i + len(begin)) if i >= 0 else -1
    if i >= 0 and j >= 0:
        text = text[:i] + block + text[j + len(end):]
    elif i >= 0 or text.find(end) >= 0:
        raise SystemExit(f"{path}: the markers of section '{name}' are not a BEGIN/END pair; "
                         "fix the file by hand")
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write_section(sys.argv[2], sys.argv[1], sys.stdin.read())
