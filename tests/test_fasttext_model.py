"""fa.models.FastText (subword word vectors), its node fa.bag_dot, its samplers and
fa.text.subword_table: against gensim's n-gram buckets, float64 NumPy steps and finite
differences, and its bad inputs."""
import itertools
import os
import warnings

import numpy as np
import pytest

import fastad as fa
from fastad.models.text.fasttext import FastText


def corpus(n_sentences=300, seed=0):
    """Sentences over words sharing stems (so n-grams carry meaning), restartable (a list)."""
    rng = np.random.default_rng(seed)
    stems = ["walk", "talk", "play", "jump", "read", "sing", "cook", "swim"]
    words = [s + end for s in stems for end in ("", "s", "ed", "ing")]
    return [[words[j] for j in rng.integers(0, len(words), 10)] for _ in range(n_sentences)]


WORDS = ["where", "a", "naïve", "日本語", "banana", "aaaa", "x", "hello-world", "São", "über", "ab",
         "internationalization", "q", "</s>", "e\u0301"]


# ---------------------------------------------------------------- the n-gram rows

def test_subword_rows_equal_gensims():
    ft = pytest.importorskip("gensim.models.fasttext")
    rng = np.random.default_rng(1)
    alphabet = list("abcdefghijklmnopqrstuvwxyzéüßж日本") + ["-"]
    words = WORDS + ["".join(rng.choice(alphabet, rng.integers(1, 14))) for _ in range(300)]
    words = list(dict.fromkeys(words))
    for min_n, max_n, bucket in ((3, 6, 2_000_000), (1, 3, 1000), (2, 2, 7)):
        ids, offsets = fa.text.subword_table(words, min_n, max_n, bucket)
        for k, word in enumerate(words):
            rows = ids[offsets[k]:offsets[k + 1]]
            assert rows[0] == k
            expected = np.array(ft.ft_ngram_hashes(word, min_n, max_n, bucket), dtype=np.int64)
            np.testing.assert_array_equal(rows[1:] - len(words), expected, err_msg=word)


def test_a_models_buckets_equal_gensims_buckets_word():
    gensim_ft = pytest.importorskip("gensim.models")
    sentences = corpus(50)
    peer = gensim_ft.FastText(vector_size=8, min_count=1, bucket=5000, min_n=2, max_n=5)
    peer.build_vocab(sentences)
    model = FastText(dim=8, min_count=1, bucket=5000, min_n=2, max_n=5).build_vocab(sentences)
    for k, word in enumerate(model.words):
        rows = model.subword_ids[model.subword_offsets[k]:model.subword_offsets[k + 1]]
        np.testing.assert_array_equal(model.ngram_buckets[rows[1:] - len(model.words)],
                                      peer.wv.buckets_word[peer.wv.key_to_index[word]])
    assert model.vectors.shape == (len(model.words) + model.ngram_buckets.size, 8)
    assert np.array_equal(np.unique(np.concatenate(peer.wv.buckets_word)), model.ngram_buckets)


# ---------------------------------------------------------------- bag_dot

