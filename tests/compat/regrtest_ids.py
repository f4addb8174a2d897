"""CPython's regrtest (`python3 -m test`), with one change to its --junit-xml output.

regrtest writes one <testcase> per test, named by its id, from the result's addSuccess,
addFailure, addError and addSkip. A test that fails only inside `self.subTest(...)` reaches none
of them (unittest reports it through addSubTest), so its <testcase> stays without a name and the
failure cannot be told apart from the others. Here such a test gets its id and a <failure> (or
<error>) naming the first failing subtest; nothing else changes.

Run it as `python3 regrtest_ids.py ARGS` with the arguments of `python3 -m test`; with -j, also
pass `--python "python3 /path/to/regrtest_ids.py"` so that regrtest's worker processes, which it
starts as `<python> -u -m test.regrtest --worker-args ...`, come back here too.
"""

import os
import sys

from test.libregrtest.main import main
from test.support import testresult

_Result = testresult.RegressionTestResult
_make_error = _Result._RegressionTestResult__makeErrorDict
_base_add_subtest = _Result.addSubTest
_base_stop_test = _Result.stopTest


def _add_subtest(self, test, subtest, err):
    _base_add_subtest(self, test, subtest, err)
    if err is not None and getattr(self, "_compat_subtest_failure", None) is None:
        kind = "failure" if issubclass(err[0], test.failureException) else "error"
        self._compat_subtest_failure = (kind, subtest, err)


def _stop_test(self, test):
    failed = getattr(self, "_compat_subtest_failure", None)
    self._compat_subtest_failure = None
    # The <testcase> element startTest made is still open when no other outcome closed it.
    if failed is not None and self._RegressionTestResult__e is not None:
        kind, subtest, err = failed
        details = _make_error(*err)
        details["message"] = f"{subtest}: {details['message']}"
        self._add_result(test, True, **{kind: details})
    _base_stop_test(self, test)


_Result.addSubTest = _add_subtest
_Result.stopTest = _stop_test

if __name__ == "__main__":
    args = sys.argv[1:]
    # A worker: drop the interpreter options regrtest put before `-m test.regrtest`.
    if "-m" in args and args[args.index("-m") + 1:][:1] == ["test.regrtest"]:
        if "-u" in args[:args.index("-m")]:
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        args = args[args.index("-m") + 2:]
    sys.argv[1:] = args
    # As under `python3 -m test`: the working directory first on the path, not this script's.
    sys.path[0] = os.getcwd()
    main()
