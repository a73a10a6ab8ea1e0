"""fastText's text features, in compiled code: its tokens, its hash, and its `Dictionary`
(words and labels by falling count, then the buckets of hashed word n-grams and
character n-grams), encoding lines of text to the ids of its input rows as fastText's
dictionary.cc does, so that a model over them reads the same features."""
import os

import numpy as np
cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from fastad._engine.graph cimport check_int

cnp.import_array()

__all__ = ["Dictionary", "fasttext_hash", "fasttext_tokens", "subword_table", "EOS"]

#: The token fastText appends to every line (a word of the dictionary like any other).
EOS = "</s>"
cdef bytes _EOS = b"</s>"
cdef enum:
    WORD = 0
    LABEL = 1
    NGRAM_HASH_MULTIPLIER = 116049371      # dictionary.cc's addWordNgrams


cdef inline uint32_t _hash(const char* s, Py_ssize_t n) noexcept nogil:
    """fastText's hash: 32-bit FNV-1a over the bytes, each byte sign-extended first (as its
    `uint32_t(int8_t(c))` does: bytes >= 0x80 xor in 0xffffff80 and up)."""
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    for i in range(n):
        h = h ^ <uint32_t><int32_t>(<signed char>s[i])
        h = h * 16777619u
    return h


cdef inline bint _separator(char c) noexcept nogil:
    """fastText's token separators (dictionary.cc's readWord)."""
    return c == b' ' or c == b'\n' or c == b'\r' or c == b'\t' or c == b'\v' or c == b'\f' or c == 0


cdef inline bint _next_token(const char* data, Py_ssize_t n, Py_ssize_t* start, Py_ssize_t* end) noexcept nogil:
    """Move [start, end) to the line's next token, after `end`; False at the line's end."""
    cdef Py_ssize_t i = end[0]
    while i < n and _separator(data[i]):
        i += 1
    start[0] = i
    while i < n and not _separator(data[i]):
        i += 1
    end[0] = i
    return i > start[0]


cdef inline bint _continuation(char c) noexcept nogil:
    """A UTF-8 continuation byte (10xxxxxx): part of the character before it."""
    return (<unsigned char>c & 0xC0) == 0x80


cdef const char* _line_bytes(object line, Py_ssize_t* size, Py_ssize_t k) except NULL:
    """The UTF-8 bytes of line `k` (a str, or bytes as read from a file in binary mode),
    without a final newline; a newline within it is refused (a line is one example)."""
    cdef const char* data
    cdef Py_ssize_t n
    if isinstance(line, str):
        data = PyUnicode_AsUTF8AndSize(line, &n)
    elif isinstance(line, bytes):
        data, n = PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line)
    else:
        raise TypeError(f"Dictionary: line {k} must be a str (or bytes), got {type(line).__name__}")
    if n and data[n - 1] == b'\n':
        n -= 1
    for i in range(n):
        if data[i] == b'\n':
            raise ValueError(f"Dictionary: line {k} holds a newline at byte {i}; give one line "
                             f"(one example) an item")
    size[0] = n
    return data


def fasttext_hash(word):
    """fastText's hash of a word (a str, hashed as UTF-8, or bytes): the row of a word n-gram
    or character n-gram is nwords + hash % bucket.

    >>> fa.text.fasttext_hash("</s>")
    """
    cdef Py_ssize_t n
    cdef const char* data = _line_bytes(word, &n, 0)
    return _hash(data, n)


def fasttext_tokens(line):
    """The tokens fastText reads from one line (split on its separators: space, tab,
    vertical tab, form feed, carriage return and NUL), then EOS, as str."""
    cdef Py_ssize_t n, start = 0, end = 0
    cdef const char* data = _line_bytes(line, &n, 0)
    tokens = []
    while _next_token(data, n, &start, &end):
        tokens.append(data[start:end].decode("utf-8", "replace"))
    tokens.append(EOS)
    return tokens


# ---------------------------------------------------------------- a table of byte strings

cdef struct Entry:
    int64_t start           # its bytes in the arena
    int32_t length
    uint32_t hash
    int64_t count
    int32_t kind            # WORD or LABEL


