"""Word2Vec streams its corpus: a vocabulary pass keeps nothing per token, and each epoch
encodes the corpus block by block (`fa.data.TokenStream`) as it trains; gensim's
build_vocab/train calls; the stream's blocks, claims and failures."""
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

import fastad as fa
from fastad.data import TokenStream, count_words


class OnlyIterable:
    """A corpus that can only be iterated (no len, no indexing): each pass generates its
    sentences anew, from a seeded stream, as a reader of a file would."""

    def __init__(self, sentences, words=200, length=20, seed=0):
        self.sentences, self.words, self.length, self.seed = sentences, words, length, seed
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        rng = np.random.default_rng(self.seed)
        vocabulary = np.array([f"w{i}" for i in range(self.words)], dtype=object)
        ranks = np.arange(1, self.words + 1)
        p = 1.0 / ranks ** 1.1
        p /= p.sum()
        for _ in range(self.sentences):
            yield vocabulary[rng.choice(self.words, self.length, p=p)].tolist()


SETTINGS = dict(dim=8, window=2, negative=2, min_count=1, sample=0, epochs=2, seed=4)


def test_an_iterable_without_len_trains_as_the_same_list_does():
    corpus = OnlyIterable(300)
    streamed = fa.models.Word2Vec(**SETTINGS).fit(corpus)
    assert corpus.passes == 1 + SETTINGS["epochs"]          # the vocabulary pass, then an epoch a pass
    listed = fa.models.Word2Vec(**SETTINGS).fit(list(OnlyIterable(300)))
    assert streamed.words == listed.words and np.array_equal(streamed.vectors, listed.vectors)
    assert streamed.corpus_count == 300 and streamed.corpus_total_words == 300 * 20
    assert all(np.isfinite(streamed.history)) and streamed.history[-1] < streamed.history[0]


def test_a_one_shot_iterator_is_refused_before_anything_runs():
    model = fa.models.Word2Vec(**SETTINGS)
    with pytest.raises(TypeError, match="one-shot iterator.*generator"):
        model.fit(iter(OnlyIterable(10)))
    with pytest.raises(TypeError, match="one-shot iterator"):
        model.fit(sentence for sentence in OnlyIterable(10))
    assert model.vectors is None and model.words == []


FORMS = {"pairs": {}, "cbow": {"sg": False}, "shared negatives": {"shared_negatives": True}}


def _fit_peak(sentences, form):
    tracemalloc.start()
    try:
        fa.models.Word2Vec(dim=16, window=2, negative=2, min_count=1, epochs=1, **FORMS[form]).fit(
            OnlyIterable(sentences, 1000, 100))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("form", ["pairs", "shared negatives"])
def test_memory_depends_on_the_vocabulary_not_the_tokens(form):
    # (a run over more tokens with the same min_count keeps more words, and so more rows:
    # issue 55's growth from 10 M to 30 M streamed tokens was that, 99,139 -> 172,738 words)
    small, large = _fit_peak(1_000, form), _fit_peak(8_000, form)    # 100,000 and 800,000 tokens, 1,000 words
    vectors = 2 * 1000 * 16 * 4
    # what is held: the vectors, the vocabulary, the sampler's tables, a block of ids, a
    # sentence; the whole corpus as int32 would be 3.2 MB, as the old int64 ids 6.4 MB
    assert large < 1.1 * small and large < vectors + 1_500_000, (small, large)


