"""Type stubs for fastad/models/recsys/_pairs.pyx: Interactions, PairwiseSampler (ranking triples),
WarpSampler (WARP's triples and their rank weights), FeatureBags and FeatureSampler (ids as bags of
weighted features)."""
from typing import Any, Final, Literal

from fastad._engine.graph import IndexInput, Input, Variable
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
    negs: Final[int]
    def __init__(self, interactions: Any, users: IndexInput, pos: IndexInput, neg: IndexInput | None = None, *,
                 sample: Literal["interaction", "user"] = "interaction",
                 negatives: Literal["uniform", "popularity"] = "uniform",
                 examples: int | None = None, n_users: int | None = None, n_items: int | None = None,
                 seed: _Seed = None, rank: int = 0, workers: int = 1, weights: Input | None = None) -> None: ...

class FeatureBags:
    matrix: Final[Any]
    n_rows: Final[int]
    n_features: Final[int]
    longest: Final[int]
    identity: Final[bool]
    def __init__(self, features: Any, rows: int, who: str = "FeatureBags", name: str = "features") -> None: ...

class FeatureSampler(Sampler):
    user_features: Final[FeatureBags]
    item_features: Final[FeatureBags]
    def __init__(self, sampler: Sampler, user_features: Any, item_features: Any,
                 user_bags: tuple[IndexInput, IndexInput, Input], item_bags: tuple[IndexInput, IndexInput, Input],
                 users: IndexInput, pos: IndexInput, neg: IndexInput | None = None) -> None: ...

WARP_MAX_WEIGHT: float

RANK_ESTIMATES: tuple[str, ...]
ONLINE_RATE_STEP: float

def warp_weight(n_items: int, tries: int) -> float: ...
def online_weight(n_items: int, rate: float) -> float: ...

class WarpSampler(PairwiseSampler):
    max_sampled: Final[int]
    kos_k: Final[int]
    kos_n: Final[int]
    skipped: Final[int]
    rank_estimate: Final[Literal["sampled", "online"]]
    rates: Final[Any]
    weighted: Final[bool]
    user_features: Final[FeatureBags | None]
    item_features: Final[FeatureBags | None]
    def __init__(self, interactions: Any, users: IndexInput, pos: IndexInput, neg: IndexInput,
                 weights: Input, user_table: Variable, item_table: Variable,
                 item_bias: Variable | None = None, *, max_sampled: int = 10, kos_k: int | None = None,
                 kos_n: int = 10, negatives: Literal["uniform", "popularity"] = "uniform",
                 examples: int | None = None, n_users: int | None = None, n_items: int | None = None,
                 seed: _Seed = None, rank: int = 0, workers: int = 1, user_features: Any = None,
                 item_features: Any = None, rank_estimate: Literal["sampled", "online"] = "sampled",
                 weighted: bool = False, rates: Any = None) -> None: ...
