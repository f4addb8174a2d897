"""The size check itself: it must see a long file and a long function, and pass their controls."""
import unittest

import fake_tree

import source_size


def tearDownModule():
    fake_tree.remove_all()


def tree(files):
    return fake_tree.tree(files, prefix="corral-source-size-")


def function(name, body_lines):
    """A column-0 function of 2 + body_lines lines."""
    return f"int {name}(int a) {{\n" + "  a += 1;\n" * body_lines + "}\n"


class SourceSizeTest(unittest.TestCase):
    def test_a_function_of_100_lines_passes_and_of_101_fails(self):
        root = tree({"api/a.cc": function("Fits", 98) + "\n" + function("TooLong", 99)})
        problems = source_size.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("api/a.cc:102: a function of 101 lines", problems[0])
        self.assertIn("TooLong", problems[0])

    def test_a_wrapped_signature_and_a_method_count_too(self):
        text = ("StatusOr<int> Widget::Compute(const std::string& a,\n"
                "                              int b) const {\n" + "  b += 1;\n" * 100 + "}\n")
        problems = source_size.check(tree({"supervisor/w.cc": text}))
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("supervisor/w.cc:1: a function of 103 lines", problems[0])

    def test_a_file_of_801_lines_fails_and_800_passes(self):
        root = tree({"common/long.h": "// x\n" * 801, "common/fits.h": "// x\n" * 800})
        problems = source_size.check(root)
        self.assertEqual(problems, ["common/long.h: 801 lines (at most 800)"])

    def test_a_static_table_is_data_and_a_function_with_more_is_not(self):
        table = ("const std::vector<int>& Table() {\n  static const std::vector<int> kTable = {\n" +
                 "      1,\n" * 120 + "  };\n  return kTable;\n}\n")
        self.assertEqual(source_size.check(tree({"isolation/t.cc": table})), [])
        more = table.replace("  return kTable;\n", "  Log();\n  return kTable;\n")
        self.assertEqual(len(source_size.check(tree({"isolation/t.cc": more}))), 1)

    def test_one_line_functions_and_classes_are_not_long_functions(self):
        text = "int One() { return 1; }\n" + "class Big {\n" + " int x;\n" * 150 + "};\n"
        self.assertEqual(source_size.check(tree({"rootfs/b.h": text})), [])


if __name__ == "__main__":
    unittest.main()
