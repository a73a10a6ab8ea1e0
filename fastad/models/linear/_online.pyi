"""Type stubs for fastad/models/linear/_online.pyx: Vowpal Wabbit's adaptive, normalised and
invariant update of LinearModel (optimizer="vw")."""
from typing import Final

import numpy as np

LOSSES: Final[dict[str, int]]

class OnlineUpdate:
    longest: Final[int]
    def __init__(self, weights: dict[str, np.ndarray], loss: str, tau: float, eta: float,
                 longest: int) -> None: ...
    def worker(self) -> OnlineUpdate: ...
    def merge(self, workers: list[OnlineUpdate]) -> None: ...
    def train(self, ids: np.ndarray, offsets: np.ndarray, values: np.ndarray | None, targets: np.ndarray,
              weights: np.ndarray | None, order: np.ndarray) -> float: ...
    def write_back(self) -> None: ...
