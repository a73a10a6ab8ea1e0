"""fastad's engine: the graph (fastad_cy.graph) and the op families over it.

The op modules cimport the graph and register the functions behind Variable's
operators and methods with it (`graph.register_methods`) when imported; importing
this package imports them, so the graph never imports an op module.
"""
from pkgutil import extend_path

# Every fastad_cy folder on sys.path serves this package, as if it had no __init__.py: a
# process started in a source checkout (its folder first on sys.path, no compiled modules
# there) still finds the compiled modules of the installed copy.
__path__ = extend_path(__path__, __name__)

from fastad_cy import elementwise, linalg, reduction, shape, sparse  # noqa: E402,F401  (they register)
