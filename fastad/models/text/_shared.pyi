"""Type stubs for fastad/models/text/_shared.pyx: skip-gram's loss of one window with shared
negatives (pWord2Vec's form), in one node."""
from numpy.typing import ArrayLike

from fastad._engine.graph import IndexInput, Input, RowGather, Variable

class WindowLoss(RowGather): ...

def window_loss(in_table: Variable, context: IndexInput | ArrayLike, weights: Input, out_table: Variable,
                target: IndexInput | ArrayLike, groups: int = 1,
                sequential_centre: bool = False) -> Variable: ...