cdef class _Strings:
    """Byte strings by fastText hash (open addressing, linear probing), each with a count
    and a kind; entry k is the k-th string added."""
    cdef char* arena
    cdef Py_ssize_t used, arena_capacity
    cdef Entry* entries
    cdef Py_ssize_t n, entries_capacity
    cdef int32_t* slots
    cdef Py_ssize_t n_slots

    def __cinit__(self, Py_ssize_t expected=1024):
        cdef Py_ssize_t n_slots = 1024
        while n_slots < 2 * expected:
            n_slots *= 2
        self.entries_capacity = max(expected, 16)
        self.entries = <Entry*>_grown(NULL, self.entries_capacity * sizeof(Entry))
        self.arena_capacity = 8 * self.entries_capacity
        self.arena = <char*>_grown(NULL, self.arena_capacity)
        self.rehash(n_slots)        # no entry yet: every slot empty

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.entries)
        PyMem_Free(self.arena)

    cdef inline Py_ssize_t find(self, const char* s, Py_ssize_t length, uint32_t h) noexcept nogil:
        """The entry of the string, or -1."""
        cdef Py_ssize_t mask = self.n_slots - 1, slot = h & mask
        cdef int32_t e
        while True:
            e = self.slots[slot]
            if e < 0:
                return -1
            if self.entries[e].hash == h and self.entries[e].length == length and \
                    memcmp(self.arena + self.entries[e].start, s, length) == 0:
                return e
            slot = (slot + 1) & mask

    cdef Py_ssize_t add(self, const char* s, Py_ssize_t length, uint32_t h, int32_t kind,
                        int64_t count) except -1:
        """Add a string not in the table; returns its entry."""
        cdef Py_ssize_t mask = self.n_slots - 1, slot = h & mask
        if self.used + length > self.arena_capacity:
            self.arena_capacity = 2 * (self.used + length)
            self.arena = <char*>_grown(self.arena, self.arena_capacity)
        if self.n == self.entries_capacity:
            self.entries_capacity *= 2
            self.entries = <Entry*>_grown(self.entries, self.entries_capacity * sizeof(Entry))
        memcpy(self.arena + self.used, s, length)
        self.entries[self.n] = Entry(self.used, <int32_t>length, h, count, kind)
        self.used += length
        while self.slots[slot] >= 0:
            slot = (slot + 1) & mask
        self.slots[slot] = <int32_t>self.n
        self.n += 1
        if 2 * self.n > self.n_slots:
            self.rehash(2 * self.n_slots)
        return self.n - 1

    cdef int rehash(self, Py_ssize_t n_slots) except -1:
        cdef Py_ssize_t e, slot, mask = n_slots - 1
        self.slots = <int32_t*>_grown(self.slots, n_slots * sizeof(int32_t))
        self.n_slots = n_slots
        for slot in range(n_slots):
            self.slots[slot] = -1
        for e in range(self.n):
            slot = self.entries[e].hash & mask
            while self.slots[slot] >= 0:
                slot = (slot + 1) & mask
            self.slots[slot] = <int32_t>e
        return 0

    cdef str text(self, Py_ssize_t e):
        return self.arena[self.entries[e].start:self.entries[e].start + self.entries[e].length].decode(
            "utf-8", "replace")


cdef void* _grown(void* p, size_t size) except NULL:
    cdef void* q = PyMem_Realloc(p, size)
    if q == NULL:
        raise MemoryError()
    return q


# ---------------------------------------------------------------- growable id arrays

cdef class _Ids:
    """A growable int32 array (the encoded ids) with int64 offsets (one per line)."""
    cdef object values_array, offsets_array
    cdef int32_t[::1] values
    cdef int64_t[::1] offsets
    cdef Py_ssize_t n, lines

    def __cinit__(self):
        self.values_array = np.zeros(1024, dtype=np.int32)
        self.offsets_array = np.zeros(1024, dtype=np.int64)
        self.values, self.offsets = self.values_array, self.offsets_array

    cdef inline int push(self, int32_t value) except -1:
        if self.n == self.values.shape[0]:
            self.values_array = np.concatenate((self.values_array, np.zeros_like(self.values_array)))
            self.values = self.values_array
        self.values[self.n] = value
        self.n += 1
        return 0

    cdef int end_line(self) except -1:
        if self.lines + 1 == self.offsets.shape[0]:
            self.offsets_array = np.concatenate((self.offsets_array, np.zeros_like(self.offsets_array)))
            self.offsets = self.offsets_array
        self.lines += 1
        self.offsets[self.lines] = self.n
        return 0

    cdef tuple arrays(self):
        return self.values_array[:self.n].copy(), self.offsets_array[:self.lines + 1].copy()


