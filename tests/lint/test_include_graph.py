"""The include-graph check itself: it must see an upward arrow and a cycle when there is one."""
import os
import unittest

import fake_tree

import include_graph


def tearDownModule():
    fake_tree.remove_all()


def tree(files):
    return fake_tree.tree(files, prefix="corral-include-graph-")


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
