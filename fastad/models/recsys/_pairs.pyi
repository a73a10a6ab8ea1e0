"""Type stubs for fastad/models/recsys/_pairs.pyx: Interactions and PairwiseSampler (ranking triples)."""
from typing import Any, Literal

from fastad._engine.graph import IndexInput
from fastad.training.sampler import Sampler, _Seed

class Interactions:
    @property
    def matrix(self) -> Any: ...
    @property
    def n_users(self) -> int: ...
    @property
    def n_items(self) -> int: ...
    @property
    def nnz(self) -> int: ...
    def __init__(self, interactions: Any, n_users: int | None = None,
                 n_items: int | None = None, copy: bool = True) -> None: ...

class PairwiseSampler(Sampler):
    @property
    def examples_per_epoch(self) -> int: ...
    @property
    def redraws(self) -> int: ...
    @property
    def data(self) -> Interactions: ...
    def __init__(self, interactions: Any, users: IndexInput, pos: IndexInput, neg: IndexInput, *,
                 sample: Literal["interaction", "user"] = "interaction",
                 negatives: Literal["uniform", "popularity"] = "uniform",
                 examples: int | None = None, n_users: int | None = None, n_items: int | None = None,
                 seed: _Seed = None, rank: int = 0, workers: int = 1) -> None: ...
