"""Type stubs for fastad/ops/fastmath.pyx: the fast-math approximations applied to arrays."""
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

FUNCTIONS: tuple[str, ...]

def enabled() -> bool: ...
def approximate(name: Literal["exp", "log", "tanh", "sigmoid"],
                x: ArrayLike) -> NDArray[np.floating[Any]]: ...
