#!/usr/bin/env python3
"""Checks the include graph of corral's C++ tree against DESIGN.md §2, from the #include lines.

Folders are layers: api -> supervisor -> isolation -> rootfs, cgroups -> common. An include may
point down or inside its own folder, never up (isolation's launcher runs rootfs's mount plan in
the child, so isolation sits above rootfs; rootfs and cgroups know neither each other nor it).
tools/ and tests/ may include any library and are not checked. Inside supervisor/ and api/, no cycle
between modules (a module is a .h with its .cc: `a.cc` including `b.h` is an arrow a -> b).

Usage: include_graph.py [ROOT]   prints every violation and exits 1 if there is one.
"""
import os
import re
import sys

LAYERS = {
    "common": set(),
    "cgroups": {"common"},
    "isolation": {"common", "rootfs", "cgroups"},
    "rootfs": {"common"},
    "supervisor": {"common", "cgroups", "isolation", "rootfs"},
    "api": {"common", "cgroups", "isolation", "rootfs", "supervisor"},
}
CYCLE_FREE = ("supervisor", "api")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".h", ".cc")


def folder_of(path):
    return path.split("/", 1)[0]


def module_of(path):
    """supervisor/a.cc and supervisor/a.h are one module, supervisor/a."""
    return os.path.splitext(path)[0]


def scan(root):
    """Returns {file: [included project files]} for every source file under the layer folders."""
    graph = {}
    for layer in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            for name in names:
                if not name.endswith(SOURCE):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8") as f:
                    text = f.read()
                graph[rel] = [inc for inc in INCLUDE.findall(text) if folder_of(inc) in LAYERS]
    return graph


def layer_violations(graph):
    out = []
    for src, incs in sorted(graph.items()):
        here = folder_of(src)
        for inc in incs:
            there = folder_of(inc)
            if there != here and there not in LAYERS[here]:
                out.append(f"{src}: includes {inc} ({here} may include only "
                           f"{', '.join(sorted(LAYERS[here] | {here}))})")
    return out


def module_cycles(graph, folder):
    """Strongly connected components of more than one module, with Tarjan's algorithm."""
    edges = {}
    for src, incs in graph.items():
        if folder_of(src) != folder:
            continue
        a = module_of(src)
        edges.setdefault(a, set())
        for inc in incs:
            b = module_of(inc)
            if folder_of(inc) == folder and b != a:
                edges[a].add(b)
                edges.setdefault(b, set())
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        arrows = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
        out.append(f"cycle between {', '.join(comp)}: {'; '.join(arrows)}")
    return out


def check(root):
    graph = scan(root)
    problems = layer_violations(graph)
    for folder in CYCLE_FREE:
        problems += module_cycles(graph, folder)
    return graph, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    graph, problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    print(f"{len(graph)} files, {sum(len(v) for v in graph.values())} project includes, "
          f"{len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
