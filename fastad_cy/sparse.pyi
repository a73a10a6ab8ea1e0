"""Type stubs for fastad_cy/sparse.pyx: take (a gather with a sparse gradient)."""
from numpy.typing import ArrayLike

from fastad_cy.graph import IndexInput, Variable

class Take(Variable): ...

def take(table: Variable, ix: IndexInput | ArrayLike) -> Variable: ...
