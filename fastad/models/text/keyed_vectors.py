"""Word vectors looked up by word, with gensim's `KeyedVectors` API (`Word2Vec.wv`).

Queries compare unit vectors (cosine similarity), as gensim's do. Where gensim
differs: `most_similar` takes words or vectors, not (word, weight) pairs, and its
`topn` must be a positive int; an unknown word is a `KeyError` naming it, except
in `doesnt_match`, which skips unknown words as gensim does.
"""
import json

import numpy as np

from fastad.checks import check_choice, check_flag, check_int, look_up
from fastad.io import load, save, write_atomically


class KeyedVectors:
    """`vectors[i]` is the vector of the word `index_to_key[i]`; `key_to_index` maps back.

    >>> wv = model.wv                       # a trained Word2Vec's
    >>> wv["king"], wv.most_similar("king", topn=5), wv.similarity("king", "queen")
    >>> wv.save_word2vec_format("vectors.bin", binary=True)
    >>> wv = fa.models.KeyedVectors.load_word2vec_format("vectors.bin", binary=True)
    >>> wv.save("vectors.kv")                # fastad's own file (fa.save: .npz, no pickle)
    >>> wv = fa.models.KeyedVectors.load("vectors.kv", mmap="r")
    """

    def __init__(self, index_to_key, vectors, key_to_index=None, owner="KeyedVectors",
                 vocabulary=""):
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(index_to_key):
            raise ValueError(f"{owner}: vectors must have shape ({len(index_to_key)}, dim), one row "
                             f"per key, got {vectors.shape}")
        self.index_to_key = index_to_key
        self.key_to_index = ({key: i for i, key in enumerate(index_to_key)}
                             if key_to_index is None else key_to_index)
        self.vectors = vectors
        self._owner = owner               # the class its errors name (Word2Vec for model.wv)
        self._vocabulary = vocabulary     # what its unknown-word errors add ("min_count=5")

    @property
    def vector_size(self):
        return self.vectors.shape[1]

    def __len__(self):
        return len(self.index_to_key)

    def __contains__(self, key):
        return key in self.key_to_index

    def __getitem__(self, keys):
        """The vector of a word (a copy), or the rows of a list of words."""
        if isinstance(keys, str):
            return self.get_vector(keys)
        return np.stack([self.get_vector(key) for key in keys])

    def get_index(self, key, who="get_index"):
        details = f"{len(self)} words" + (f", {self._vocabulary}" if self._vocabulary else "")
        return look_up(self.key_to_index, key,
                       lambda: f"{self._owner}.{who}: {key!r} is not in the vocabulary ({details})")

    def get_vector(self, key, norm=False):
        """The vector of `key` (a copy), of length 1 with `norm`."""
        vector = self.vectors[self.get_index(key, "get_vector")].copy()
        return vector / max(np.linalg.norm(vector), 1e-12) if norm else vector

    def most_similar(self, positive=None, negative=None, topn=10, exclude=()):
        """The `topn` words nearest by cosine to the mean of `positive` minus `negative`.

        positive, negative  a word, a vector, or a list of them.
        exclude             words never returned (the query words always are excluded).
        Returns [(word, cosine), ...], most similar first.
        """
        who = f"{self._owner}.most_similar"
        if isinstance(topn, bool) or not isinstance(topn, int) or topn <= 0:
            raise ValueError(f"{who}: topn must be a positive int, got {topn!r}")
        unit = self.vectors / np.maximum(np.linalg.norm(self.vectors, axis=1, keepdims=True), 1e-12)
        query, used = np.zeros(self.vector_size), set()
        for sign, group in ((1.0, _terms(positive)), (-1.0, _terms(negative))):
            for term in group:
                if isinstance(term, str):
                    k = self.get_index(term, "most_similar")
                    used.add(k)
                    query += sign * unit[k]
                else:
                    v = np.asarray(term, dtype=np.float64)
                    if v.shape != (self.vector_size,):
                        raise ValueError(f"{who}: a vector must have shape ({self.vector_size},), "
                                         f"got {v.shape}")
                    query += sign * v / max(np.linalg.norm(v), 1e-12)
        for word in exclude:
            used.add(self.get_index(word, "most_similar"))
        scores = unit @ (query / max(np.linalg.norm(query), 1e-12))
        if used:
            scores[list(used)] = -np.inf
        count = min(topn, len(self) - len(used))
        best = np.argpartition(-scores, count - 1)[:count] if count > 0 else np.zeros(0, dtype=int)
        best = best[np.lexsort((best, -scores[best]))]
        return [(self.index_to_key[k], float(scores[k])) for k in best]

    def similar_by_word(self, word, topn=10):
        """most_similar(positive=[word], topn=topn)."""
        return self.most_similar(positive=[word], topn=topn)

    def similar_by_vector(self, vector, topn=10):
        """The `topn` words nearest by cosine to `vector`."""
        return self.most_similar(positive=[vector], topn=topn)

    def similarity(self, a, b):
        """The cosine of the vectors of words a and b."""
        return float(self.get_vector(a, norm=True) @ self.get_vector(b, norm=True))

    def n_similarity(self, words_a, words_b):
        """The cosine of the mean vectors of two non-empty lists of words."""
        if not len(words_a) or not len(words_b):
            raise ValueError(f"{self._owner}.n_similarity: both lists of words must be non-empty")
        a, b = self[list(words_a)].mean(axis=0), self[list(words_b)].mean(axis=0)
        return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-24))

    def doesnt_match(self, words):
        """The word of `words` furthest from their mean (cosine); unknown words are skipped."""
        known = [w for w in words if w in self.key_to_index]
        if not known:
            raise ValueError(f"{self._owner}.doesnt_match: none of {list(words)!r} is in the vocabulary")
        unit = np.stack([self.get_vector(w, norm=True) for w in known])
        mean = unit.mean(axis=0)
        return known[int(np.argmin(unit @ (mean / max(np.linalg.norm(mean), 1e-12))))]

    def save_word2vec_format(self, path, binary=False):
        """Write word2vec's format, which gensim's KeyedVectors.load_word2vec_format reads: a
        "count dim" line, then per word "word v1 v2 ..." (text, UTF-8) or the word, a space and
        its float32 values little-endian (`binary`); atomically, as `fa.save` writes."""
        who = f"{self._owner}.save_word2vec_format"
        binary = check_flag(who, "binary", binary)
        if any(not w or any(ch.isspace() for ch in w) for w in self.index_to_key):
            raise ValueError(f"{who}: a word holds white space, which the format cannot store")

        def write(f):
            f.write(f"{len(self)} {self.vector_size}\n".encode())
            for word, row in zip(self.index_to_key, self.vectors):
                if binary:
                    f.write(word.encode("utf-8") + b" " + row.astype("<f4").tobytes() + b"\n")
                else:
                    f.write((word + " " + " ".join(f"{x:.6g}" for x in row) + "\n").encode("utf-8"))

        write_atomically(path, write, who)

    def save(self, path):
        """Save the words (as JSON text) and the vectors with `fa.save` (an .npz, written
        atomically; `path` used as given)."""
        save({"index_to_key": json.dumps(list(self.index_to_key)), "vectors": self.vectors}, path)

    @classmethod
    def load(cls, path, mmap=None):
        """Vectors saved with `save`. `mmap` is accepted for gensim's calls: None, or "r" for
        read-only vectors (gensim maps them from its .npy file; fastad's .npz is read into
        memory either way)."""
        mmap = check_choice("KeyedVectors.load", "mmap", mmap, [None, "r"])
        state = load(path)
        try:
            words = json.loads(state["index_to_key"])
            vectors = np.asarray(state["vectors"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"KeyedVectors.load: {path} is not saved KeyedVectors ({e!r})") from None
        if mmap == "r":
            vectors.flags.writeable = False
        return cls(words, vectors)

    @classmethod
    def load_word2vec_format(cls, path, binary=False):
        """Vectors in word2vec's text or binary format (as gensim and word2vec.c write them)."""
        who = "KeyedVectors.load_word2vec_format"
        binary = check_flag(who, "binary", binary)
        with open(path, "rb") as f:
            header = f.readline().split()
            try:
                count, dim = (check_int(who, "the header's counts", int(x)) for x in header)
            except ValueError:
                raise ValueError(f"{who}: {path} does not start with a 'count dim' line, got "
                                 f"{b' '.join(header)[:80]!r}") from None
            words, vectors = [], np.empty((count, dim), dtype=np.float32)
            for i in range(count):
                word, values = (_binary_entry if binary else _text_entry)(f, dim)
                if word is None:
                    raise ValueError(f"{who}: {path} ends after {i} of the {count} words its "
                                     f"header announces (or entry {i} is not {dim} numbers)")
                words.append(word)
                vectors[i] = values
        return cls(words, vectors)


def _terms(x):
    """A word, a vector or a list of them as a list (None: no terms)."""
    if x is None:
        return []
    if isinstance(x, (str, np.ndarray)) or np.ndim(x) == 1 and not isinstance(x, (list, tuple)):
        return [x]
    return list(x)


def _text_entry(f, dim):
    parts = f.readline().decode("utf-8").rstrip("\n").split(" ")
    if len(parts) < dim + 1:
        return None, None
    try:
        return parts[0], np.array(parts[1:dim + 1], dtype=np.float32)
    except ValueError:
        return None, None


def _binary_entry(f, dim):
    word = bytearray()
    while (ch := f.read(1)) != b" ":
        if not ch:
            return None, None
        if ch != b"\n" or word:              # word2vec.c ends each vector with a newline
            word += ch
    values = f.read(4 * dim)
    if len(values) < 4 * dim:
        return None, None
    return word.decode("utf-8"), np.frombuffer(values, dtype="<f4")
