"""fastad's engine: the graph (fastad_cy.graph) and the op families over it.

The op modules cimport the graph and register the functions behind Variable's
operators and methods with it (`graph.register_methods`) when imported; importing
this package imports them, so the graph never imports an op module.
"""
from fastad_cy import elementwise, linalg, reduction, shape, sparse  # noqa: F401  (they register)