class PassesTraced(OnlyIterable):
    """`passes` passes of the same sentences in one pass of the corpus (one epoch streams
    them all), each token a new str (as a reader of a file splits them from a line),
    noting the bytes tracemalloc sees alive at the end of each pass."""

    def __init__(self, passes, sentences):
        super().__init__(sentences, words=1000, length=100)
        self.passes_an_epoch, self.alive = passes, []

    def __iter__(self):
        for _ in range(self.passes_an_epoch):
            for sentence in super().__iter__():
                yield " ".join(sentence).split()
            self.alive.append(tracemalloc.get_traced_memory()[0])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_streaming_keeps_nothing_per_token_or_sentence_across_an_epoch(form):
    model = fa.models.Word2Vec(dim=8, window=5, negative=2, min_count=1, epochs=1, **FORMS[form])
    model.build_vocab(OnlyIterable(1_000, words=1000, length=100))
    corpus = PassesTraced(4, 1_000)
    tracemalloc.start()
    try:
        model.train(corpus, total_words=400_000)
    finally:
        tracemalloc.stop()
    # 300,000 tokens in 3,000 sentences and 30 blocks after the first pass's end: a byte
    # kept for every 20 tokens, or a list's slot for every sentence, would break the bound
    # (what grows, about 2 KB, is this corpus's list and the interpreter's free lists)
    assert max(corpus.alive) - corpus.alive[0] < 16_000, corpus.alive


def test_build_vocab_then_train_is_fit_and_gensims_calls_work():
    corpus = OnlyIterable(200)
    fitted = fa.models.Word2Vec(**SETTINGS).fit(corpus)
    model = fa.models.Word2Vec(**SETTINGS)
    assert model.build_vocab(corpus_iterable=corpus) is model
    assert model.train(corpus, total_examples=model.corpus_count, epochs=model.epochs) is model
    assert np.array_equal(model.vectors, fitted.vectors) and model.history == fitted.history
    built = fa.models.Word2Vec(sentences=corpus, vector_size=8, window=2, negative=2, min_count=1, sample=0,
                               epochs=2, seed=4)                 # gensim trains at construction
    assert np.array_equal(built.vectors, fitted.vectors)


def test_train_continues_from_the_vectors_and_skips_unknown_words(tmp_path):
    corpus = OnlyIterable(100)
    model = fa.models.Word2Vec(**SETTINGS).fit(corpus)
    path = tmp_path / "w2v.model"
    model.save(path)
    loaded = fa.models.Word2Vec.load(path)
    assert (loaded.corpus_count, loaded.corpus_total_words) == (100, 2000)
    before = loaded.vectors.copy()
    with pytest.warns(RuntimeWarning, match="nothing was trained"):
        loaded.train([["hello", "world"]], total_examples=1, epochs=1)
    assert np.array_equal(loaded.vectors, before) and loaded.words == model.words
    loaded.train(corpus, epochs=1, start_alpha=0.01, end_alpha=0.001)
    assert not np.array_equal(loaded.vectors, before) and len(loaded.history) == 1


def test_train_needs_a_vocabulary_and_checks_its_arguments():
    with pytest.raises(RuntimeError, match="build_vocab"):
        fa.models.Word2Vec().train([["a", "b"]])
    model = fa.models.Word2Vec(**SETTINGS).build_vocab([["a", "b", "c"]] * 3)
    with pytest.raises(TypeError, match="sentences .* or as corpus_file"):
        model.train()
    with pytest.raises(ValueError, match="epochs"):
        model.train([["a", "b"]], epochs=0)
    with pytest.raises(ValueError, match="end_alpha"):
        model.train([["a", "b"]], start_alpha=0.01, end_alpha=0.1)


@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_a_bad_sentence_mid_corpus_stops_fit_and_keeps_the_model(start_method):
    class Broken:
        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            for k in range(40):
                yield ["a", "b", "c", "d"]
            if self.passes > 1:          # the vocabulary pass reads a good corpus; training does not
                yield "a b c"

    model = fa.models.Word2Vec(**dict(SETTINGS, workers=2)).fit(OnlyIterable(50), start_method="threads")
    words, vectors = model.words, model.vectors
    with pytest.raises(Exception, match="sentence 40 is a string"):
        model.fit(Broken(), start_method=start_method)
    assert model.words == words and model.vectors is vectors


