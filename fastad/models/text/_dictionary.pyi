"""Type stubs for fastad/models/text/_dictionary.pyx: fastText's tokens, hash and dictionary."""
import os
from collections.abc import Iterable, Mapping
from typing import Any, Final

import numpy as np

EOS: str

def fasttext_hash(word: str | bytes) -> int: ...
def fasttext_tokens(line: str | bytes) -> list[str]: ...
def subword_table(words: Iterable[str | bytes], minn: int, maxn: int, bucket: int
                  ) -> tuple[np.ndarray, np.ndarray]: ...
def distinct_rows(ids: np.ndarray, offsets: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

class Dictionary:
    min_count: int
    min_count_label: int
    word_ngrams: int
    minn: int
    maxn: int
    bucket: int
    label: str
    nwords: int
    nlabels: int
    ntokens: int
    word_counts: np.ndarray
    label_counts: np.ndarray
    def __init__(self, min_count: int = 1, min_count_label: int = 0, word_ngrams: int = 1, minn: int = 0,
                 maxn: int = 0, bucket: int = 2_000_000, label: str = "__label__") -> None: ...
    input_rows: Final[int]
    words: Final[list[str]]
    labels: Final[list[str]]
    def build(self, lines: Iterable[str | bytes] | str | os.PathLike[str]) -> Dictionary: ...
    def state(self) -> dict[str, Any]: ...
    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Dictionary: ...
    def word_id(self, word: str | bytes) -> int: ...
    def label_id(self, label: str | bytes) -> int: ...
    def subword_ids(self, word: str | bytes) -> np.ndarray: ...
    def encode(self, lines: Iterable[str | bytes] | str | os.PathLike[str]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
