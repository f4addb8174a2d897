"""The include-graph check itself: it must see an upward arrow and a cycle when there is one."""
import os
import shutil
import tempfile
import unittest

import include_graph


_made = []


def tearDownModule():
    for root in _made:
        shutil.rmtree(root, ignore_errors=True)


def tree(files):
    root = tempfile.mkdtemp(prefix="corral-include-graph-")
    _made.append(root)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return root


class IncludeGraphTest(unittest.TestCase):
    def test_downward_arrows_pass(self):
        root = tree({"api/a.cc": '#include "supervisor/b.h"\n#include "common/c.h"\n',
                     "supervisor/b.h": '#include "isolation/d.h"\n',
                     "isolation/d.h": '#include "rootfs/e.h"\n#include <vector>\n',
                     "rootfs/e.h": '#include "common/c.h"\n', "common/c.h": ""})
        _, problems = include_graph.check(root)
        self.assertEqual(problems, [])

    def test_upward_arrows_fail(self):
        root = tree({"common/c.h": '#include "supervisor/b.h"\n', "supervisor/b.h": "",
                     "rootfs/e.cc": '#include "isolation/d.h"\n', "isolation/d.h": "",
                     "supervisor/x.cc": '  #  include "api/y.h"\n', "api/y.h": ""})
        _, problems = include_graph.check(root)
        self.assertEqual(len(problems), 3, problems)
        self.assertTrue(any(p.startswith("common/c.h: includes supervisor/b.h") for p in problems))
        self.assertTrue(any(p.startswith("rootfs/e.cc: includes isolation/d.h") for p in problems))
        self.assertTrue(any(p.startswith("supervisor/x.cc: includes api/y.h") for p in problems))

    def test_a_cycle_between_modules_fails_and_a_header_with_its_source_does_not(self):
        root = tree({"supervisor/a.h": '#include "supervisor/b.h"\n',
                     "supervisor/a.cc": '#include "supervisor/a.h"\n',
                     "supervisor/b.h": "", "supervisor/b.cc": '#include "supervisor/c.h"\n',
                     "supervisor/c.h": '#include "supervisor/a.h"\n'})
        _, problems = include_graph.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("cycle between supervisor/a, supervisor/b, supervisor/c", problems[0])
        os.remove(os.path.join(root, "supervisor/c.h"))
        with open(os.path.join(root, "supervisor/c.h"), "w", encoding="utf-8") as f:
            f.write("")
        self.assertEqual(include_graph.check(root)[1], [])


if __name__ == "__main__":
    unittest.main()
