"""The op families: one compiled module each (`<family>.pyx`, forward and backward side by
side, with its `.pyi` stub), declared in the op manifest (`manifest.py`, from which
`generate.py` writes the op codes, the plain ops' functions and their stubs) over the
scalar rules of `rules.h` (shared with the CUDA kernels), and `backend.Backend`, what a
device package implements to run them.

Importing this package imports the families that give Variable its operators and methods
(they register them with the engine).
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.ops import elementwise, linalg, reduction, shape, sparse  # noqa: E402,F401  (they register)