def test_a_failing_corpus_raises_out_of_fa_train():
    class Failing:
        def __iter__(self):
            yield ["a", "b", "c"]
            raise OSError("disk gone")

    W, C = fa.Parameter(np.zeros((3, 4))), fa.Parameter(np.zeros((3, 4)))
    centre, context = fa.IndexInput([0]), fa.IndexInput([[0, 0]])
    loss = fa.sum(fa.gather_dot(W, centre, C, context))
    stream = TokenStream(Failing(), {"a": 0, "b": 1, "c": 2}, total_tokens=3)
    sampler = fa.data.SkipGramSampler(stream, centre, context, counts=[1, 1, 1], seed=0)
    with pytest.raises(OSError, match="disk gone"):
        fa.train(loss, fa.optim.SGD([W, C], lr=0.1), sampler)
    with pytest.raises(OSError, match="disk gone"):
        list(sampler.epoch())


def test_count_words_counts_in_first_seen_order_and_refuses_strings():
    words, counts, tokens, sentences = count_words([["b", "a", "b"], (), ("c", "b")])
    assert words == ["b", "a", "c"] and counts.tolist() == [3, 1, 1] and (tokens, sentences) == (5, 3)
    assert counts.dtype == np.int64
    with pytest.raises(TypeError, match="sentence 1 is a string"):
        count_words([["a"], "a b"])
    with pytest.raises(TypeError, match="sentence 0 must be a list of tokens, got int"):
        count_words([3])


def test_the_stream_cuts_blocks_at_sentence_ends_and_drops_unknown_words():
    sentences = [["a", "x", "b"], ["b"], ["c", "a", "a", "y"], ["b", "c"]]
    stream = TokenStream(sentences, {"a": 0, "b": 1, "c": 2}, block_tokens=4)
    assert stream.total_tokens == 10               # counted by a pass when not given
    blocks = [(ids.tolist(), ends.tolist()) for ids, ends in stream.blocks()]
    # a block ends with the sentence that reaches 4 tokens: [3 + 1], [4], [2]
    assert blocks == [([0, 1, 1], [2, 3]), ([2, 0, 0], [3]), ([1, 2], [2])]
    assert all(ids.dtype == np.int32 for ids, _ in stream.blocks())


def test_streams_sharing_a_claim_counter_read_each_block_once():
    sentences = [[f"w{(k * 7 + j) % 50}" for j in range(k % 9 + 1)] for k in range(300)]
    vocabulary = {f"w{i}": i for i in range(50)}
    whole = [ids.tolist() for ids, _ in TokenStream(sentences, vocabulary, block_tokens=60).blocks()]
    claim = np.zeros(1, dtype=np.int64)
    streams = [TokenStream(sentences, vocabulary, block_tokens=60, claim=claim) for _ in range(2)]
    passes = [stream.blocks() for stream in streams]
    taken = [[], []]
    turn = 0
    while passes:                                # the two readers alternate, as two workers would
        k = turn % len(passes)
        try:
            taken[k].append(next(passes[k])[0].tolist())
        except StopIteration:
            passes.pop(k)
        turn += 1
    assert len(whole) > 4 and taken[0] and taken[1]
    assert sorted(taken[0] + taken[1]) == sorted(whole)


def test_the_stream_checks_its_arguments():
    with pytest.raises(TypeError, match="one-shot iterator"):
        TokenStream(iter([["a"]]), {"a": 0})
    with pytest.raises(TypeError, match="vocabulary must be a dict"):
        TokenStream([["a"]], ["a"])
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 2\*\*31\)"):
        TokenStream([["a"]], {"a": -1})
    with pytest.raises(ValueError, match="block_tokens"):
        TokenStream([["a"]], {"a": 0}, block_tokens=0)
    with pytest.raises(TypeError, match="claim must be a writable, contiguous int64"):
        TokenStream([["a"]], {"a": 0}, claim=np.zeros(1))
    stream = TokenStream([["a", "b"]], {"a": 0, "b": 1})
    centre, context = fa.IndexInput([0]), fa.IndexInput([0, 0])
    with pytest.raises(ValueError, match="a TokenStream needs counts"):
        fa.data.SkipGramSampler(stream, centre, context)
    with pytest.raises(ValueError, match="sentence_ends and claim must be None"):
        fa.data.SkipGramSampler(stream, centre, context, counts=[1, 1], sentence_ends=[2])
    with pytest.raises(ValueError, match="holds id 1, out of range for vocab_size 1"):
        fa.data.SkipGramSampler(stream, centre, context, counts=[1])
    with pytest.raises(ValueError, match="counts must hold one count for each of the 2"):
        fa.data.SkipGramSampler(stream, centre, context, counts=[1, 1, 1], vocab_size=2)