def bag_case(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    A0, B0 = rng.normal(size=(12, 5)).astype(dtype), rng.normal(size=(7, 5)).astype(dtype)
    ids, offsets = [3, 5, 3, 11, 1, 9, 0], [0, 4, 6]            # bag 0 repeats row 3; one id past the bags
    b_ids = [[1, 2, 2], [0, 6, 1]]
    return A0, B0, ids, offsets, b_ids


def numpy_bag_grads(A0, B0, ids, offsets, b_ids, G, hidden_gradient):
    hidden = np.stack([A0[ids[lo:hi]].mean(0) for lo, hi in zip(offsets[:-1], offsets[1:])])
    gA, gB = np.zeros_like(A0), np.zeros_like(B0)
    for b, (lo, hi) in enumerate(zip(offsets[:-1], offsets[1:])):
        gh = (G[b][:, None] * B0[b_ids[b]]).sum(0)
        for k in ids[lo:hi]:
            gA[k] += gh if hidden_gradient else gh / (hi - lo)
        for j, t in enumerate(b_ids[b]):
            gB[t] += G[b, j] * hidden[b]
    return np.einsum("bd,bjd->bj", hidden, B0[np.array(b_ids)]), gA, gB


@pytest.mark.parametrize("hidden_gradient", [False, True])
def test_bag_dot_values_and_gradients(hidden_gradient):
    A0, B0, ids, offsets, b_ids = bag_case()
    G = np.random.default_rng(3).normal(size=(2, 3))
    A, B = fa.Parameter(A0.copy(), dtype=np.float64), fa.Parameter(B0.copy(), dtype=np.float64)
    out = fa.bag_dot(A, ids, offsets, B, b_ids, hidden_gradient=hidden_gradient)
    fa.sum(out * fa.Input(G, dtype=np.float64)).backward()
    values, gA, gB = numpy_bag_grads(A0, B0, ids, offsets, b_ids, G, hidden_gradient)
    np.testing.assert_allclose(out.value, values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(A.grad), gA, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(B.grad), gB, rtol=1e-12, atol=1e-12)


def test_bag_dot_exact_gradient_matches_finite_differences():
    A0, B0, ids, offsets, b_ids = bag_case()
    G = np.random.default_rng(4).normal(size=(2, 3))

    def f(A_value, B_value):
        return float(np.sum(fa.bag_dot(fa.Parameter(A_value, dtype=np.float64), ids, offsets,
                                       fa.Parameter(B_value, dtype=np.float64), b_ids).value * G))

    A, B = fa.Parameter(A0.copy(), dtype=np.float64), fa.Parameter(B0.copy(), dtype=np.float64)
    fa.sum(fa.bag_dot(A, ids, offsets, B, b_ids) * fa.Input(G, dtype=np.float64)).backward()
    eps = 1e-6
    for table, grad, other in ((A0, np.asarray(A.grad), B0), (B0, np.asarray(B.grad), A0)):
        numeric = np.zeros_like(table)
        for index in np.ndindex(table.shape):
            up, down = table.copy(), table.copy()
            up[index] += eps
            down[index] -= eps
            args = (up, other) if table is A0 else (other, up)
            args_down = (down, other) if table is A0 else (other, down)
            numeric[index] = (f(*args) - f(*args_down)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_bag_dot_float32():
    A0, B0, ids, offsets, b_ids = bag_case(np.float32)
    out = fa.bag_dot(fa.Parameter(A0, dtype=np.float32), ids, offsets, fa.Parameter(B0, dtype=np.float32), b_ids)
    values = numpy_bag_grads(A0.astype(np.float64), B0.astype(np.float64), ids, offsets, b_ids,
                             np.zeros((2, 3)), False)[0]
    assert out.value.dtype == np.float32
    np.testing.assert_allclose(out.value, values, rtol=1e-5, atol=1e-5)


def test_bag_dot_bad_input():
    A0, B0, ids, offsets, b_ids = bag_case()
    A, B = fa.Parameter(A0), fa.Parameter(B0)
    with pytest.raises(ValueError, match="bag_offsets"):
        fa.bag_dot(A, ids, [0, 4, 4], B, b_ids)                   # an empty bag
    with pytest.raises(ValueError, match="bag_offsets"):
        fa.bag_dot(A, ids, [0, 4, 9], B, b_ids)                   # past bag_ids
    with pytest.raises(ValueError, match="b_ids"):
        fa.bag_dot(A, ids, [0, 4, 6], B, [[1, 2, 2]])
    with pytest.raises(IndexError, match="id 12 at position 1"):
        fa.bag_dot(A, [3, 12, 0], [0, 2], B, [[1]])
    with pytest.raises(IndexError):
        fa.bag_dot(A, ids, offsets, B, [[1, 2, 7], [0, 0, 0]])
    with pytest.raises(TypeError, match="hidden_gradient"):
        fa.bag_dot(A, ids, offsets, B, b_ids, hidden_gradient="yes")
    cuts = fa.IndexInput(offsets)
    out = fa.bag_dot(A, ids, cuts, B, b_ids)
    cuts.set_value([0, 6, 4])
    with pytest.raises(ValueError, match="rise strictly"):
        out.forward()


# ---------------------------------------------------------------- the samplers

def small_vocabulary():
    words = ["walk", "walks", "talked", "a", "sing"]
    ids, offsets = fa.text.subword_table(words, 3, 5, 100)
    tokens = np.random.default_rng(5).integers(0, len(words), 200).astype(np.int32)
    return words, ids, offsets, tokens


def test_subword_skipgram_sampler_writes_the_centres_rows():
    words, ids, offsets, tokens = small_vocabulary()
    longest = int(np.diff(offsets).max())
    bag, cut = fa.IndexInput([0] * longest), fa.IndexInput([0, 0])
    ctx = fa.IndexInput([[0] * 4])
    sampler = fa.data.SubwordSkipGramSampler(tokens, bag, cut, ctx, subword_ids=ids, subword_offsets=offsets,
                                             window=3, seed=7)
    plain = fa.data.SkipGramSampler(tokens, fa.IndexInput([0]), fa.IndexInput([[0] * 4]), window=3, seed=7)
    assert sampler.leaves == (bag, cut, ctx)
    examples, plain_examples = list(sampler.epoch()), list(plain.epoch())
    assert len(examples) == len(plain_examples) > 100
    for (bag_value, cut_value, ctx_value), (centre, ctx_plain) in zip(examples, plain_examples):
        word = int(centre[0])
        assert cut_value.tolist() == [0, offsets[word + 1] - offsets[word]]
        np.testing.assert_array_equal(bag_value[:cut_value[1]], ids[offsets[word]:offsets[word + 1]])
        np.testing.assert_array_equal(ctx_value, ctx_plain)


def test_subword_cbow_sampler_writes_the_windows_rows_in_batches():
    words, ids, offsets, tokens = small_vocabulary()
    window, items = 2, 3
    longest = int(np.diff(offsets).max())
    bag, cut = fa.IndexInput([0] * (items * 2 * window * longest)), fa.IndexInput([0] * (items + 1))
    target, mask = fa.IndexInput([[0] * 3] * items), fa.Input(np.ones(items))
    sampler = fa.data.SubwordCbowSampler(tokens, bag, cut, target, subword_ids=ids, subword_offsets=offsets,
                                         window=window, mask=mask, seed=3)
    plain = fa.data.CbowSampler(tokens, fa.IndexInput([0] * (items * 2 * window)),
                                fa.Input(np.zeros(items * 2 * window)), fa.IndexInput([[0] * 3] * items),
                                window=window, mask=fa.Input(np.ones(items)), seed=3)
    seen = 0
    for (bag_value, cut_value, target_value, _), (context, weights, plain_target, plain_mask) in \
            zip(sampler.epoch(), plain.epoch()):
        np.testing.assert_array_equal(target_value, plain_target)
        for b in range(items):
            n = int(np.count_nonzero(weights[b * 2 * window:(b + 1) * 2 * window]))
            words_of = context[b * 2 * window:b * 2 * window + n]
            expected = np.concatenate([ids[offsets[w]:offsets[w + 1]] for w in words_of])
            np.testing.assert_array_equal(bag_value[cut_value[b]:cut_value[b + 1]], expected)
        seen += int(plain_mask.sum())
    assert seen == sampler.epoch_centres > 50


def test_subword_samplers_refuse_bad_tables():
    words, ids, offsets, tokens = small_vocabulary()
    longest = int(np.diff(offsets).max())
    ctx = fa.IndexInput([[0] * 4])
    with pytest.raises(ValueError, match="bag_ids must hold the longest bags"):
        fa.data.SubwordSkipGramSampler(tokens, fa.IndexInput([0] * (longest - 1)), fa.IndexInput([0, 0]), ctx,
                                       subword_ids=ids, subword_offsets=offsets)
    with pytest.raises(ValueError, match="subword_offsets"):
        fa.data.SubwordSkipGramSampler(tokens, fa.IndexInput([0] * longest), fa.IndexInput([0, 0]), ctx,
                                       subword_ids=ids, subword_offsets=offsets[:-1])
    with pytest.raises(ValueError, match="subword_ids"):
        fa.data.SubwordSkipGramSampler(tokens, fa.IndexInput([0] * longest), fa.IndexInput([0, 0]), ctx,
                                       subword_ids=ids.astype(np.int64), subword_offsets=offsets)
    with pytest.raises(ValueError, match="bag_offsets"):
        fa.data.SubwordCbowSampler(tokens, fa.IndexInput([0] * longest), fa.IndexInput([0]), ctx,
                                   subword_ids=ids, subword_offsets=offsets)


# ---------------------------------------------------------------- one step against NumPy

def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("sg", [True, False])
def test_one_epoch_equals_a_float64_numpy_walk_of_the_update(sg):
    """Two words in one sentence, window 1, a constant lr: the examples are known, and each
    of their k negatives is one of the two words (a draw equal to the example's word kept),
    so the epoch must equal exactly one numpy walk of the (k + 1) ** 2 multisets of the two
    examples' negatives (their order within an example does not change the step). Each example: h =
    mean of the bag rows; every bag row takes -lr * the hidden's gradient (fastText's
    update), each output row -lr * g * h."""
    words, k, lr = ["walking", "talks"], 2, 0.4
    model = FastText(dim=6, window=1, negative=k, min_count=1, sample=0, epochs=1, lr=lr, min_lr=lr, sg=sg,
                     bucket=50, min_n=3, max_n=4, seed=2)
    model.build_vocab([words])
    assert model.words == words
    W0, C0 = model.vectors.astype(np.float64), model.output.astype(np.float64)
    rows = [model.subword_ids[model.subword_offsets[w]:model.subword_offsets[w + 1]] for w in range(2)]

    def walk(negatives):
        W, C = W0.copy(), C0.copy()
        # skip-gram: (centre 0, word 1), (centre 1, word 0); CBOW: (context [1], centre 0), ([0], 1)
        for first in (0, 1):
            other = 1 - first
            bag, target = (rows[first], other) if sg else (rows[other], first)
            h = W[bag].mean(axis=0)
            targets = [target] + list(negatives[first])
            labels = np.array([1.0] + [0.0] * k)
            g = sigmoid(C[targets] @ h) - labels
            grad_h = g @ C[targets]
            for t, gt in zip(targets, g):
                C[t] -= lr * gt * h
            for row in bag:
                W[row] -= lr * grad_h
        return W, C

    model.train([words], total_words=2)
    assert model.history and np.isfinite(model.history[0])
    multisets = list(itertools.combinations_with_replacement((0, 1), k))
    matches = [negatives for negatives in itertools.product(multisets, repeat=2)
               if all(np.allclose(mine, theirs, rtol=1e-5, atol=1e-6)
                      for mine, theirs in zip((model.vectors, model.output), walk(negatives)))]
    assert len(matches) == 1, matches


# ---------------------------------------------------------------- the model

def test_unseen_words_take_the_mean_of_their_ngram_rows():
    model = FastText(dim=8, min_count=1, epochs=1, bucket=1000, seed=1).fit(corpus(100))
    for word in ("walker", "swimmingly", "talk"):
        ids, _ = fa.text.subword_table([word], 3, 6, 1000)
        expected = model.vectors_ngrams[ids[1:] - 1].mean(axis=0)
        if word in model.index:
            k = model.index[word]
            expected = model.vectors[model.subword_ids[model.subword_offsets[k]:model.subword_offsets[k + 1]]
                                     ].mean(axis=0)
        np.testing.assert_allclose(model.wv[word], expected, rtol=1e-6, atol=1e-7)
    assert "walker" in model.wv and "walker" not in model
    assert model.wv.most_similar("walker", topn=3)[0][0] in model.words
    assert -1 <= model.similarity("walker", "walks") <= 1
    short = FastText(dim=8, min_count=1, epochs=1, bucket=1000, min_n=5, max_n=6).fit(corpus(20))
    with pytest.raises(KeyError, match="'ab'"):
        short.wv["ab"]                           # "<ab>" has no n-gram of 5 or 6 characters


def test_gensims_word_vectors_rule():
    model = FastText(dim=8, min_count=1, epochs=1, bucket=500, seed=3).fit(corpus(50))
    k = model.index["walked"]
    rows = model.subword_ids[model.subword_offsets[k]:model.subword_offsets[k + 1]]
    np.testing.assert_allclose(model.wv["walked"], model.vectors[rows].mean(axis=0), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(model.vectors_vocab, model.vectors[:len(model.words)])
    assert model.vectors_ngrams.shape == (500, 8) and model.vectors.dtype == np.float32


def test_one_worker_is_deterministic_and_the_loss_falls():
    sentences = corpus()
    a = FastText(dim=16, min_count=1, epochs=4, bucket=2000, seed=5, sample=0).fit(sentences)
    b = FastText(dim=16, min_count=1, epochs=4, bucket=2000, seed=5, sample=0).fit(sentences)
    np.testing.assert_array_equal(a.vectors, b.vectors)
    np.testing.assert_array_equal(a.output, b.output)
    assert a.history[-1] < a.history[0] - 0.1
    cbow = FastText(dim=16, min_count=1, epochs=4, bucket=2000, seed=5, sg=False, window=3).fit(sentences)
    assert cbow.history[-1] < cbow.history[0]


def test_heldout_loss_falls_with_training():
    """The mean held-out skip-gram loss over the subword-composed centre vectors: lower after
    training than at the start."""
    sentences = corpus(600, seed=7)
    train, held = sentences[:500], sentences[500:]

    def heldout(model):
        vectors, loss, n = model.word_vectors(), 0.0, 0
        rng = np.random.default_rng(0)
        for sentence in held:
            for i, word in enumerate(sentence):
                for j in range(max(0, i - 2), min(len(sentence), i + 3)):
                    if j == i:
                        continue
                    h, noise = vectors[model.index[word]], rng.integers(0, len(model.words), 5)
                    loss += np.logaddexp(0, -model.output[model.index[sentence[j]]] @ h)
                    loss += np.logaddexp(0, model.output[noise] @ h).sum()
                    n += 1
        return loss / n

    untrained = FastText(dim=16, min_count=1, window=2, bucket=3000, seed=1).build_vocab(train)
    trained = FastText(dim=16, min_count=1, window=2, epochs=3, bucket=3000, seed=1, sample=0).fit(train)
    assert heldout(trained) < heldout(untrained) - 0.3


def test_hogwild_threads_and_batches_train():
    sentences = corpus()
    for kwargs in (dict(workers=2, start_method="threads"), dict(batch_size=4)):
        fit_kwargs = {k: v for k, v in kwargs.items() if k != "workers"}
        model = FastText(dim=8, min_count=1, epochs=2, bucket=1000, sample=0, seed=2,
                         workers=kwargs.get("workers", 1))
        model.build_vocab(sentences)
        start = model.vectors.copy()
        model.train(sentences, total_words=model.corpus_total_words, **fit_kwargs)
        assert len(model.history) == 2 and all(np.isfinite(model.history))
        if model.workers == 1:
            # two threads' epochs over words drawn at random need not fall (their order is the
            # threads'): the loss falling is test_heldout_loss_falls_with_training's
            assert model.history[1] < model.history[0]
        assert not np.array_equal(model.vectors, start)


def test_save_load_round_trip_and_bad_files(tmp_path):
    model = FastText(dim=8, min_count=1, epochs=1, bucket=300, min_n=2, max_n=4, sg=False,
                     seed=4).fit(corpus(50))
    path = str(tmp_path / "ft.npz")
    model.save(path)
    back = FastText.load(path)
    assert (back.words, back.min_n, back.max_n, back.bucket, back.sg) == (model.words, 2, 4, 300, False)
    np.testing.assert_array_equal(back.vectors, model.vectors)
    np.testing.assert_array_equal(back.subword_ids, model.subword_ids)
    np.testing.assert_array_equal(back.wv["walkings"], model.wv["walkings"])
    back.train(corpus(10), epochs=1)                    # a loaded model trains on
    with open(path, "r+b") as f:
        f.seek(40)
        f.write(b"\0" * 64)
    with pytest.raises(ValueError):
        FastText.load(path)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="garbage"):
        FastText.load(str(garbage))
    w2v_path = str(tmp_path / "w2v.npz")
    fa.models.Word2Vec(dim=8, min_count=1, epochs=1).fit(corpus(20)).save(w2v_path)
    with pytest.raises(ValueError, match="not a saved FastText"):
        FastText.load(w2v_path)


def one_shot():
    yield ["walk", "talk"]


@pytest.mark.parametrize("make, error, match", [
    (lambda: FastText(bucket=0), ValueError, "bucket"),
    (lambda: FastText(min_n=5, max_n=3), ValueError, "min_n"),
    (lambda: FastText(minn=5, maxn=3), ValueError, "min_n"),
    (lambda: FastText(min_n=0), ValueError, "min_n"),
    (lambda: FastText(min_n=4, minn=5), TypeError, "minn"),
    (lambda: FastText(bucket=2.5), TypeError, "bucket"),
])
def test_bad_settings(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("sentences, error, match", [
    ([], ValueError, "empty"),
    ([[], []], ValueError, "empty"),
    ([["walk"] * 3, ["talk"]], ValueError, "min_count"),          # every word below min_count: unknown
    ([[1, 2, 3], [1, 2]] * 5, TypeError, "str"),
    ([["walk", 3.5, "talk"]] * 5, TypeError, "str"),
    (one_shot(), TypeError, "one-shot"),
    ("walk talk", FileNotFoundError, "walk talk"),
])
def test_bad_corpora_raise_before_anything_is_drawn_or_trained(sentences, error, match, tmp_path):
    model = FastText(dim=8, min_count=5, epochs=1, bucket=100)
    with pytest.raises(error, match=match):
        model.fit(sentences)
    assert model.vectors is None and model.words == []
    with pytest.raises(RuntimeError, match="FastText.save"):
        model.save(str(tmp_path / "never.npz"))
    assert not os.listdir(tmp_path)


def test_cpu_only_and_untrained_queries():
    model = FastText(dim=8, min_count=1, bucket=100)
    with pytest.raises(ValueError, match="device='cuda'"):
        model.fit(corpus(5), device="cuda")
    assert model.vectors is None
    with pytest.raises(RuntimeError, match="FastText.wv"):
        model.wv
    model.build_vocab(corpus(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # nothing kept: every word unknown
        before = model.vectors.copy()
        model.train([["unknown", "words"]] * 3, epochs=1)
    np.testing.assert_array_equal(model.vectors, before)


# ---------------------------------------------------------------- the used buckets alone

EARLIER = os.path.join(os.path.dirname(__file__), "data", "saved_before_compact_ngrams")
OOV = ("walker", "swimmingly", "zzzq")


def test_initial_rows_are_those_of_the_whole_stream():
    """`_initial_rows` draws rows of `_initial_vectors`' stream without the rows between, for
    odd and even dims (a float32 takes half of a 64-bit output) and after rows drawn."""
    from fastad.models.text.word2vec import _initial_rows, _initial_vectors
    rows = np.unique(np.random.default_rng(1).integers(0, 300, 60))
    for dim in (1, 3, 8):
        whole = _initial_vectors(np.random.default_rng(5), 300, dim)
        for drawn in (0, 13, 50):
            rng = np.random.default_rng(5)
            _initial_vectors(rng, drawn, dim)
            later = rows[rows >= drawn]
            np.testing.assert_array_equal(_initial_rows(rng, later, dim, drawn=drawn), whole[later])
    assert _initial_rows(np.random.default_rng(5), [], 4).shape == (0, 4)


@pytest.mark.parametrize("form, settings", [("sg", {}), ("shared", {"shared_negatives": True}),
                                            ("cbow", {"sg": False})])
def test_a_seed_trains_what_the_table_of_every_bucket_trained(form, settings):
    """The input table holds the vocabulary's rows and the used buckets' alone, and a fit
    trains bit for bit what it trained when the table held every bucket: the figures in
    tests/data/saved_before_compact_ngrams/expected.npz were written by the code of 6d71701
    (FastText(dim=8, min_count=1, epochs=2, bucket=1000, seed=3, sample=0, window=3) on
    corpus(60), skip-gram, shared negatives and CBOW): the loss of each epoch, the
    vocabulary's vectors, the output table, unseen words' vectors and vectors_ngrams (whose
    unused buckets hold their starting values)."""
    expected = np.load(os.path.join(EARLIER, "expected.npz"))
    model = FastText(dim=8, min_count=1, epochs=2, bucket=1000, seed=3, sample=0, window=3,
                     **settings).fit(corpus(60))
    used = np.unique(model.subword_ids[model.subword_ids >= len(model.words)])
    assert model.vectors.shape == (len(model.words) + used.size, 8) and used.size < 1000 / 2
    assert model.history == expected[f"{form}_history"].tolist()
    np.testing.assert_array_equal(model.word_vectors(), expected[f"{form}_word_vectors"])
    np.testing.assert_array_equal(model.output, expected[f"{form}_output"])
    np.testing.assert_array_equal(np.stack([model.wv[w] for w in OOV]), expected[f"{form}_oov"])
    np.testing.assert_array_equal(model.vectors_ngrams, expected[f"{form}_ngrams"])


def test_vectors_ngrams_holds_the_trained_rows_and_the_others_starting_values():
    model = FastText(dim=8, min_count=1, epochs=1, bucket=700, seed=2).fit(corpus(40))
    n, buckets = len(model.words), model.ngram_buckets
    ngrams = model.vectors_ngrams
    assert ngrams.shape == (700, 8) and ngrams is model.vectors_ngrams      # made once
    np.testing.assert_array_equal(ngrams[buckets], model.vectors[n:])
    start = FastText(dim=8, min_count=1, bucket=700, seed=2).build_vocab(corpus(40))
    from fastad.models.text.word2vec import _initial_vectors
    whole = _initial_vectors(np.random.default_rng(2), n + 700, 8)
    np.testing.assert_array_equal(start.vectors, whole[np.r_[:n, n + buckets]])
    unused = np.setdiff1d(np.arange(700), buckets)
    np.testing.assert_array_equal(ngrams[unused], whole[n + unused])
    np.testing.assert_array_equal(model.wv.bucket_vectors([unused[0], buckets[0]]),
                                  ngrams[[unused[0], buckets[0]]])
    for bad in ([700], [-1], [[1]]):
        with pytest.raises(ValueError, match=r"bucket_vectors: buckets must be a 1-D array of buckets in \[0, 700\)"):
            model.wv.bucket_vectors(bad)
    model.train(corpus(5), epochs=1)
    assert model.vectors_ngrams is not ngrams                                 # made again


def test_a_file_saved_with_every_bucket_loads_as_it_was():
    """A checkpoint of the code before the table kept the used buckets alone (every bucket's
    row, 6d71701's save of the skip-gram fit above) loads to the same vectors, unseen
    words' included, and trains on."""
    expected = np.load(os.path.join(EARLIER, "expected.npz"))
    saved = fa.load(os.path.join(EARLIER, "ft.npz"))
    model = FastText.load(os.path.join(EARLIER, "ft.npz"))
    assert saved["state"]["vectors"].shape[0] == len(model.words) + 1000
    assert model.vectors.shape == (len(model.words) + model.ngram_buckets.size, 8)
    np.testing.assert_array_equal(model.word_vectors(), expected["sg_word_vectors"])
    np.testing.assert_array_equal(np.stack([model.wv[w] for w in OOV]), expected["sg_oov"])
    np.testing.assert_array_equal(model.vectors_ngrams, expected["sg_ngrams"])
    model.train(corpus(5), epochs=1)