cdef int _push_char_ngrams(const char* word, Py_ssize_t length, Py_ssize_t minn, Py_ssize_t maxn,
                           Py_ssize_t first, Py_ssize_t bucket, _Ids out) except -1:
    """Push the rows `first + hash % bucket` of the character n-grams of "<word>"
    (fastText's computeSubwords: lengths minn..maxn in characters, not the single
    characters "<" and ">"; an n-gram that occurs twice is pushed twice)."""
    cdef Py_ssize_t n = length + 2, i, j, count
    cdef char* bracketed = <char*>PyMem_Malloc(n)
    if bracketed == NULL:
        raise MemoryError()
    bracketed[0] = b'<'
    memcpy(bracketed + 1, word, length)
    bracketed[n - 1] = b'>'
    try:
        for i in range(n):
            if _continuation(bracketed[i]):
                continue
            j, count = i, 1
            while j < n and count <= maxn:
                j += 1
                while j < n and _continuation(bracketed[j]):
                    j += 1
                if count >= minn and not (count == 1 and (i == 0 or j == n)):
                    out.push(<int32_t>(first + _hash(bracketed + i, j - i) % bucket))
                count += 1
    finally:
        PyMem_Free(bracketed)
    return 0


def subword_table(words, minn, maxn, bucket):
    """The input rows of each word of a vocabulary, as fastText's (and gensim's FastText)
    subword models read them: word k's own row k, then the rows `len(words) + hash %
    bucket` of its character n-grams of lengths minn..maxn (those of "<word>", each
    occurrence once, so a repeated n-gram counts twice). Returns (ids int32, offsets
    int64), word k's rows `ids[offsets[k]:offsets[k + 1]]` (CSR).

    words   str (hashed as UTF-8) or bytes; minn >= 1, maxn >= minn (maxn 0: no n-grams);
            bucket >= 1, with len(words) + bucket < 2**31.

    >>> ids, offsets = fa.text.subword_table(["where"], 3, 6, 2_000_000)
    """
    who = "subword_table"
    cdef Py_ssize_t lo = check_int(who, "minn", minn, 1), hi = check_int(who, "maxn", maxn, 0)
    cdef Py_ssize_t buckets = check_int(who, "bucket", bucket, 1)
    if hi and lo > hi:
        raise ValueError(f"{who}: minn must be <= maxn, got minn={lo}, maxn={hi}")
    words = list(words)
    cdef Py_ssize_t k, n, nwords = len(words)
    if nwords + buckets > 2**31 - 1:
        raise ValueError(f"{who}: len(words) + bucket = {nwords + buckets} rows do not fit int32 ids")
    cdef _Ids out = _Ids()
    cdef const char* data
    for k in range(nwords):
        if not isinstance(words[k], (str, bytes)):
            raise TypeError(f"{who}: word {k} must be a str (or bytes), got {type(words[k]).__name__} "
                            f"{words[k]!r}")
        data = _line_bytes(words[k], &n, k)
        out.push(<int32_t>k)
        if hi:
            _push_char_ngrams(data, n, lo, hi, nwords, buckets, out)
        out.end_line()
    return out.arrays()


# ---------------------------------------------------------------- the dictionary

