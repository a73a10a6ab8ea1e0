"""word2vec's samplers: `SkipGramSampler`, `CbowSampler` and `SharedNegativeSampler` (skip-gram
with shared negatives) walk a token stream
(`WindowSampler`, the walk they share: a token array, or a `TokenStream` that encodes a
corpus of token lists block by block as it reads it, after `count_words` counted it) and
draw negatives from an `AliasTable`."""
import operator

import numpy as np
cimport numpy as cnp
from cpython.dict cimport PyDict_GetItemWithError
from cpython.long cimport PyLong_AsSsize_t
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, INT32_MAX
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from fastad._engine.graph cimport Variable, IndexInput, Input, check_real, check_int
from fastad._engine.rng cimport fa_rng, fa_rng_below, fa_rng_uniform
from fastad.training.sampler cimport Sampler, _share, _seed_stream, _index_leaf, _integer_array

cnp.import_array()

cdef extern from *:
    """
    static inline int64_t fa_claim_next(int64_t* counter) {
        return __atomic_fetch_add(counter, (int64_t)1, __ATOMIC_RELAXED);
    }
    """
    int64_t fa_claim_next(int64_t* counter) noexcept nogil

__all__ = ["WindowSampler", "SkipGramSampler", "CbowSampler", "SharedNegativeSampler",
           "SubwordSkipGramSampler", "SubwordCbowSampler", "SubwordSharedNegativeSampler", "AliasTable", "TokenStream", "count_words",
           "check_restartable"]


# ---------------------------------------------------------------- checks of the windows' arguments

cdef char* _input_leaf(str who, str name, object leaf, Py_ssize_t size) except NULL:
    """The value buffer of a CPU Input of `size` values."""
    if not isinstance(leaf, Input):
        raise TypeError(f"{who}: {name} must be a CPU Input of {size} values, got "
                        f"{type(leaf).__name__} {leaf!r}")
    if (<Variable>leaf).size != size or leaf.device != "cpu":
        raise ValueError(f"{who}: {name} must be a CPU Input of {size} values, got {leaf!r}")
    return (<Variable>leaf).val_ptr


cdef inline void _put_weight(char* weights, bint f64, Py_ssize_t k, double value) noexcept nogil:
    if f64:
        (<double*>weights)[k] = value
    else:
        (<float*>weights)[k] = <float>value


# ---------------------------------------------------------------- weighted draws

cdef int _vose(double[::1] scaled, const double[::1] w, double[::1] prob,
               int64_t[::1] alias) except -1 nogil:
    """Vose's pairing: each column below 1 (small) is topped up by one above (large),
    which loses what it gave. What is left holds probability 1 up to rounding; a
    weightless item left over by rounding hands its draws to the heaviest one."""
    cdef Py_ssize_t n = scaled.shape[0], n_small = 0, n_large = 0, i, s, l, heaviest = 0
    cdef int64_t* small = <int64_t*>malloc(n * sizeof(int64_t))
    cdef int64_t* large = <int64_t*>malloc(n * sizeof(int64_t))
    if small == NULL or large == NULL:
        free(small)
        free(large)
        with gil:
            raise MemoryError()
    for i in range(n):
        _file(i, scaled, small, &n_small, large, &n_large)
        if w[i] > w[heaviest]:
            heaviest = i
    while n_small and n_large:
        n_small -= 1
        n_large -= 1
        s, l = small[n_small], large[n_large]
        prob[s], alias[s] = scaled[s], l
        scaled[l] -= 1.0 - scaled[s]
        _file(l, scaled, small, &n_small, large, &n_large)
    for i in range(n_small):
        _settle(small[i], w, prob, alias, heaviest)
    for i in range(n_large):
        _settle(large[i], w, prob, alias, heaviest)
    free(small)
    free(large)
    return 0


cdef inline void _file(Py_ssize_t i, const double[::1] scaled, int64_t* small, Py_ssize_t* n_small,
                       int64_t* large, Py_ssize_t* n_large) noexcept nogil:
    """Push column i on the stack of those below 1 (small) or the other (large)."""
    if scaled[i] < 1.0:
        small[n_small[0]] = i
        n_small[0] += 1
    else:
        large[n_large[0]] = i
        n_large[0] += 1


cdef inline void _settle(Py_ssize_t i, const double[::1] w, double[::1] prob, int64_t[::1] alias,
                         Py_ssize_t heaviest) noexcept nogil:
    prob[i] = 1.0 if w[i] > 0 else 0.0
    alias[i] = i if w[i] > 0 else heaviest


cdef class AliasTable:
    """Draws i with probability weights[i] / sum(weights), in constant time
    (Vose's alias method). Built once from non-negative finite weights.

    >>> table = AliasTable(counts ** 0.75)       # word2vec's noise distribution
    """
    cdef double[::1] prob
    cdef int64_t[::1] alias
    cdef int64_t n

    def __init__(self, weights):
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"AliasTable: weights must be a non-empty 1-D array, got shape {w.shape}")
        if not np.all(np.isfinite(w)) or w.min() < 0:
            raise ValueError("AliasTable: weights must be finite and >= 0")
        total = w.sum()
        if total <= 0:
            raise ValueError("AliasTable: the weights sum to 0; nothing can be drawn")
        self.n = w.size
        w = np.ascontiguousarray(w)
        scaled = w * (self.n / total)
        self.prob = np.ones(self.n)
        self.alias = np.arange(self.n, dtype=np.int64)
        _vose(scaled, w, self.prob, self.alias)

    cdef int64_t draw(self, fa_rng* rng) noexcept nogil:
        cdef int64_t i = fa_rng_below(rng, self.n)
        return i if fa_rng_uniform(rng) < self.prob[i] else self.alias[i]

    def probabilities(self):
        """The distribution the table draws from (for checks)."""
        p = np.asarray(self.prob).copy()
        np.add.at(p, np.asarray(self.alias), 1.0 - np.asarray(self.prob))
        return p / self.n


# ---------------------------------------------------------------- corpora of token lists

cdef list _token_list(str who, object sentence, Py_ssize_t k):
    """Sentence `k` of a corpus as a list of tokens."""
    if type(sentence) is list:
        return <list>sentence
    if isinstance(sentence, str):
        raise TypeError(f"{who}: sentence {k} is a string; give lists of tokens (a string "
                        f"would be read as its characters)")
    try:
        return list(sentence)
    except TypeError:
        raise TypeError(f"{who}: sentence {k} must be a list of tokens, got "
                        f"{type(sentence).__name__}") from None


def check_restartable(str who, object sentences):
    """`sentences`, checked to start a new pass each time it is iterated (a one-shot
    iterator is refused, naming `who`)."""
    try:
        first = iter(sentences)
    except TypeError:
        raise TypeError(f"{who}: sentences must be an iterable of token lists, got "
                        f"{type(sentences).__name__}") from None
    if first is sentences:
        raise TypeError(f"{who}: sentences is a one-shot iterator ({type(sentences).__name__}), "
                        f"which a second pass would find empty; give a list, or an object whose "
                        f"__iter__ starts a new pass over the corpus")
    return sentences


