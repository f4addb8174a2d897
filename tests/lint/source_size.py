#!/usr/bin/env python3
"""Rooms of the right size (DESIGN.md §2, issue 17): no C++ source file over 800 lines and no
function over 100, in the daemon's and the tools' folders.

A function is found the way our style writes one: a definition that starts at column 0 (the
namespaces are not indented) and whose body ends at the first later line that is exactly `}`.
Class bodies, namespaces, enums and initializer tables are not functions, and neither is a
function whose whole body is one static table and its return (a table is data: the seccomp
policy's syscall groups). Lines are counted from the signature's first line to the closing brace.

Usage: source_size.py [ROOT]   prints every violation and exits 1 if there is one.
"""
import os
import re
import sys

FOLDERS = ("common", "cgroups", "isolation", "rootfs", "supervisor", "api", "tools")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
NOT_A_FUNCTION = re.compile(r"^(namespace|class|struct|enum|union|extern|template\s*<[^>]*>\s*(class|struct)|"
                            r"(static\s+)?(inline\s+)?(const|constexpr)\b[^(]*=|.*=\s*\{$|#)")
OPENS_BODY = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>,\s*&]+)?\s*\{\s*$")


def functions(lines):
    """Yields (first line number, length, signature) of each column-0 function definition."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line[:1].isalpha() or line.startswith(("~", "::")):
            start = i
            # The signature may wrap: join up to 6 lines until one opens a body or ends a declaration.
            j = i
            while j < len(lines) and j - i < 6 and not lines[j].rstrip().endswith(("{", ";", "}")):
                j += 1
            if j < len(lines) and not NOT_A_FUNCTION.match(line) and OPENS_BODY.search(lines[j]):
                k = j + 1
                while k < len(lines) and lines[k].rstrip() != "}":
                    k += 1
                body = [b.strip() for b in lines[j + 1:k] if b.strip()]
                is_table = (body and body[0].startswith("static const") and body[-1].startswith("return ")
                            and sum(b.endswith(";") for b in body) == 2)
                if not is_table:
                    yield start + 1, k - start + 1, line.strip()
                i = k + 1
                continue
        i += 1


def check(root):
    problems = []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                if len(lines) - 1 > MAX_FILE_LINES:
                    problems.append(f"{rel}: {len(lines) - 1} lines (at most {MAX_FILE_LINES})")
                for first, length, signature in functions(lines):
                    if length > MAX_FUNCTION_LINES:
                        problems.append(f"{rel}:{first}: a function of {length} lines "
                                        f"(at most {MAX_FUNCTION_LINES}): {signature[:90]}")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    print(f"{len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