def test_an_int32_memory_map_of_ids_trains_without_a_copy(tmp_path):
    ids = np.lib.format.open_memmap(tmp_path / "ids.npy", mode="w+", dtype=np.int32, shape=(2000,))
    ids[:] = np.random.default_rng(0).integers(0, 20, 2000)
    ids.flush()
    W, C = fa.Parameter(np.zeros((20, 4))), fa.Parameter(np.full((20, 4), 0.1))
    centre, context = fa.IndexInput([0]), fa.IndexInput([[0, 0, 0]])
    loss = fa.sum(fa.gather_dot(W, centre, C, context))
    mapped = np.load(tmp_path / "ids.npy", mmap_mode="r")
    sampler = fa.data.SkipGramSampler(mapped, centre, context, window=2, seed=0)
    fa.train(loss, fa.optim.SGD([W, C], lr=0.01), sampler)
    assert sampler.epoch_pairs > 2000 and np.abs(W.numpy()).sum() > 0


def _encoded(tmp_path, sentences):
    corpus = list(OnlyIterable(sentences, 300, 25, seed=2))
    words = sorted({w for s in corpus for w in s}, key=lambda w: int(w[1:]))
    index = {w: i for i, w in enumerate(words)}
    ids = np.lib.format.open_memmap(tmp_path / f"ids{sentences}.npy", mode="w+", dtype=np.int32,
                                    shape=(25 * sentences,))
    ids[:] = [index[w] for s in corpus for w in s]
    ids.flush()
    ends = np.arange(25, 25 * sentences + 1, 25)
    return np.load(tmp_path / f"ids{sentences}.npy", mmap_mode="r"), words, ends, corpus


def test_an_encoded_corpus_trains_in_place_from_a_memory_map(tmp_path):
    ids, words, ends, corpus = _encoded(tmp_path, 400)
    model = fa.models.Word2Vec(**SETTINGS).fit(fa.models.EncodedCorpus(ids, words, ends))
    assert model.words == words and model.vectors.shape == (len(words), SETTINGS["dim"])
    assert model.counts.tolist() == np.bincount(ids, minlength=len(words)).tolist()
    assert (model.corpus_count, model.corpus_total_words) == (400, 25 * 400)
    assert all(np.isfinite(model.history)) and model.history[-1] < model.history[0]
    threads = fa.models.Word2Vec(**dict(SETTINGS, workers=2)).fit(
        fa.models.EncodedCorpus(ids, words, ends), start_method="threads")
    assert threads.words == words and all(np.isfinite(threads.history))
    # the memory map is read in place: what the fit allocates does not grow with the ids
    peaks = []
    for sentences in (4000, 32000):           # 100,000 and 800,000 ids
        ids, words, ends, _ = _encoded(tmp_path, sentences)
        tracemalloc.start()
        fa.models.Word2Vec(**dict(SETTINGS, epochs=1)).fit(fa.models.EncodedCorpus(ids, words, ends))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.2 * peaks[0] and peaks[1] < 800_000 * 4, peaks     # the ids as int32: 3.2 MB


def test_an_encoded_corpus_checks_its_arguments():
    with pytest.raises(ValueError, match="ids must be a non-empty 1-D integer array"):
        fa.models.EncodedCorpus(np.zeros(3), ["a", "b"])
    with pytest.raises(ValueError, match="words must name at least 2 ids, each once"):
        fa.models.EncodedCorpus([0, 1], ["a", "a"])
    with pytest.raises(ValueError, match="sentence_ends must be non-decreasing offsets ending at len"):
        fa.models.EncodedCorpus([0, 1, 1], ["a", "b"], [2])
    with pytest.raises(ValueError, match=r"ids holds 5, outside \[0, 2\)"):
        fa.models.Word2Vec(**SETTINGS).fit(fa.models.EncodedCorpus([0, 1, 5], ["a", "b"]))
