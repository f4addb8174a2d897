"""The compatibility harness's own logic, without root or a sandbox: regrtest_ids.py names the
test cases that regrtest leaves unnamed, and run_compat.py's comparison fails on a difference
that is not listed, on one not as listed, and on a listed one that no longer occurs."""

import os
import subprocess
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

import run_compat

HERE = os.path.dirname(os.path.abspath(__file__))
TOY_TESTS = textwrap.dedent("""\
    import unittest
    class T(unittest.TestCase):
        def test_a_ok(self): pass
        def test_b_subtest_fails(self):
            for i in range(3):
                with self.subTest(i=i):
                    self.assertNotEqual(i, 1)
        def test_c_subtest_errors(self):
            with self.subTest(x=1):
                raise PermissionError(13, "denied")
        def test_d_skip(self): self.skipTest("why not")
        def test_e_fails(self): self.fail("no")
    """)


@unittest.skipUnless(os.path.exists(os.path.join(run_compat.SUITE_DIR, "libregrtest")),
                     "regrtest is not installed (libpython3.11-stdlib)")
class RegrtestIdsTest(unittest.TestCase):
    """regrtest on a toy test module, with and without regrtest_ids.py."""

    def run_regrtest(self, *front):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "test_toy.py"), "w") as f:
                f.write(TOY_TESTS)
            xml = os.path.join(tmp, "out.xml")
            subprocess.run([*front, "--testdir", tmp, "--junit-xml", xml, "test_toy"],
                           cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin", "TMPDIR": tmp}, timeout=120)
            return ET.parse(xml).getroot()

    def test_plain_regrtest_leaves_subtest_failures_unnamed(self):
        # The control: why regrtest_ids.py exists. Should CPython fix this, drop the wrapper.
        root = self.run_regrtest(run_compat.PYTHON, "-m", "test")
        names = [case.get("name") for case in root.iter("testcase")]
        self.assertEqual(names.count(None), 2, names)
        with self.assertRaisesRegex(RuntimeError, "without a name"):
            run_compat.parse_junit(root)

    def check_named(self, root):
        results = run_compat.parse_junit(root)
        self.assertEqual({t: r for t, (r, _) in results.items()},
                         {"test_toy.T.test_a_ok": "passed",
                          "test_toy.T.test_b_subtest_fails": "failed",
                          "test_toy.T.test_c_subtest_errors": "failed",
                          "test_toy.T.test_d_skip": "skipped",
                          "test_toy.T.test_e_fails": "failed"})
        self.assertIn("(i=1)", results["test_toy.T.test_b_subtest_fails"][1])
        self.assertIn("PermissionError", results["test_toy.T.test_c_subtest_errors"][1])
        self.assertEqual(results["test_toy.T.test_d_skip"][1], "why not")

    def test_wrapper_names_them_in_process(self):
        runner = os.path.join(HERE, "regrtest_ids.py")
        self.check_named(self.run_regrtest(run_compat.PYTHON, runner))

    def test_wrapper_names_them_in_workers(self):
        runner = os.path.join(HERE, "regrtest_ids.py")
        self.check_named(self.run_regrtest(run_compat.PYTHON, runner, "-j2", "--python",
                                           f"{run_compat.PYTHON} {runner}"))


class CompareTest(unittest.TestCase):
    HOST = {"test.test_a.T.test_same": ("passed", ""),
            "test.test_a.T.test_fails_inside": ("passed", ""),
            "test.test_a.T.test_skipped_inside": ("passed", ""),
            "test.test_b.T.test_only_host": ("skipped", "reason")}
    SANDBOX = {"test.test_a.T.test_same": ("passed", ""),
               "test.test_a.T.test_fails_inside": ("failed", "PermissionError: [Errno 13]"),
               "test.test_a.T.test_skipped_inside": ("skipped", "needs a tty")}

    def entries(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write(text)
            f.flush()
            return run_compat.load_expected(f.name)

    def test_differences_include_absent_test_cases(self):
        self.assertEqual(run_compat.compare(self.HOST, self.SANDBOX), {
            "test.test_a.T.test_fails_inside": ("passed", "failed"),
            "test.test_a.T.test_skipped_inside": ("passed", "skipped"),
            "test.test_b.T.test_only_host": ("skipped", "absent")})
        self.assertEqual(run_compat.compare(self.HOST, self.HOST), {})

    def test_listed_unlisted_and_not_as_listed(self):
        entries, exclusions = self.entries(textwrap.dedent("""\
            # a comment
            test.test_a.T.test_fails_* passed failed   a reason
            test.test_a.T.test_skipped_inside passed failed  listed with the wrong results
            test.test_c.* passed failed  matches nothing
            exclude test.test_d.*UDPLITE* seccomp refuses UDP-Lite
            """))
        self.assertEqual([e["id"] for e in exclusions], ["test.test_d.*UDPLITE*"])
        listed, unlisted, mismatched = run_compat.classify(
            run_compat.compare(self.HOST, self.SANDBOX), entries)
        self.assertEqual(list(listed), ["test.test_a.T.test_fails_inside"])
        self.assertEqual(unlisted, {"test.test_b.T.test_only_host": ("skipped", "absent")})
        self.assertEqual([(t, e["line"]) for t, _, e in mismatched],
                         [("test.test_a.T.test_skipped_inside", 3)])
        # A listed difference that did not occur is one nobody matched: the run fails on it.
        self.assertEqual([e["line"] for e in entries if e["seen"] == 0], [3, 4])

    def test_malformed_lines_are_refused(self):
        for line in ("test.test_a.T.x passed  no reason-less results\n",
                     "test.test_a.T.x passed broken some reason\n",
                     "exclude test.test_a.T.x\n"):
            with self.subTest(line=line), self.assertRaisesRegex(RuntimeError, "want"):
                self.entries(line)

    def test_the_shipped_list_parses(self):
        entries, exclusions = run_compat.load_expected(run_compat.DIFFERENCES_FILE)
        for e in entries + exclusions:
            self.assertTrue(e["reason"].strip(), e)

    def test_module_of_prefers_the_longest(self):
        modules = ["test_asyncio.test_events", "test_os", "test_asyncio.test_subprocess"]
        self.assertEqual(run_compat.module_of("test.test_asyncio.test_events.T.t", modules),
                         "test_asyncio.test_events")
        self.assertEqual(run_compat.module_of("test.test_os.T.t", modules), "test_os")
        self.assertIsNone(run_compat.module_of("test.test_osx.T.t", modules))


if __name__ == "__main__":
    unittest.main()
