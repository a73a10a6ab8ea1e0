"""Import a benchmark of bench/ in a test (bench/ on the path only while it loads, for its
`common` and sibling imports)."""
import importlib
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def bench_module(name):
    """bench/<name>.py as a module."""
    sys.path.insert(0, BENCH)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(BENCH)
