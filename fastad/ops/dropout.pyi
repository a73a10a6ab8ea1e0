"""Type stubs for fastad/ops/dropout.pyx: dropout masks drawn anew on every forward."""
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from fastad._engine.graph import Variable

class TrainingFlag:
    training: bool
    def __init__(self, training: bool = True) -> None: ...

class DropoutMask(Variable):
    def draw(self) -> NDArray[np.floating[Any]]: ...

def dropout_mask(shape: tuple[int, ...], dtype: DTypeLike, p: float, flag: TrainingFlag,
                 seed: ArrayLike) -> DropoutMask: ...
def dropout(x: Variable, p: float, flag: TrainingFlag, seed: ArrayLike) -> Variable: ...