cdef class Dictionary:
    """fastText's dictionary over lines of text (one example or sentence a line): built
    by `build` in one streamed pass, then `encode` gives each line's input rows.

    min_count        words seen fewer times are left out (fastText's `minCount`)
    min_count_label  labels seen fewer times are left out (`minCountLabel`)
    word_ngrams      word n-grams up to this length, hashed to buckets (`wordNgrams`)
    minn, maxn       character n-grams of "<word>" of these lengths, hashed to buckets
                     (`minn`, `maxn`; maxn 0: none, the default of its supervised mode)
    bucket           the buckets shared by the hashed n-grams (`bucket`)
    label            the prefix of a label token (`label`, "__label__")

    Tokens are split on fastText's separators, and every line ends with the token
    `EOS` ("</s>"), counted as a word. Ids: the words by falling count (ties in the
    order first seen; fastText's unstable sort may order ties otherwise), then each
    bucket b at `nwords + b`; labels have ids of their own, by falling count. A line
    encodes, as fastText's `getLine`: each of its words (with its character n-grams
    when maxn > 0; a word outside the vocabulary gives only its n-grams), then the
    hashed n-grams of every run of 2..word_ngrams words (words outside the vocabulary
    and EOS included); its labels separately.

    >>> d = fa.text.Dictionary(word_ngrams=2, bucket=2_000_000).build(lines)
    >>> ids, offsets, labels, label_offsets = d.encode(lines)     # CSR: line k is ids[offsets[k]:offsets[k+1]]
    """
    cdef _Strings table              # the kept words and labels: entry k is word k, then the labels
    cdef readonly Py_ssize_t min_count, min_count_label, word_ngrams, minn, maxn, bucket
    cdef readonly str label
    cdef bytes label_bytes
    cdef readonly Py_ssize_t nwords, nlabels
    cdef readonly int64_t ntokens
    cdef object subwords_array, subword_offsets_array   # CSR: each word's character n-gram ids
    cdef const int32_t[::1] subwords
    cdef const int64_t[::1] subword_offsets
    cdef readonly object word_counts, label_counts

    def __init__(self, min_count=1, min_count_label=0, word_ngrams=1, minn=0, maxn=0,
                 bucket=2_000_000, label="__label__"):
        who = "Dictionary"
        self.min_count = check_int(who, "min_count", min_count, 1)
        self.min_count_label = check_int(who, "min_count_label", min_count_label, 0)
        self.word_ngrams = check_int(who, "word_ngrams", word_ngrams, 1)
        self.minn = check_int(who, "minn", minn, 0)
        self.maxn = check_int(who, "maxn", maxn, 0)
        if self.maxn and self.minn > self.maxn:
            raise ValueError(f"{who}: minn must be <= maxn, got minn={self.minn}, maxn={self.maxn}")
        if self.maxn and self.minn < 1:
            raise ValueError(f"{who}: character n-grams (maxn={self.maxn}) need minn >= 1, got {self.minn}")
        self.bucket = check_int(who, "bucket", bucket, 0)
        if self.bucket == 0 and (self.word_ngrams > 1 or self.maxn > 0):
            raise ValueError(f"{who}: bucket must be > 0 for hashed n-grams (word_ngrams="
                             f"{self.word_ngrams}, maxn={self.maxn}), got 0")
        if not isinstance(label, str) or not label:
            raise ValueError(f"{who}: label must be a non-empty prefix string, got {label!r}")
        self.label, self.label_bytes = label, label.encode("utf-8")
        self.table = None

    @property
    def input_rows(self):
        """The rows of an input matrix over these ids: nwords + bucket."""
        return self.nwords + self.bucket

    @property
    def words(self):
        """The words, by id."""
        self._require_built("words")
        return [self.table.text(k) for k in range(self.nwords)]

    @property
    def labels(self):
        """The labels, by label id."""
        self._require_built("labels")
        return [self.table.text(self.nwords + k) for k in range(self.nlabels)]

    def _require_built(self, what):
        if self.table is None:
            raise RuntimeError(f"Dictionary.{what}: the dictionary is empty; call build(lines) first")

    def build(self, lines):
        """Count the words and labels of `lines` (an iterable of str or bytes lines, or a path
        of a text file read as bytes) in one pass, keeping nothing per token; returns self."""
        cdef _Strings counting = _Strings(1024)
        cdef Py_ssize_t n, start, end, k = 0
        cdef const char* data
        cdef int64_t ntokens = 0
        for line in _lines_of(lines):
            data = _line_bytes(line, &n, k)
            start = end = 0
            while _next_token(data, n, &start, &end):
                self._count(counting, data + start, end - start)
                ntokens += 1
            self._count(counting, _EOS, 4)
            ntokens += 1
            k += 1
        if k == 0:
            raise ValueError("Dictionary.build: no lines were given")
        self._keep(counting)
        self.ntokens = ntokens
        return self

    cdef int _count(self, _Strings counting, const char* s, Py_ssize_t n) except -1:
        cdef uint32_t h = _hash(s, n)
        cdef Py_ssize_t e = counting.find(s, n, h)
        if e < 0:
            counting.add(s, n, h, LABEL if self._is_label(s, n) else WORD, 1)
        else:
            counting.entries[e].count += 1
        return 0

    def state(self):
        """What rebuilds this dictionary (`Dictionary.from_state`): its settings, the words
        and labels by id with their counts, and the tokens counted."""
        self._require_built("state")
        return {"settings": {"min_count": self.min_count, "min_count_label": self.min_count_label,
                             "word_ngrams": self.word_ngrams, "minn": self.minn, "maxn": self.maxn,
                             "bucket": self.bucket, "label": self.label},
                "words": self.words, "word_counts": self.word_counts, "labels": self.labels,
                "label_counts": self.label_counts, "ntokens": self.ntokens}

    @classmethod
    def from_state(cls, state):
        """The dictionary that `state()` described, its ids unchanged."""
        cdef Dictionary d = cls(**state["settings"])
        cdef Py_ssize_t k
        words, labels = list(state["words"]), list(state["labels"])
        counts = [np.asarray(state["word_counts"], dtype=np.int64), np.asarray(state["label_counts"], dtype=np.int64)]
        if counts[0].shape != (len(words),) or counts[1].shape != (len(labels),):
            raise ValueError(f"Dictionary.from_state: {len(words)} words and {len(labels)} labels "
                             f"but counts of shapes {counts[0].shape} and {counts[1].shape}")
        if len(set(words + labels)) != len(words) + len(labels):
            raise ValueError("Dictionary.from_state: a word or label is listed twice")
        table = _Strings(len(words) + len(labels))
        for kind, strings, n in ((WORD, words, counts[0]), (LABEL, labels, counts[1])):
            for k, text in enumerate(strings):
                if not isinstance(text, str) or not text:
                    raise ValueError(f"Dictionary.from_state: entries must be non-empty strings, got {text!r}")
                encoded = text.encode("utf-8")
                table.add(encoded, len(encoded), _hash(encoded, len(encoded)), kind, n[k])
        d._adopt(table, len(words), counts[0], counts[1])
        d.ntokens = int(state["ntokens"])
        return d

    cdef int _adopt(self, _Strings table, Py_ssize_t nwords, object word_counts, object label_counts) except -1:
        """Take `table` (its words, then its labels, by id) as the vocabulary."""
        self.table = table
        self.nwords, self.nlabels = nwords, table.n - nwords
        self.word_counts, self.label_counts = word_counts, label_counts
        self._subwords_of_words()
        return 0

    cdef int _keep(self, _Strings counting) except -1:
        """Keep the words and labels over their thresholds, words first, each by falling count."""
        cdef Py_ssize_t e, k
        cdef Entry entry
        kinds = np.array([counting.entries[e].kind for e in range(counting.n)], dtype=np.int32)
        counts = np.array([counting.entries[e].count for e in range(counting.n)], dtype=np.int64)
        threshold = np.where(kinds == WORD, self.min_count, self.min_count_label)
        kept = np.flatnonzero(counts >= threshold)
        order = kept[np.lexsort((kept, -counts[kept], kinds[kept]))]
        table = _Strings(len(order))
        for k in order:
            entry = counting.entries[k]
            table.add(counting.arena + entry.start, entry.length, entry.hash, entry.kind, entry.count)
        nwords = int(np.count_nonzero(kinds[order] == WORD))
        self._adopt(table, nwords, counts[order[:nwords]], counts[order[nwords:]])
        return 0

    cdef int _subwords_of_words(self) except -1:
        """Each word's character n-gram ids (none for EOS), as fastText's initNgrams."""
        cdef _Ids out = _Ids()
        cdef Py_ssize_t w
        cdef Entry entry
        for w in range(self.nwords):
            entry = self.table.entries[w]
            if self.maxn and not (entry.length == 4 and memcmp(self.table.arena + entry.start, b"</s>", 4) == 0):
                _push_char_ngrams(self.table.arena + entry.start, entry.length, self.minn, self.maxn,
                                  self.nwords, self.bucket, out)
            out.end_line()
        self.subwords_array, self.subword_offsets_array = out.arrays()
        self.subwords, self.subword_offsets = self.subwords_array, self.subword_offsets_array
        return 0

    def word_id(self, word):
        """The id of a word, or -1 when it is not in the vocabulary (fastText's getWordId)."""
        self._require_built("word_id")
        cdef Py_ssize_t n
        cdef const char* data = _line_bytes(word, &n, 0)
        cdef Py_ssize_t e = self.table.find(data, n, _hash(data, n))
        return e if 0 <= e < self.nwords else -1

    def label_id(self, label):
        """The id of a label (among the labels), or -1."""
        self._require_built("label_id")
        cdef Py_ssize_t n
        cdef const char* data = _line_bytes(label, &n, 0)
        cdef Py_ssize_t e = self.table.find(data, n, _hash(data, n))
        return e - self.nwords if e >= self.nwords else -1

    def subword_ids(self, word):
        """The input rows of a word, as fastText's get_subwords: its id (when in the
        vocabulary), then its character n-grams."""
        self._require_built("subword_ids")
        cdef _Ids out = _Ids()
        cdef Py_ssize_t n
        cdef const char* data = _line_bytes(word, &n, 0)
        self._word_rows(data, n, self.table.find(data, n, _hash(data, n)), out)
        return out.arrays()[0]

    cdef int _word_rows(self, const char* token, Py_ssize_t n, Py_ssize_t e, _Ids out) except -1:
        """Push a word's input rows (fastText's addSubwords): a known word's id and its
        precomputed n-grams; an unknown one's n-grams (none for EOS)."""
        cdef int64_t k
        if 0 <= e < self.nwords:
            out.push(<int32_t>e)
            for k in range(self.subword_offsets[e], self.subword_offsets[e + 1]):
                out.push(self.subwords[k])
        elif self.maxn and not (n == 4 and memcmp(token, b"</s>", 4) == 0):
            _push_char_ngrams(token, n, self.minn, self.maxn, self.nwords, self.bucket, out)
        return 0

    def encode(self, lines):
        """The input rows and labels of each line (an iterable of str or bytes lines, or a
        path): (ids int32, offsets int64, labels int32, label_offsets int64), line k's rows
        ids[offsets[k]:offsets[k + 1]] and its labels labels[label_offsets[k]:label_offsets[k + 1]]."""
        self._require_built("encode")
        cdef _Ids rows = _Ids(), labels = _Ids()
        cdef Py_ssize_t n, start, end, k = 0, e, h_count, a, b
        cdef const char* data
        cdef uint32_t h
        cdef uint64_t ngram
        hashes_array = np.zeros(256, dtype=np.int32)
        cdef int32_t[::1] hashes = hashes_array
        for line in _lines_of(lines):
            data = _line_bytes(line, &n, k)
            start = end = h_count = 0
            while True:
                if not _next_token(data, n, &start, &end):     # the line's end: EOS, a word like the others
                    data, start, end, n = _EOS, 0, 4, 0
                h = _hash(data + start, end - start)
                e = self.table.find(data + start, end - start, h)
                if e >= self.nwords:
                    labels.push(<int32_t>(e - self.nwords))
                elif e >= 0 or not self._is_label(data + start, end - start):
                    self._word_rows(data + start, end - start, e, rows)
                    if h_count == hashes.shape[0]:
                        hashes_array = np.concatenate((hashes_array, np.zeros_like(hashes_array)))
                        hashes = hashes_array
                    hashes[h_count] = <int32_t>h
                    h_count += 1
                if data == <const char*>_EOS:
                    break
            for a in range(h_count):        # fastText's addWordNgrams (its int32 hashes widened)
                ngram = <uint64_t><int64_t>hashes[a]
                for b in range(a + 1, min(h_count, a + self.word_ngrams)):
                    ngram = ngram * NGRAM_HASH_MULTIPLIER + <uint64_t><int64_t>hashes[b]
                    rows.push(<int32_t>(self.nwords + ngram % <uint64_t>self.bucket))
            rows.end_line()
            labels.end_line()
            k += 1
        return rows.arrays() + labels.arrays()

    cdef bint _is_label(self, const char* s, Py_ssize_t n) noexcept:
        cdef Py_ssize_t m = len(self.label_bytes)
        return n >= m and memcmp(s, PyBytes_AS_STRING(self.label_bytes), m) == 0


