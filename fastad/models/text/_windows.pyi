"""Type stubs for fastad/models/text/_windows.pyx: word2vec's samplers and the alias table of their negatives."""
from typing import Final

from collections.abc import Hashable, Iterable, Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike

from fastad._engine.graph import IndexInput, Input
from fastad.training.sampler import Sampler, _Seed

class AliasTable:
    def __init__(self, weights: ArrayLike) -> None: ...
    def probabilities(self) -> np.ndarray: ...

def count_words(sentences: Iterable[Sequence[Hashable]], who: str = "count_words"
                ) -> tuple[list[Hashable], np.ndarray, int, int]: ...

def check_restartable(who: str, sentences: Iterable[Sequence[Hashable]]) -> Iterable[Sequence[Hashable]]: ...

class TokenStream:
    block_tokens: Final[int]
    largest_id: Final[int]
    total_tokens: Final[int]
    def __init__(self, sentences: Iterable[Sequence[Hashable]], vocabulary: dict[Hashable, int],
                 total_tokens: int | None = None, *, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...

class WindowSampler(Sampler):
    sample: Final[float]

class SkipGramSampler(WindowSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, center: IndexInput, context: IndexInput, *,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5, ns_exponent: float = 0.75,
                 sample: float = 0.0, vocab_size: int | None = None, counts: ArrayLike | None = None,
                 seed: _Seed = None,
                 rank: int = 0, workers: int = 1, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    epoch_pairs: Final[int]

class CbowSampler(WindowSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, context: IndexInput, weights: Input, target: IndexInput, *,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5, ns_exponent: float = 0.75,
                 sample: float = 0.0, vocab_size: int | None = None, counts: ArrayLike | None = None,
                 seed: _Seed = None,
                 rank: int = 0, workers: int = 1, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    epoch_centres: Final[int]

class SharedNegativeSampler(CbowSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, context: IndexInput, weights: Input, target: IndexInput, *,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5, ns_exponent: float = 0.75,
                 sample: float = 0.0, vocab_size: int | None = None, counts: ArrayLike | None = None,
                 seed: _Seed = None,
                 rank: int = 0, workers: int = 1, claim: np.ndarray | None = None,
                 block_tokens: int = 10_000) -> None: ...
    epoch_pairs: Final[int]

class SubwordSkipGramSampler(SkipGramSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, bag_ids: IndexInput, bag_offsets: IndexInput,
                 context: IndexInput, *, subword_ids: np.ndarray, subword_offsets: np.ndarray,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5,
                 ns_exponent: float = 0.75, sample: float = 0.0, vocab_size: int | None = None,
                 counts: ArrayLike | None = None, seed: _Seed = None, rank: int = 0, workers: int = 1,
                 claim: np.ndarray | None = None, block_tokens: int = 10_000) -> None: ...

class SubwordCbowSampler(CbowSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, bag_ids: IndexInput, bag_offsets: IndexInput,
                 target: IndexInput, *, subword_ids: np.ndarray, subword_offsets: np.ndarray,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5,
                 ns_exponent: float = 0.75, sample: float = 0.0, vocab_size: int | None = None,
                 counts: ArrayLike | None = None, seed: _Seed = None, rank: int = 0, workers: int = 1,
                 claim: np.ndarray | None = None, block_tokens: int = 10_000) -> None: ...

class SubwordSharedNegativeSampler(SharedNegativeSampler):
    def __init__(self, tokens: ArrayLike | TokenStream, bag_ids: IndexInput, bag_offsets: IndexInput,
                 scored: IndexInput, weights: Input, *, subword_ids: np.ndarray, subword_offsets: np.ndarray,
                 mask: Input | None = None, sentence_ends: ArrayLike | None = None, window: int = 5,
                 ns_exponent: float = 0.75, sample: float = 0.0, vocab_size: int | None = None,
                 counts: ArrayLike | None = None, seed: _Seed = None, rank: int = 0, workers: int = 1,
                 claim: np.ndarray | None = None, block_tokens: int = 10_000) -> None: ...
