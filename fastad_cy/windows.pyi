"""Type stubs for fastad_cy/windows.pyx: word2vec's samplers and the alias table of their negatives."""
import numpy as np
from numpy.typing import ArrayLike

from fastad_cy.graph import IndexInput, Input
from fastad_cy.sampler import Sampler, _Seed

class AliasTable:
    def __init__(self, weights: ArrayLike) -> None: ...
    def probabilities(self) -> np.ndarray: ...

class WindowSampler(Sampler):
    @property
    def sample(self) -> float: ...

class SkipGramSampler(WindowSampler):
    def __init__(self, tokens: ArrayLike, center: IndexInput, context: IndexInput, *,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5, ns_exponent: float = 0.75,
                 sample: float = 0.0, vocab_size: int | None = None, seed: _Seed = None,
                 rank: int = 0, workers: int = 1, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    @property
    def epoch_pairs(self) -> int: ...

class CbowSampler(WindowSampler):
    def __init__(self, tokens: ArrayLike, context: IndexInput, weights: Input, target: IndexInput, *,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5, ns_exponent: float = 0.75,
                 sample: float = 0.0, vocab_size: int | None = None, seed: _Seed = None,
                 rank: int = 0, workers: int = 1, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    @property
    def epoch_centres(self) -> int: ...