def count_words(sentences, str who="count_words"):
    """The vocabulary pass over a corpus of token lists: (words in the order first seen,
    their counts as an int64 array, the tokens, the sentences). Nothing is kept per token.

    >>> words, counts, n_tokens, n_sentences = fa.data.count_words([["a", "b"], ["a"]])
    >>> words, counts.tolist(), n_tokens, n_sentences
    (['a', 'b'], [2, 1], 3, 2)
    """
    cdef dict index = {}
    cdef list words = [], tokens
    cdef object word
    cdef PyObject* found
    cdef Py_ssize_t k, n_words = 0, n_sentences = 0
    cdef int64_t n_tokens = 0
    counts_array = np.zeros(1024, dtype=np.int64)
    cdef int64_t[::1] counts = counts_array
    for sentence in sentences:
        tokens = _token_list(who, sentence, n_sentences)
        for word in tokens:
            found = PyDict_GetItemWithError(index, word)
            if found == NULL:
                k = n_words
                index[word] = k
                words.append(word)
                n_words += 1
                if k >= counts.shape[0]:
                    counts_array = np.concatenate((counts_array, np.zeros_like(counts_array)))
                    counts = counts_array
            else:
                k = PyLong_AsSsize_t(<object>found)
            counts[k] += 1
        n_tokens += len(tokens)
        n_sentences += 1
    return words, counts_array[:n_words].copy(), n_tokens, n_sentences


