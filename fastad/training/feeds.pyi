"""Type stubs for fastad/training/feeds.pyx: FeedSampler, rows of arrays given up front; BagSampler,
bags of ids of any length."""
from collections.abc import Mapping

from numpy.typing import ArrayLike

from fastad._engine.graph import IndexInput, Input, Variable
from fastad.training.sampler import Sampler, _Seed

class FeedSampler(Sampler):
    def __init__(self, feeds: Mapping[Input, ArrayLike] | Mapping[IndexInput, ArrayLike]
                 | Mapping[Variable, ArrayLike], shuffle: bool = False, seed: _Seed = None,
                 rank: int = 0, workers: int = 1) -> None: ...
    @property
    def examples_per_epoch(self) -> int: ...
    @property
    def shuffled(self) -> bool: ...

class BagSampler(FeedSampler):
    def __init__(self, ids_leaf: IndexInput, offsets_leaf: IndexInput, ids: ArrayLike,
                 offsets: ArrayLike, feeds: Mapping[Input, ArrayLike] | Mapping[IndexInput, ArrayLike]
                 | None = None, shuffle: bool = False, seed: _Seed = None, rank: int = 0,
                 workers: int = 1, weights_leaf: Input | None = None,
                 weights: ArrayLike | None = None, pad: int | None = None) -> None: ...
