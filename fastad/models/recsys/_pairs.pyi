"""Type stubs for fastad/models/recsys/_pairs.pyx: Interactions and PairwiseSampler (ranking triples)."""
from typing import Any, Final, Literal

from fastad._engine.graph import IndexInput
from fastad.training.sampler import Sampler, _Seed

class Interactions:
    matrix: Final[Any]
    n_users: Final[int]
    n_items: Final[int]
    nnz: Final[int]
    def __init__(self, interactions: Any, n_users: int | None = None,
                 n_items: int | None = None, copy: bool = True) -> None: ...

class PairwiseSampler(Sampler):
    examples_per_epoch: Final[int]
    redraws: Final[int]
    data: Final[Interactions]
    def __init__(self, interactions: Any, users: IndexInput, pos: IndexInput, neg: IndexInput, *,
                 sample: Literal["interaction", "user"] = "interaction",
                 negatives: Literal["uniform", "popularity"] = "uniform",
                 examples: int | None = None, n_users: int | None = None, n_items: int | None = None,
                 seed: _Seed = None, rank: int = 0, workers: int = 1) -> None: ...
