"""The command line of a unittest file that drives a built ropeserve.

    ARGS, rest = parse_ropeserve_args(__doc__)   # --ropeserve PATH, the rest for unittest
    run_tests_needing(stubs, rest)               # exits 77 (ctest's skip) without them

run_tests_needing calls `needs()` first: an ImportError there (the ropeserve
Python package and its generated stubs are not on PYTHONPATH) skips the
file with exit status 77, which ctest's SKIP_RETURN_CODE reports as
skipped; otherwise unittest runs the __main__ module's tests and exits with
their result.
"""

import argparse
import sys
import unittest


def parse_ropeserve_args(doc):
    """(namespace with .ropeserve, the arguments left for unittest)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    return parser.parse_known_args()


def run_tests_needing(needs, rest):
    try:
        needs()
    except ImportError as e:
        print("skipped: the ropeserve Python package is not on PYTHONPATH (%s)" % e)
        sys.exit(77)
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)