def distinct_rows(ids, offsets, Py_ssize_t rows):
    """Each bag's distinct rows, in the order first seen, with the share of the bag each
    holds (its count over the bag's length): (ids int32, offsets int64, shares float32),
    bag k's rows ids[offsets[k]:offsets[k + 1]]. A bag's mean row is the sum of its
    distinct rows times their shares, and the gradient of the mean reaches each distinct
    row once, times its share: the same mean and the same update (fastText's adds the
    gradient once per occurrence), with a row read and updated once per text, where a
    long document repeats its common words and bigrams (a man page of 900 rows holds
    about 470 distinct ones).

    ids      int32 rows in [0, rows), bag k's ids[offsets[k]:offsets[k + 1]]
    offsets  int64, non-decreasing from 0 to len(ids)

    >>> distinct_rows(np.array([3, 1, 3, 3], np.int32), np.array([0, 4]), 5)
    (array([3, 1], dtype=int32), array([0, 2]), array([0.75, 0.25], dtype=float32))
    """
    cdef const int32_t[::1] src = np.ascontiguousarray(ids, dtype=np.int32)
    cdef const int64_t[::1] bounds = np.ascontiguousarray(offsets, dtype=np.int64)
    if src.shape[0] and (np.min(src) < 0 or np.max(src) >= rows):
        raise ValueError(f"distinct_rows: ids must lie in [0, {rows}), got [{np.min(src)}, {np.max(src)}]")
    if bounds.shape[0] < 1 or bounds[0] != 0 or bounds[bounds.shape[0] - 1] != src.shape[0] \
            or np.any(np.diff(bounds) < 0):
        raise ValueError(f"distinct_rows: offsets must rise from 0 to len(ids) = {src.shape[0]}")
    out_array = np.empty(src.shape[0], dtype=np.int32)
    out_offsets_array = np.zeros(bounds.shape[0], dtype=np.int64)
    shares_array = np.empty(src.shape[0], dtype=np.float32)
    seen_in_array = np.full(rows, -1, dtype=np.int64)      # the last bag that held each row
    at_array = np.empty(rows, dtype=np.int64)               # where that bag's output holds it
    cdef int32_t[::1] out = out_array
    cdef int64_t[::1] out_offsets = out_offsets_array, seen_in = seen_in_array, at = at_array
    cdef float[::1] shares = shares_array
    cdef Py_ssize_t b, k, start, m = 0
    cdef int32_t r
    cdef float scale
    with nogil:
        for b in range(bounds.shape[0] - 1):
            start = m
            for k in range(bounds[b], bounds[b + 1]):
                r = src[k]
                if seen_in[r] != b:
                    seen_in[r], at[r] = b, m
                    out[m], shares[m] = r, 0
                    m += 1
                shares[at[r]] += 1
            if bounds[b + 1] > bounds[b]:
                scale = <float>(1.0 / (bounds[b + 1] - bounds[b]))
                for k in range(start, m):
                    shares[k] *= scale
            out_offsets[b + 1] = m
    return out_array[:m].copy(), out_offsets_array, shares_array[:m].copy()


def _lines_of(lines):
    """The lines of an iterable, or of a file at a path (read as bytes)."""
    if isinstance(lines, (str, os.PathLike)):
        return _file_lines(os.fspath(lines))
    if isinstance(lines, bytes):
        raise TypeError("Dictionary: give an iterable of lines or a path, not one bytes object")
    return lines


def _file_lines(path):
    with open(path, "rb") as f:
        yield from f