cdef class TokenStream:
    """A corpus of token lists read one pass at a time, in blocks of whole sentences of
    about `block_tokens` tokens, each block's words encoded to int32 ids by `vocabulary` as
    it is read (words outside it dropped): one block is held, never the corpus. The
    samplers (`SkipGramSampler`, `CbowSampler`) walk one in place of a token array.

    sentences     a restartable iterable of token lists (a list, or an object whose
                  __iter__ starts a new pass, such as a reader of a file); a one-shot
                  iterator is refused, as its second pass would be empty.
    vocabulary    {word: id}, ids in [0, 2**31).
    total_tokens  the tokens of one pass (every word, known or not), which `progress`
                  (and so a run-long LinearDecay) follows; default: counted by a pass now.
    claim         None, or a shared int64 array whose first element counts the blocks
                  claimed: a pass then reads only the blocks it claims (an atomic
                  increment whenever it finishes one), passing over the others without
                  encoding them, so that workers with streams over one corpus and one
                  counter share its blocks in order, as gensim's threads share its jobs.
                  Set the counter to 0 before each pass.
    block_tokens  the tokens of a block (a block ends with the sentence that reaches it).

    >>> stream = fa.data.TokenStream(sentences, {"a": 0, "b": 1})
    >>> [ids.tolist() for ids, ends in stream.blocks()]
    """
    cdef object sentences, iterator, claim_array
    cdef dict vocabulary
    cdef int64_t* claim
    cdef readonly Py_ssize_t block_tokens, largest_id
    cdef readonly int64_t total_tokens
    cdef int64_t position               # the tokens of this pass read or passed over
    cdef Py_ssize_t blocks_passed, sentences_passed    # of this pass, read or passed over
    cdef bint finished
    # the block read last: its ids and sentence ends, and where it lies in the pass
    cdef object ids_array, ends_array
    cdef int32_t[::1] ids
    cdef int64_t[::1] ends
    cdef Py_ssize_t n_ids, n_sentences, longest
    cdef int64_t block_start, block_end

    def __init__(self, sentences, vocabulary, total_tokens=None, *, claim=None, block_tokens=10_000):
        who = "TokenStream"
        self.sentences = check_restartable(who, sentences)
        if not isinstance(vocabulary, dict):
            raise TypeError(f"{who}: vocabulary must be a dict {{word: id}}, got "
                            f"{type(vocabulary).__name__}")
        if not all(type(i) is int for i in vocabulary.values()):
            try:
                vocabulary = {word: operator.index(i) for word, i in vocabulary.items()}
            except TypeError:
                raise TypeError(f"{who}: vocabulary's ids must be integers") from None
        ids = list(vocabulary.values())
        self.largest_id = max(ids, default=-1)
        if ids and (min(ids) < 0 or self.largest_id > INT32_MAX):
            raise ValueError(f"{who}: vocabulary's ids must lie in [0, 2**31), got "
                             f"[{min(ids)}, {self.largest_id}]")
        self.vocabulary = vocabulary
        self.block_tokens = check_int(who, "block_tokens", block_tokens, 1)
        self.claim = _claim_counter(who, claim)
        self.claim_array = claim
        self.ids_array = np.zeros(self.block_tokens, dtype=np.int32)
        self.ends_array = np.zeros(max(16, self.block_tokens // 8), dtype=np.int64)
        self.ids, self.ends = self.ids_array, self.ends_array
        if total_tokens is None:
            total_tokens = count_words(self.sentences, who)[2]
        self.total_tokens = check_int(who, "total_tokens", total_tokens, 0)
        self.begin_pass()

    cdef int begin_pass(self) except -1:
        self.iterator = iter(self.sentences)
        self.position = self.blocks_passed = self.sentences_passed = 0
        self.n_ids = self.n_sentences = self.longest = 0
        self.block_start = self.block_end = 0
        self.finished = False
        return 0

    cdef bint next_block(self) except -1:
        """Read the next block of this pass (the next one claimed); False at the pass's end."""
        cdef int64_t k = fa_claim_next(self.claim) if self.claim != NULL else self.blocks_passed
        while not self.finished and self.blocks_passed < k:
            self.read_block(False)
        return not self.finished and self.read_block(True)

    cdef bint read_block(self, bint encode) except -1:
        """Read (encoding it when `encode`) or pass over the next block; False, and the pass
        finished, when no sentence is left."""
        cdef list tokens
        cdef object word
        cdef PyObject* found
        cdef Py_ssize_t length, kept
        cdef int64_t start = self.position
        self.n_ids = self.n_sentences = self.longest = 0
        while self.position - start < self.block_tokens:
            try:
                sentence = next(self.iterator)
            except StopIteration:
                self.finished = True
                break
            tokens = _token_list("TokenStream", sentence, self.sentences_passed)
            length = len(tokens)
            self.position += length
            self.sentences_passed += 1
            if not encode:
                continue
            if self.n_ids + length > self.ids.shape[0]:
                self.ids_array = np.concatenate((self.ids_array[:self.n_ids],
                                                 np.zeros(max(self.n_ids, length), dtype=np.int32)))
                self.ids = self.ids_array
            if self.n_sentences >= self.ends.shape[0]:
                self.ends_array = np.concatenate((self.ends_array, np.zeros_like(self.ends_array)))
                self.ends = self.ends_array
            kept = 0
            for word in tokens:
                found = PyDict_GetItemWithError(self.vocabulary, word)
                if found != NULL:
                    self.ids[self.n_ids + kept] = <int32_t>PyLong_AsSsize_t(<object>found)
                    kept += 1
            self.n_ids += kept
            self.longest = max(self.longest, kept)
            self.ends[self.n_sentences] = self.n_ids
            self.n_sentences += 1
        if self.position == start:
            self.finished = True
            return False
        self.blocks_passed += 1
        self.block_start, self.block_end = start, self.position
        return True

    def blocks(self):
        """Yield (ids, sentence_ends) of each block of a new pass (copies), to look at
        what the samplers read."""
        self.begin_pass()
        while self.next_block():
            yield self.ids_array[:self.n_ids].copy(), self.ends_array[:self.n_sentences].copy()


cdef int64_t* _claim_counter(str who, object claim) except? NULL:
    """The counter of a `claim` argument (None: NULL): a writable, contiguous int64 numpy
    array whose first element counts the blocks claimed."""
    if claim is None:
        return NULL
    if not isinstance(claim, np.ndarray) or claim.dtype != np.int64 or claim.size < 1 \
            or not claim.flags.writeable or not claim.flags.c_contiguous:
        raise TypeError(f"{who}: claim must be a writable, contiguous int64 numpy array "
                        f"(its first element counts the blocks claimed), got {claim!r}")
    return <int64_t*>cnp.PyArray_DATA(claim)


cdef tuple _word_ids(str who, object tokens):
    """(`tokens` as a C-contiguous 1-D int32 array of word ids, no copy when it is one, a
    memory map included; its largest id)."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{who}: tokens must be a 1-D array of word ids, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{who}: tokens must hold integers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{who}: tokens is empty")
    if arr.dtype.kind == "i" and arr.min() < 0:
        raise IndexError(f"{who}: tokens holds a negative id ({arr.min()}) at position "
                         f"{int(np.argmin(arr))}")
    largest = int(arr.max())
    if largest > INT32_MAX:
        raise IndexError(f"{who}: tokens holds an id too large for int32 ({largest}) at "
                         f"position {int(np.argmax(arr))}")
    return np.ascontiguousarray(arr, dtype=np.int32), largest


# ---------------------------------------------------------------- word2vec's windows

cdef class WindowSampler(Sampler):
    """The corpus walk word2vec's two models share: sentences of this worker's shard,
    frequent words subsampled, a reduced window drawn per centre, and negatives
    from the unigram distribution ** ns_exponent. Subclasses fill the leaves."""
    cdef object tokens_array         # a token array given (the memoryviews hold their own arrays)
    cdef const int32_t[::1] tokens
    cdef const int64_t[::1] ends
    cdef const double[::1] keep
    cdef int64_t[::1] buffer         # the kept tokens of the current sentence
    cdef AliasTable noise_table
    cdef Py_ssize_t window, vocab_size
    cdef Py_ssize_t first_sentence, end_sentence, sentence, token_lo, token_hi
    cdef Py_ssize_t length, center_pos, sentence_start, window_lo, window_hi
    cdef bint subsample
    cdef readonly double sample
    cdef Py_ssize_t items             # pairs (skip-gram) or centres (CBOW) an example
    cdef Py_ssize_t negative          # negatives drawn for each item
    cdef int64_t* out_scored          # the leaf of 1 + negative ids an item: its word, then the negatives
    cdef object claim_array
    cdef int64_t* claim               # the shared counter of the next block to claim, or NULL
    cdef const int64_t[::1] block_first   # the first sentence of each block (and the end)
    cdef Py_ssize_t n_blocks, block_tokens
    cdef bint exhausted               # every block claimed (by this sampler or the others)
    cdef TokenStream stream           # the corpus read block by block, or None (a token array)
    cdef bint streaming
    cdef int64_t block_start, block_end   # the stream's current block, in its pass's tokens
    cdef object failure               # what ended the epoch early while reading the stream
    cdef Py_ssize_t epoch_items       # of those, drawn in the current (or last) epoch
    cdef char* out_mask               # the mask Input's buffer, or NULL
    cdef bint mask_f64
    cdef _SubwordBags bags            # a subword sampler's bags (its leaves 0 and 1), or None
    cdef tuple bagged                 # the leaves such a sampler writes and its bags read (kept alive)

    cdef int read_walk(self, str who, str what, object mask, object tokens, object sentence_ends,
                       object window, object ns_exponent, object sample, object vocab_size,
                       object counts, object claim, object block_tokens) except -1:
        """Check the arguments both samplers take after their leaves (`mask` against the
        items, `what`, an example holds: needed when there are several; then the corpus and
        its walk), and begin epoch 0."""
        if mask is not None:
            self.out_mask = _input_leaf(who, "mask", mask, self.items)
            self.mask_f64 = (<Variable>mask).f64
            self.leaves = self.leaves + (mask,)
        elif self.items > 1:
            raise ValueError(f"{who}: with {self.items} {what} an example, give mask (an Input of "
                             f"{self.items} values, 0 for the slots of the epoch's last, partial "
                             f"example) and multiply each one's loss by it")
        # block_tokens is checked also without a claim, which ignores it; read_tokens cuts the blocks
        self.block_tokens = check_int(who, "block_tokens", block_tokens, 1)
        self.claim = _claim_counter(who, claim)
        self.claim_array = claim
        self.window = check_int(who, "window", window, 1)
        if isinstance(tokens, TokenStream):
            self.read_stream(who, tokens, sentence_ends, vocab_size, counts, claim)
        else:
            self.read_tokens(who, tokens, sentence_ends, vocab_size, counts)
        if counts is None:      # the token array's own (a stream refuses None)
            counts = np.bincount(self.tokens_array, minlength=self.vocab_size)
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 1 or counts.size != self.vocab_size:
            raise ValueError(f"{who}: counts must hold one count for each of the {self.vocab_size} "
                             f"word ids (vocab_size), got shape {counts.shape}")
        if not np.all(np.isfinite(counts)) or counts.min() < 0:
            raise ValueError(f"{who}: counts must be finite and >= 0")
        self.read_distributions(who, counts, ns_exponent, sample)
        self.begin_epoch(0)
        return 0

    cdef int read_negatives(self, str who, str name, object ids, str first, str item) except -1:
        """Check the IndexInput `ids` (argument `name`), which holds 1 + k ids for each of
        the `items` of an example (an `item`): `first`, then k >= 1 negatives; set `negative`
        to k, and `out_scored` to the leaf the draws write them to."""
        self.out_scored = _index_leaf(who, name, ids, -1)
        cdef Py_ssize_t size = (<Variable>ids).size
        if size % self.items:
            raise ValueError(f"{who}: {name} must hold (1 + k) ids for each of the {self.items} "
                             f"{item}s, got {size}")
        self.negative = size // self.items - 1
        if self.negative < 1:
            raise ValueError(f"{who}: {name} must hold {first} and at least one negative "
                             f"(1 + k ids) for each {item}, got {size} for {self.items}")
        return 0

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next item into `slot` of the leaves; False at the epoch's end."""
        return False

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        """Copy the item in slot `source` of the leaves into `slot`: here its 1 + k ids and its
        bag, if any; a subclass copies its other leaves."""
        cdef Py_ssize_t width = 1 + self.negative
        memcpy(self.out_scored + slot * width, self.out_scored + source * width, width * sizeof(int64_t))
        if self.bags is not None:
            self.bags.repeat(slot, source)

    cdef bint next_example(self) noexcept nogil:
        cdef Py_ssize_t slot, drawn = 0
        while drawn < self.items and self.draw_item(drawn):
            drawn += 1
        if drawn == 0:
            return False
        for slot in range(self.items):
            if slot >= drawn:       # the epoch ended mid-example: repeat the last item, mask 0
                self.repeat_item(slot, drawn - 1)
            if self.out_mask != NULL:
                _put_weight(self.out_mask, self.mask_f64, slot, 1.0 if slot < drawn else 0.0)
        self.epoch_items += drawn
        self.epoch_examples += 1
        return True

    cdef int read_tokens(self, str who, object tokens, object sentence_ends, object vocab_size,
                         object counts) except -1:
        """Walk the token array `tokens` (this worker's share of its sentences, or the blocks it
        claims); `counts` given, if any, set the default vocab_size."""
        self.tokens_array, largest = _word_ids(who, tokens)
        n = self.tokens_array.size
        if vocab_size is None:
            vocab_size = largest + 1 if counts is None else np.size(counts)
        self.vocab_size = check_int(who, "vocab_size", vocab_size, 1)
        if largest >= self.vocab_size:
            raise ValueError(f"{who}: token id {largest} (at position {int(np.argmax(self.tokens_array))}) "
                             f"is out of range for vocab_size {self.vocab_size}")
        self.tokens = self.tokens_array
        if sentence_ends is None:
            ends = np.array([n], dtype=np.int64)
        else:
            ends = _integer_array(who, "sentence_ends", sentence_ends).ravel()
            if ends.size == 0 or ends[ends.size - 1] != n or np.any(np.diff(ends) < 0):
                raise ValueError(f"{who}: sentence_ends must be non-decreasing offsets ending at "
                                 f"len(tokens) = {n}")
        self.ends = ends
        starts = np.concatenate(([0], ends[:-1]))
        if self.claim != NULL:      # the whole corpus, in blocks claimed as the walk goes
            self.n_blocks = max(1, round(n / self.block_tokens))
            bounds = n * np.arange(self.n_blocks + 1, dtype=np.int64) // self.n_blocks
            self.block_first = np.searchsorted(starts, bounds, side="left").astype(np.int64)
            self.token_lo, self.token_hi = 0, n
            self.first_sentence = self.end_sentence = 0
        else:
            self.token_lo, self.token_hi = _share(n, self.rank, self.workers)
            self.first_sentence = int(np.searchsorted(starts, self.token_lo, side="left"))
            self.end_sentence = int(np.searchsorted(starts, self.token_hi, side="left"))
        self.buffer = np.zeros(max(int(np.max(ends - starts)), 1), dtype=np.int64)
        return 0

    cdef int read_stream(self, str who, TokenStream stream, object sentence_ends, object vocab_size,
                         object counts, object claim) except -1:
        """Walk the blocks of `stream` (each pass whole, or the blocks its claim counter gives
        it); a stream needs the words' `counts`."""
        if counts is None:
            raise ValueError(f"{who}: a TokenStream needs counts (each word id's count in the "
                             f"corpus, e.g. from fa.data.count_words): the noise and the "
                             f"subsampling follow them")
        if sentence_ends is not None or claim is not None:
            raise ValueError(f"{who}: a TokenStream gives its own sentence ends and claim "
                             f"counter; sentence_ends and claim must be None")
        self.vocab_size = check_int(who, "vocab_size", np.size(counts) if vocab_size is None else vocab_size, 1)
        if stream.largest_id >= self.vocab_size:
            raise ValueError(f"{who}: the stream's vocabulary holds id {stream.largest_id}, out of "
                             f"range for vocab_size {self.vocab_size}")
        self.stream, self.streaming = stream, True
        self.buffer = np.zeros(max(stream.block_tokens, 1), dtype=np.int64)
        return 0

    cdef int read_distributions(self, str who, object counts, object ns_exponent, object sample) except -1:
        """The noise table (counts ** ns_exponent) and the subsampling's keep probabilities."""
        exponent = check_real(who, "ns_exponent", ns_exponent)
        self.sample = check_real(who, "sample", sample)
        if self.sample < 0:
            raise ValueError(f"{who}: sample must be >= 0, got {sample!r}")
        weights = np.zeros(self.vocab_size)
        weights[counts > 0] = counts[counts > 0] ** exponent
        if np.count_nonzero(weights) < 2:
            raise ValueError(f"{who}: the tokens hold fewer than 2 distinct words; a negative "
                             f"must differ from the word it is drawn against")
        self.noise_table = AliasTable(weights)
        self.subsample = self.sample > 0
        # word2vec's keep probability: (sqrt(c / t) + 1) * t / c with t = sample * total.
        threshold = self.sample * counts.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = np.where(counts > 0, (np.sqrt(counts / threshold) + 1) * threshold / counts, 1.0) \
                if self.subsample else np.ones(self.vocab_size)
        self.keep = np.minimum(keep, 1.0)
        return 0

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.epoch_examples = self.epoch_items = 0
        self.sentence = self.first_sentence
        self.exhausted = False
        if self.claim != NULL or self.streaming:
            self.end_sentence = self.first_sentence     # no block yet: the first load takes one
        if self.streaming:
            self.stream.begin_pass()
            self.failure = None
            self.block_start = self.block_end = self.token_lo = self.token_hi = 0
        self.length = self.center_pos = self.sentence_start = self.window_lo = self.window_hi = 0
        return 0

    cdef bint claim_block(self) noexcept nogil:
        """Claim the next block of the corpus from the shared counter; False once all are taken."""
        cdef int64_t k
        if self.exhausted:
            return False
        k = fa_claim_next(self.claim)
        if k < 0 or k >= self.n_blocks:
            self.exhausted = True
            return False
        self.sentence = self.block_first[k]
        self.end_sentence = self.block_first[k + 1]
        return True

    cdef bint pull_block(self) noexcept nogil:
        """Read the stream's next block (taking the GIL); False at the end of its pass, or
        when reading it failed (`end_epoch` raises the failure)."""
        with gil:
            try:
                if self.exhausted or not self.stream.next_block():
                    self.exhausted = True
                    return False
                self.tokens = self.stream.ids_array[:self.stream.n_ids]
                self.ends = self.stream.ends_array[:self.stream.n_sentences]
                if self.stream.longest > self.buffer.shape[0]:
                    self.buffer = np.zeros(self.stream.longest, dtype=np.int64)
                self.sentence, self.end_sentence = 0, self.stream.n_sentences
                self.token_lo, self.token_hi = 0, self.stream.n_ids
                self.block_start, self.block_end = self.stream.block_start, self.stream.block_end
                return True
            except BaseException as failure:
                self.failure = failure
                self.exhausted = True
                return False

    cdef int end_epoch(self) except -1:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        return 0

    cdef bint load_sentence(self) noexcept nogil:
        """Read the next sentence of the shard (or of the claimed blocks, or of the stream's
        blocks) into the buffer, subsampled; False at the end."""
        cdef Py_ssize_t start, end, t
        cdef int32_t word
        while (self.sentence < self.end_sentence or self.claim != NULL and self.claim_block()
               or self.streaming and self.pull_block()):
            if self.sentence >= self.end_sentence:      # an empty block
                continue
            start = self.ends[self.sentence - 1] if self.sentence > 0 else 0
            end = self.ends[self.sentence]
            self.sentence += 1
            self.sentence_start = start
            self.length = 0
            for t in range(start, end):
                word = self.tokens[t]
                if not self.subsample or self.keep[word] >= 1.0 or fa_rng_uniform(&self.rng) < self.keep[word]:
                    self.buffer[self.length] = word
                    self.length += 1
            if self.length > 1:
                return True
        return False

    cdef bint next_center(self) noexcept nogil:
        """Move to the next centre, in this sentence or the next one, and draw its reduced
        window [window_lo, window_hi) (the centre included); False at the epoch's end."""
        cdef Py_ssize_t reach
        self.center_pos += 1
        if self.center_pos >= self.length:
            if not self.load_sentence():
                return False
            self.center_pos = 0
        reach = self.window - fa_rng_below(&self.rng, self.window)
        self.window_lo = self.center_pos - reach if self.center_pos > reach else 0
        self.window_hi = min(self.center_pos + reach + 1, self.length)
        return True

    cdef int draw_negatives(self, int64_t* out, Py_ssize_t k) noexcept nogil:
        """k draws from the noise table, a draw equal to the example's word kept: the
        negative-sampling objective's expectation runs over the whole noise distribution.
        word2vec and gensim skip such a draw, fastText redraws it; redrawn, one epoch on
        the standard library's text (bench/peers.py) ended at a held-out loss of 2.6477
        for skip-gram and 2.6541 for subword skip-gram, against 2.6463 and 2.6524 kept
        (means of four and eight seeds)."""
        cdef Py_ssize_t i
        for i in range(k):
            out[i] = self.noise_table.draw(&self.rng)
        return 0

    cdef double epoch_progress(self) noexcept nogil:
        cdef double span = self.token_hi - self.token_lo
        cdef double done = self.sentence_start - self.token_lo
        cdef double total
        if self.length:
            done += (self.ends[self.sentence - 1] - self.sentence_start) * self.center_pos / <double>self.length
        if self.streaming:      # the block's share of the pass, and the share of the block walked
            total = self.stream.total_tokens
            if self.exhausted or total <= 0:
                return 1.0
            done = self.block_start + ((self.block_end - self.block_start) * done / span if span > 0 else 0.0)
            return min(1.0, max(0.0, done / total))
        if span <= 0 or self.exhausted or \
                self.claim == NULL and self.sentence >= self.end_sentence and self.center_pos >= self.length:
            return 1.0
        return min(1.0, max(0.0, done / span))

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        # a subword sampler's bags: their largest row; none for the offsets (bag_dot checks them on
        # every example)
        if self.bags is not None and k < 2:
            return self.bags.largest_row if k == 0 else -1
        return self.vocab_size - 1 if isinstance(self.leaves[k], IndexInput) else -1

    def where(self):
        if self.streaming:
            return (f"example {self.epoch_examples} of the epoch (sentence {self.sentence - 1} of the "
                    f"block of tokens [{self.block_start}, {self.block_end}) of the stream)")
        return f"example {self.epoch_examples} of the epoch (sentence {self.sentence - 1})"


cdef class SkipGramSampler(WindowSampler):
    """Skip-gram pairs with negative sampling from a token stream, drawn as
    word2vec (and gensim) draws them, B pairs per example.

    tokens         1-D integer array of word ids in [0, vocab_size) (read as int32: an
                   int32 array, a memory map included, is not copied), or a
                   `TokenStream` (a corpus of token lists encoded block by block as it
                   is read, never held; give `counts`).
    center         IndexInput of B ids: the centre word of each of the B pairs.
    context        IndexInput of B * (1 + k) ids: for each pair in turn, a word
                   within its centre's window, then k negatives from the unigram
                   distribution ** ns_exponent (a draw equal to that word is kept,
                   as the objective draws it).
    mask           Input of B values, needed when B > 1: 1 for each pair drawn, 0
                   for the slots the epoch's last, partial example leaves over
                   (they repeat the last pair drawn); multiply each pair's loss by
                   it so that no pair is lost or counted twice.
    sentence_ends  increasing end offsets of the sentences (the last is
                   len(tokens)); windows never cross a sentence end. Default:
                   one sentence.
    window         the largest window; each centre draws a reduced window
                   uniformly from 1..window, as word2vec does.
    ns_exponent    the power of the counts the negatives are drawn by (a finite
                   number; word2vec's 0.75).
    sample         frequent-word subsampling threshold (word2vec's `sample`,
                   e.g. 1e-3; 0 keeps every token), redrawn every epoch: a
                   finite number >= 0.
    vocab_size     default: len(counts), else the largest id + 1.
    counts         each word id's count in the corpus, which the noise distribution
                   and the subsampling follow (needed with a TokenStream); default:
                   the counts of the tokens given (all shards).
    seed, rank, workers  the stream, and this worker's shard: the sentences that
                   start in its 1/workers of the tokens (no copy); a TokenStream is
                   read whole (or as its claim counter shares it).
    claim          None, or a shared int64 array (e.g. the int64 view of a one-element
                   array in `fa.hogwild.share`) whose first element counts the blocks
                   claimed: the walk then covers the whole corpus in blocks of about
                   `block_tokens` tokens (the sentences that start in each), taking the
                   next unclaimed block (an atomic increment) whenever it finishes one,
                   and its progress (what LinearDecay follows) is its position in the
                   corpus. Workers sharing one counter walk the corpus side by side in
                   order, whatever their speeds, as gensim's threads take its jobs from
                   one queue; rank and workers then only pick the stream. Set the
                   counter to 0 before each epoch.

    B pairs per
    replay share the cost of a replay among them (the gradients of one example
    are applied together, as a minibatch of B); `epoch_pairs` counts the pairs.

    >>> c, ctx = fa.IndexInput([0]), fa.IndexInput([0] * 6)
    >>> scores = C[ctx] @ W[c].T                  # (6, 1): the word, then 5 negatives
    >>> loss = -fa.logsigmoid(scores * signs).sum()     # signs: Input [[1], [-1], ...]
    >>> fa.train(loss, opt, fa.data.SkipGramSampler(tokens, c, ctx, window=5, seed=0))

    With B = 16 pairs an example:

    >>> c, ctx, m = fa.IndexInput([0] * 16), fa.IndexInput(np.zeros((16, 6), int)), fa.Input(np.ones((16, 1)))
    >>> scores = fa.gather_dot(W, c, C, ctx)        # (16, 6): W[c[b]] . C[ctx[b, j]]
    >>> loss = -(fa.logsigmoid(scores * signs) * m).sum()            # signs: (6,) of 1, -1, ...
    >>> fa.train(loss, opt, fa.data.SkipGramSampler(tokens, c, ctx, mask=m, seed=0))
    """
    cdef int64_t* out_center
    cdef Py_ssize_t context_pos       # the next context word (each new centre sets it: an epoch begins with none)

    def __init__(self, tokens, center, context, *, mask=None, sentence_ends=None, window=5,
                 ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None, seed=None, rank=0,
                 workers=1, claim=None, block_tokens=10_000):
        who = "SkipGramSampler"
        _seed_stream(self, who, seed, rank, workers)
        self.out_center = _index_leaf(who, "center", center, -1)
        self.items = (<Variable>center).size
        if self.items == 0:
            raise ValueError(f"{who}: center holds no ids; give an IndexInput of at least one id")
        self.read_negatives(who, "context", context, "the context word", "centre id")
        self.leaves = (center, context)
        self.read_walk(who, "pairs", mask, tokens, sentence_ends, window, ns_exponent, sample,
                       vocab_size, counts, claim, block_tokens)

    @property
    def epoch_pairs(self):
        """The pairs drawn in the current (or last) epoch."""
        return self.epoch_items

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next pair into `slot`; False at the epoch's end."""
        cdef int64_t* context = self.out_scored + slot * (1 + self.negative)
        while True:
            if self.context_pos == self.center_pos:
                self.context_pos += 1
            if self.context_pos < self.window_hi:
                break
            if not self.next_center():
                return False
            self.context_pos = self.window_lo
        self.out_center[slot] = self.buffer[self.center_pos]
        context[0] = self.buffer[self.context_pos]
        self.draw_negatives(context + 1, self.negative)
        self.context_pos += 1
        return True

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        WindowSampler.repeat_item(self, slot, source)
        self.out_center[slot] = self.out_center[source]


cdef class CbowSampler(WindowSampler):
    """CBOW examples with negative sampling: the words around a centre predict it,
    drawn as word2vec draws them (same corpus walk and arguments as
    SkipGramSampler), B centres per example.

    context   IndexInput of B * 2 * window ids: for each centre in turn, the words
              of its reduced window (padded with id 0).
    weights   Input of B * 2 * window values (e.g. shape (B, 2 * window, 1)): 1 / n
              for each of the n real context words of a centre, 0 for padding, so
              that `fa.sum(W[context] * weights, axis=-2)` is their mean.
    target    IndexInput of B * (1 + k) ids: for each centre in turn, the centre,
              then k negatives (a draw equal to the centre kept).
    mask      Input of B values, needed when B > 1: 1 for each centre drawn, 0 for
              the slots the epoch's last, partial example leaves over (they repeat
              the last centre); multiply each centre's loss by it.

    >>> h = fa.sum(W[ctx] * wts, axis=0, keepdims=True)       # wts: Input (2 * window, 1)
    >>> loss = -fa.logsigmoid((C[target] @ h.T) * signs).sum()
    >>> fa.train(loss, opt, fa.data.CbowSampler(tokens, ctx, wts, target, window=5, seed=0))
    """
    cdef int64_t* out_context
    cdef char* out_weights
    cdef bint weights_f64
    cdef Py_ssize_t slots
    cdef bint mean                    # each context word weighs 1 / n (CBOW's mean), else 1
    cdef Py_ssize_t epoch_context     # the context words of the centres drawn this epoch

    def __init__(self, tokens, context, weights, target, *, mask=None, sentence_ends=None,
                 window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None, seed=None,
                 rank=0, workers=1, claim=None, block_tokens=10_000):
        self.mean = True
        self.read_window("CbowSampler", tokens, context, weights, target, mask, sentence_ends, window,
                         ns_exponent, sample, vocab_size, counts, seed, rank, workers, claim, block_tokens)

    cdef int read_window(self, str who, object tokens, object context, object weights, object target,
                         object mask, object sentence_ends, object window, object ns_exponent,
                         object sample, object vocab_size, object counts, object seed, object rank,
                         object workers, object claim, object block_tokens) except -1:
        """Check the leaves and the walk's arguments (the constructor's), naming `who`."""
        _seed_stream(self, who, seed, rank, workers)
        self.slots = 2 * check_int(who, "window", window, 1)
        self.out_context = _index_leaf(who, "context", context, -1)
        self.items = (<Variable>context).size // self.slots
        if self.items == 0 or (<Variable>context).size % self.slots:
            raise ValueError(f"{who}: context must hold 2 * window = {self.slots} ids for each "
                             f"centre, got {(<Variable>context).size}")
        self.out_weights = _input_leaf(who, "weights (2 * window a centre)", weights,
                                       self.items * self.slots)
        self.weights_f64 = (<Variable>weights).f64
        self.read_negatives(who, "target", target, "the centre", "centre")
        self.leaves = (context, weights, target)
        self.read_walk(who, "centres", mask, tokens, sentence_ends, window, ns_exponent, sample,
                       vocab_size, counts, claim, block_tokens)
        return 0

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        WindowSampler.begin_epoch(self, epoch)
        self.center_pos = -1
        self.epoch_context = 0
        return 0

    @property
    def epoch_centres(self):
        """The centres drawn in the current (or last) epoch."""
        return self.epoch_items

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next centre with its window into `slot`; False at the epoch's end."""
        cdef Py_ssize_t j, n = 0
        cdef int64_t* context = self.out_context + slot * self.slots
        cdef int64_t* target = self.out_scored + slot * (1 + self.negative)
        cdef Py_ssize_t first = slot * self.slots
        cdef double share
        while n == 0:
            if not self.next_center():
                return False
            n = self.window_hi - self.window_lo - 1
        self.epoch_context += n
        share = 1.0 / n if self.mean else 1.0
        for j in range(self.slots):
            context[j] = 0
            _put_weight(self.out_weights, self.weights_f64, first + j, 0.0)
        n = 0
        for j in range(self.window_lo, self.window_hi):
            if j == self.center_pos:
                continue
            context[n] = self.buffer[j]
            _put_weight(self.out_weights, self.weights_f64, first + n, share)
            n += 1
        target[0] = self.buffer[self.center_pos]
        self.draw_negatives(target + 1, self.negative)
        return True

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        cdef size_t weight_bytes = sizeof(double) if self.weights_f64 else sizeof(float)
        WindowSampler.repeat_item(self, slot, source)
        memcpy(self.out_context + slot * self.slots, self.out_context + source * self.slots,
               self.slots * sizeof(int64_t))
        memcpy(self.out_weights + slot * self.slots * weight_bytes,
               self.out_weights + source * self.slots * weight_bytes, self.slots * weight_bytes)


cdef class SharedNegativeSampler(CbowSampler):
    """Skip-gram examples with shared negatives (pWord2Vec, Ji et al. 2016): one example is a
    centre's whole reduced window and k negatives drawn once for the centre, which every
    context word of the window shares, for `window_loss` (`Word2Vec(shared_negatives=True)`).
    The corpus walk, windows and arguments are CbowSampler's; the leaves are too, the weights
    1 for each context word (0 for the empty slots):

    context   IndexInput of B * 2 * window ids: for each centre in turn, the words of its
              reduced window (padded with id 0).
    weights   Input of B * 2 * window values: 1 for each context word, 0 for padding.
    target    IndexInput of B * (1 + k) ids: for each centre in turn, the centre, then k
              negatives (a draw equal to the centre kept). For `window_loss(...,
              groups=G)`, whose context words split into G groups with k negatives
              each, make it 1 + G k ids a centre: the G k negatives are drawn alike.
    mask      Input of B values, needed when B > 1 (as CbowSampler's).

    `epoch_pairs` counts the (centre, context word) pairs of the epoch's examples, the pairs
    SkipGramSampler would draw from the same windows. The negatives of each window are
    drawn with the window before it, and `fastad.train` starts loading their rows (and the
    next centre's, and the input row of the word the next windows reach first) while that
    one trains.

    >>> ctx, wts, tgt = fa.IndexInput([0] * 10), fa.Input(np.zeros(10)), fa.IndexInput([0] * 6)
    >>> loss = window_loss(W, ctx, wts, C, tgt)               # or: scores = W[ctx] @ C[tgt].T, ...
    >>> fa.train(loss, opt, fa.data.SharedNegativeSampler(tokens, ctx, wts, tgt, window=5, seed=0))
    """

    cdef int64_t[::1] ahead            # the next window's negatives
    cdef bint ahead_drawn

    def __init__(self, tokens, context, weights, target, *, mask=None, sentence_ends=None,
                 window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None, seed=None,
                 rank=0, workers=1, claim=None, block_tokens=10_000):
        self.mean = False
        self.read_window("SharedNegativeSampler", tokens, context, weights, target, mask, sentence_ends,
                         window, ns_exponent, sample, vocab_size, counts, seed, rank, workers, claim,
                         block_tokens)
        self.ahead = np.zeros(self.negative, dtype=np.int64)

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        CbowSampler.begin_epoch(self, epoch)
        self.ahead_drawn = False
        return 0

    cdef int draw_negatives(self, int64_t* out, Py_ssize_t k) noexcept nogil:
        """The k negatives drawn with the window before (the epoch's first window: drawn now),
        then the next window's, whose rows (of the tables the target leaf selects) start
        loading now."""
        cdef Py_ssize_t i
        if not self.ahead_drawn:
            WindowSampler.draw_negatives(self, &self.ahead[0], k)
            self.ahead_drawn = True
        memcpy(out, &self.ahead[0], k * sizeof(int64_t))
        WindowSampler.draw_negatives(self, &self.ahead[0], k)
        for i in range(k):
            self.prefetch_rows(2, self.ahead[i])
        return 0

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        if not CbowSampler.draw_item(self, slot):
            return False
        if self.center_pos + 1 < self.length:       # the next centre's row starts loading
            self.prefetch_rows(2, self.buffer[self.center_pos + 1])
        if self.center_pos + 1 + self.window < self.length:     # and the word its window may reach first
            self.prefetch_rows(0, self.buffer[self.center_pos + 1 + self.window])
        return True

    @property
    def epoch_pairs(self):
        """The (centre, context word) pairs of the examples drawn in the current (or last) epoch."""
        return self.epoch_context


# ---------------------------------------------------------------- fastText's subword windows

cdef class _SubwordBags:
    """The bags of input rows a subword sampler writes: each item's rows (its words' rows
    from the vocabulary's CSR table `ids`/`offsets`, concatenated) one after another in
    the bag_ids leaf, item k's cut by bag_offsets[k]..[k + 1] (torch's include_last_offset)."""
    cdef const int32_t[::1] ids
    cdef const int64_t[::1] offsets
    cdef int64_t* out_ids
    cdef int64_t* out_offsets
    cdef Py_ssize_t capacity, largest_row

    def __init__(self, str who, object bag_ids, object bag_offsets, Py_ssize_t items,
                 Py_ssize_t words_an_item, object subword_ids, object subword_offsets,
                 Py_ssize_t vocab_size):
        ids = np.ascontiguousarray(subword_ids)
        offsets = np.ascontiguousarray(subword_offsets)
        if ids.ndim != 1 or ids.dtype != np.int32 or ids.size == 0 or ids.min() < 0:
            raise ValueError(f"{who}: subword_ids must be a non-empty 1-D int32 array of row ids >= 0 "
                             f"(fa.text.subword_table), got {ids.dtype} of shape {ids.shape}")
        if offsets.ndim != 1 or offsets.dtype != np.int64 or offsets.size != vocab_size + 1 \
                or offsets[0] != 0 or offsets[vocab_size] != ids.size or np.any(np.diff(offsets) < 1):
            raise ValueError(f"{who}: subword_offsets must be {vocab_size + 1} int64 offsets (one bag "
                             f"of at least one row for each of the {vocab_size} word ids, then the "
                             f"end), rising from 0 to len(subword_ids) = {ids.size}")
        self.ids, self.offsets = ids, offsets
        self.largest_row = int(ids.max())
        longest = int(np.diff(offsets).max()) * words_an_item * items
        self.out_ids = _index_leaf(who, "bag_ids", bag_ids, -1)
        self.capacity = (<Variable>bag_ids).size
        if self.capacity < longest:
            raise ValueError(f"{who}: bag_ids must hold the longest bags of an example, {longest} "
                             f"ids ({items} item(s) of up to {words_an_item} word(s) of up to "
                             f"{longest // (words_an_item * items)} rows), got {self.capacity}")
        self.out_offsets = _index_leaf(who, "bag_offsets", bag_offsets, items + 1)
        self.out_offsets[0] = 0

    cdef inline void begin(self, Py_ssize_t slot) noexcept nogil:
        """Start slot's bag, empty, after the bag of the slot before it."""
        self.out_offsets[slot + 1] = self.out_offsets[slot]

    cdef inline void add_word(self, Py_ssize_t slot, int64_t word) noexcept nogil:
        """Append word's rows to slot's bag (the last begun)."""
        cdef int64_t k, end = self.out_offsets[slot + 1]
        for k in range(self.offsets[word], self.offsets[word + 1]):
            self.out_ids[end] = self.ids[k]
            end += 1
        self.out_offsets[slot + 1] = end

    cdef inline void repeat(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        """Slot's bag: a copy of source's."""
        cdef int64_t start = self.out_offsets[source], n = self.out_offsets[source + 1] - start
        self.begin(slot)
        memcpy(self.out_ids + self.out_offsets[slot], self.out_ids + start, n * sizeof(int64_t))
        self.out_offsets[slot + 1] += n


cdef class SubwordSkipGramSampler(SkipGramSampler):
    """Skip-gram pairs over subword bags (fastText's, and gensim's `FastText`): the walk,
    windows and negatives of `SkipGramSampler` (same arguments after the leaves), the
    centre of each pair written as its bag of input rows, the word's own row and its
    character n-gram rows, for `fa.bag_dot`.

    bag_ids          IndexInput of capacity ids (at least B times the longest bag): the
                     bags of the B pairs of an example one after another (the ids past
                     the last bag are left as they were: no padding is read).
    bag_offsets      IndexInput of B + 1 offsets: pair b's bag is
                     bag_ids[bag_offsets[b]:bag_offsets[b + 1]].
    context          IndexInput of B * (1 + k) ids, as SkipGramSampler's.
    subword_ids, subword_offsets  each word id's input rows (CSR: word w's rows are
                     subword_ids[subword_offsets[w]:subword_offsets[w + 1]], int32 and
                     int64, from `fa.text.subword_table`).

    >>> ids, offsets = fa.text.subword_table(words, 3, 6, bucket)
    >>> bag, cut, ctx = fa.IndexInput([0] * longest), fa.IndexInput([0, 0]), fa.IndexInput([[0] * 6])
    >>> scores = fa.bag_dot(W, bag, cut, C, ctx, hidden_gradient=True)
    >>> sampler = fa.data.SubwordSkipGramSampler(tokens, bag, cut, ctx, subword_ids=ids,
    ...                                          subword_offsets=offsets, window=5, seed=0)
    """

    def __init__(self, tokens, bag_ids, bag_offsets, context, *, subword_ids, subword_offsets, mask=None,
                 sentence_ends=None, window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None,
                 seed=None, rank=0, workers=1, claim=None, block_tokens=10_000):
        who = "SubwordSkipGramSampler"
        items = _bag_count(who, bag_offsets)
        SkipGramSampler.__init__(self, tokens, IndexInput(np.zeros(items, dtype=np.int64)), context,
                                 mask=mask, sentence_ends=sentence_ends, window=window,
                                 ns_exponent=ns_exponent, sample=sample, vocab_size=vocab_size,
                                 counts=counts, seed=seed, rank=rank, workers=workers, claim=claim,
                                 block_tokens=block_tokens)
        self.bags = _SubwordBags(who, bag_ids, bag_offsets, items, 1, subword_ids, subword_offsets,
                                 self.vocab_size)
        self.bagged = self.leaves[:1]           # the centres
        self.leaves = (bag_ids, bag_offsets) + self.leaves[1:]

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        if not SkipGramSampler.draw_item(self, slot):
            return False
        self.bags.begin(slot)
        self.bags.add_word(slot, self.out_center[slot])
        return True


cdef class SubwordCbowSampler(CbowSampler):
    """CBOW examples over subword bags (fastText's, and gensim's `FastText`): the walk,
    windows and negatives of `CbowSampler` (same arguments after the leaves), the
    context of each centre written as one bag, the input rows (own row and character
    n-gram rows) of its words one after another, whose mean is the hidden (as fastText
    and gensim's cbow_mean=1 average every row of the window), for `fa.bag_dot`.

    bag_ids          IndexInput of capacity ids (at least B * 2 * window times the
                     longest word's rows); bag_offsets: B + 1 offsets, as
                     `SubwordSkipGramSampler`'s.
    target           IndexInput of B * (1 + k) ids, as CbowSampler's.
    subword_ids, subword_offsets  each word id's input rows, as `SubwordSkipGramSampler`'s.
    """

    def __init__(self, tokens, bag_ids, bag_offsets, target, *, subword_ids, subword_offsets, mask=None,
                 sentence_ends=None, window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None,
                 seed=None, rank=0, workers=1, claim=None, block_tokens=10_000):
        who = "SubwordCbowSampler"
        items = _bag_count(who, bag_offsets)
        slots = 2 * check_int(who, "window", window, 1)
        CbowSampler.__init__(self, tokens, IndexInput(np.zeros(items * slots, dtype=np.int64)),
                             Input(np.zeros(items * slots, dtype=np.float32)), target, mask=mask,
                             sentence_ends=sentence_ends, window=window, ns_exponent=ns_exponent,
                             sample=sample, vocab_size=vocab_size, counts=counts, seed=seed, rank=rank,
                             workers=workers, claim=claim, block_tokens=block_tokens)
        self.bags = _SubwordBags(who, bag_ids, bag_offsets, items, slots, subword_ids, subword_offsets,
                                 self.vocab_size)
        self.bagged = self.leaves[:2]           # the context words and their weights
        self.leaves = (bag_ids, bag_offsets) + self.leaves[2:]

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        cdef Py_ssize_t j
        cdef int64_t* context = self.out_context + slot * self.slots
        if not CbowSampler.draw_item(self, slot):
            return False
        self.bags.begin(slot)
        for j in range(self.window_hi - self.window_lo - 1):
            self.bags.add_word(slot, context[j])
        return True


cdef class SubwordSharedNegativeSampler(SharedNegativeSampler):
    """Subword skip-gram with shared negatives (FastText's `shared_negatives=True`): the walk,
    windows and negatives of `SharedNegativeSampler` (same arguments after the leaves),
    fastText's direction: the centre's bag of input rows (its own row and its character
    n-gram rows) scored against each word of its window and against k negatives drawn
    once for the window, for `fa.bag_dot`. The negatives' terms, shared by the window's n
    pairs, are weighed n: the loss is the sum of the n pairs' negative-sampling losses.

    bag_ids       IndexInput of at least the longest word's rows: the centre's bag.
    bag_offsets   IndexInput of 2 offsets: the bag is bag_ids[bag_offsets[0]:bag_offsets[1]].
    scored        IndexInput of 2 * window + k ids: the window's words (padded with id 0),
                  then the k negatives.
    weights       Input of 2 * window + k values: 1 for each word of the window, 0 for
                  padding, then n (the window's words) for each negative.
    subword_ids, subword_offsets  each word id's input rows, as `SubwordSkipGramSampler`'s.

    >>> scores = fa.bag_dot(W, bag, cut, C, fa.reshape(scored, (1, -1)), hidden_gradient=True)
    >>> loss = fa.sum(fa.nn.bce_with_logits(scores, labels, reduction="none") * weights)
    """
    cdef int64_t* out_all
    cdef char* out_all_weights
    cdef bint all_weights_f64

    def __init__(self, tokens, bag_ids, bag_offsets, scored, weights, *, subword_ids, subword_offsets,
                 mask=None, sentence_ends=None, window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, counts=None,
                 seed=None, rank=0, workers=1, claim=None, block_tokens=10_000):
        who = "SubwordSharedNegativeSampler"
        if mask is not None:
            raise ValueError(f"{who}: an example is one window, which needs no mask; give mask=None")
        slots = 2 * check_int(who, "window", window, 1)
        self.out_all = _index_leaf(who, "scored", scored, -1)
        negative = (<Variable>scored).size - slots
        if negative < 1:
            raise ValueError(f"{who}: scored must hold 2 * window = {slots} ids of the window and at "
                             f"least one negative, got {(<Variable>scored).size}")
        self.out_all_weights = _input_leaf(who, "weights (2 * window + k)", weights, slots + negative)
        self.all_weights_f64 = (<Variable>weights).f64
        if _bag_count(who, bag_offsets) != 1:
            raise ValueError(f"{who}: bag_offsets must hold 2 offsets (one centre's bag), got "
                             f"{(<Variable>bag_offsets).size}")
        self.mean = False
        self.read_window(who, tokens, IndexInput(np.zeros(slots, dtype=np.int64)),
                         Input(np.zeros(slots, dtype=np.float32)),
                         IndexInput(np.zeros(1 + negative, dtype=np.int64)), None, sentence_ends, window,
                         ns_exponent, sample, vocab_size, counts, seed, rank, workers, claim, block_tokens)
        self.ahead = np.zeros(self.negative, dtype=np.int64)
        self.bags = _SubwordBags(who, bag_ids, bag_offsets, 1, 1, subword_ids, subword_offsets,
                                 self.vocab_size)
        self.bagged = self.leaves           # the window sampler's own leaves, which this one copies
        self.leaves = (bag_ids, bag_offsets, scored, weights)

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """The window's words and the negatives into `scored`, with their weights, and the
        centre's bag."""
        cdef Py_ssize_t j, n
        if not SharedNegativeSampler.draw_item(self, 0):
            return False
        n = self.window_hi - self.window_lo - 1
        for j in range(self.slots):
            self.out_all[j] = self.out_context[j]
            _put_weight(self.out_all_weights, self.all_weights_f64, j, 1.0 if j < n else 0.0)
        for j in range(self.negative):
            self.out_all[self.slots + j] = self.out_scored[1 + j]
            _put_weight(self.out_all_weights, self.all_weights_f64, self.slots + j, <double>n)
        self.bags.begin(0)
        self.bags.add_word(0, self.out_scored[0])
        return True


cdef Py_ssize_t _bag_count(str who, object bag_offsets) except -1:
    """The items of an example: one fewer than the bag offsets."""
    if not isinstance(bag_offsets, IndexInput) or (<Variable>bag_offsets).size < 2:
        raise ValueError(f"{who}: bag_offsets must be an IndexInput of B + 1 >= 2 offsets (B bags an "
                         f"example), got {bag_offsets!r}")
    return (<Variable>bag_offsets).size - 1
