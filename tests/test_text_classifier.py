"""fa.models.TextClassifier: fastText's supervised model (softmax, ns, hs, ova)."""
import os

import numpy as np
import pytest

import fastad as fa
from fastad.models.text._dictionary import distinct_rows
from fastad.models.text.text_classifier import _Examples, _huffman_paths, _input_table

TOPICS = {"sport": "goal match team score player win league",
          "food": "bread cake oven sugar flour bake recipe",
          "code": "python function class compile bug test loop",
          "music": "guitar song drum band album chord tune"}


def _corpus(n, seed=0, noise=("the", "a", "of", "and", "it", "is")):
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    texts, labels = [], []
    for _ in range(n):
        label = names[rng.integers(len(names))]
        words = TOPICS[label].split()
        length = int(rng.integers(3, 12))
        texts.append(" ".join(rng.choice(words + list(noise), length)))
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def corpus():
    return _corpus(1200)


@pytest.mark.parametrize("loss", ["softmax", "ns", "hs", "ova"])
def test_each_loss_learns_the_topics(corpus, loss):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=16, epochs=5, lr=0.5, loss=loss, word_ngrams=2, bucket=1000,
                                     seed=1).fit(texts[:1000], labels[:1000])
    n, precision, recall = model.test(texts[1000:], labels[1000:])
    assert n == 200 and precision > 0.95 and recall == precision       # one label a text: P@1 = R@1
    assert model.history[-1] < model.history[0]


# ---------------------------------------------------------------- one step against NumPy

def _one_step(loss):
    """Train on two texts that repeat a word, two labels, one epoch, and return (model, the
    start E rows)."""
    model = fa.models.TextClassifier(dim=5, epochs=1, lr=0.3, loss=loss, seed=7, shuffle=False)
    model.fit(["red green red", "blue blue"], ["x", "y"])
    start = _input_table(np.random.default_rng(7), model.input_rows.size, 5).astype(np.float64)
    return model, start


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@pytest.mark.parametrize("loss", ["softmax", "ns", "hs", "ova"])
def test_one_epoch_equals_fasttexts_update_in_float64(loss):
    """Two texts, one epoch: each step's lr falls linearly from lr to 0 over the epoch
    (the compiled loop updates it every 256 examples: here once, so both steps take lr),
    the text's rows take the mean's gradient (a repeated word once per occurrence, as
    fastText's: the classifier trains on distinct rows times their shares, the same
    update), the output rows theirs."""
    model, E = _one_step(loss)
    d = model.dictionary
    rows = {w: int(np.searchsorted(model.input_rows, d.word_id(w))) for w in ("red", "green", "blue", "</s>")}
    n_labels = 2
    O = np.zeros((1 if loss == "hs" else n_labels, 5))
    lr = 0.3
    for words, label in ((["red", "green", "red", "</s>"], "__label__x"), (["blue", "blue", "</s>"], "__label__y")):
        ids = [rows[w] for w in words]
        y = d.label_id(label)
        h = E[ids].mean(axis=0)
        if loss == "softmax":
            p = np.exp(O @ h - (O @ h).max())
            p /= p.sum()
            coef = p - np.eye(n_labels)[y]
            targets = np.arange(n_labels)
        elif loss in ("ova", "ns"):       # two labels: ns's 5 negatives are all the other label
            targets = np.arange(n_labels) if loss == "ova" else np.array([y] + [1 - y] * 5)
            truth = np.eye(n_labels)[y][targets]
            coef = _sigmoid(O[targets] @ h) - truth
        else:
            paths, codes, lengths = _huffman_paths(d.label_counts)
            targets = paths[y, :lengths[y]]
            coef = _sigmoid(O[targets] @ h) - codes[y, :lengths[y]]
        grad_h = coef @ O[targets]
        np.add.at(O, targets, -lr * np.outer(coef, h))      # a repeated row takes the sum
        for i in ids:
            E[i] -= lr * grad_h / len(ids)
    np.testing.assert_allclose(model.output, O, atol=1e-6)
    np.testing.assert_allclose(model.input, E, atol=1e-6)


def test_distinct_rows_with_their_shares():
    ids = np.array([3, 1, 3, 3, 2, 2, 0], np.int32)
    rows, offsets, shares = distinct_rows(ids, np.array([0, 4, 4, 7]), 5)
    assert rows.tolist() == [3, 1, 2, 0] and offsets.tolist() == [0, 2, 2, 4]
    np.testing.assert_allclose(shares, [0.75, 0.25, 2 / 3, 1 / 3], rtol=1e-6)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 3\)"):
        distinct_rows(ids, np.array([0, 7]), 3)
    with pytest.raises(ValueError, match="offsets must rise from 0 to len"):
        distinct_rows(ids, np.array([0, 5]), 5)


def test_the_classifier_trains_each_texts_distinct_rows_once():
    # a long document repeats its words: each example reads and updates a row once, its
    # share of the mean the weight (the update equals fastText's per occurrence: above)
    model = fa.models.TextClassifier(dim=4, epochs=1)
    ids = np.array([5, 5, 5, 2, 5, 2, 7], np.int32)
    examples = _Examples(model, np.array([1, 1]), ids, 8, np.array([0, 5, 7]), np.array([0, 1], np.int32),
                         np.array([0, 1, 2]))
    assert examples.ids.tolist() == [5, 2, 2, 7] and examples.offsets.tolist() == [0, 2, 4]
    np.testing.assert_allclose(examples.shares, [0.8, 0.2, 0.5, 0.5], rtol=1e-6)
    assert examples.longest == 2


def test_huffman_paths_follow_the_counts():
    paths, codes, lengths = _huffman_paths(np.array([8, 4, 2, 1, 1]))
    # the commonest label sits nearest the root; every label's path starts at the root (node 3)
    assert list(lengths) == [1, 2, 3, 4, 4]
    assert (paths[:, 0] == 3).all()
    # distinct labels take distinct branch codes
    words = {tuple(codes[c, :lengths[c]]) for c in range(5)}
    assert len(words) == 5


# ---------------------------------------------------------------- predict, test, files

def test_predict_gives_fasttexts_shapes(corpus):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=8, epochs=3, lr=0.5, seed=0).fit(texts, labels)
    names, probabilities = model.predict("guitar song drum", k=2)
    assert names[0] == "__label__music" and len(names) == 2
    assert probabilities.shape == (2,) and probabilities[0] >= probabilities[1]
    many_names, many_probabilities = model.predict(["guitar song", "bread cake"], k=1)
    assert many_names == [("__label__music",), ("__label__food",)]
    assert len(many_probabilities) == 2
    full = model.predict_proba(["guitar song", "bread cake"])
    assert full.shape == (2, 4)
    np.testing.assert_allclose(full.sum(axis=1), 1.0, rtol=1e-6)
    assert model.predict("guitar", k=4, threshold=0.99)[0] in ((), ("__label__music",))
    np.testing.assert_allclose(model.get_sentence_vector("guitar song"),
                               model.input[np.searchsorted(model.input_rows, [
                                   model.dictionary.word_id(w) for w in ("guitar", "song", "</s>")])].mean(axis=0),
                               rtol=1e-6)


def test_test_counts_precision_and_recall_at_k(corpus):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=8, epochs=2, lr=0.3, seed=0).fit(texts, labels)
    sample, truth = texts[:50], labels[:50]
    names, _ = model.predict(sample, k=2)
    right = sum(("__label__" + t) in n for n, t in zip(names, truth))
    n, precision, recall = model.test(sample, truth, k=2)
    assert n == 50
    assert precision == pytest.approx(right / 100)
    assert recall == pytest.approx(right / 50)


def test_multi_label_texts_under_ova():
    texts = ["goal match bread", "guitar song", "bread cake", "goal match"] * 30
    labels = [["sport", "food"], "music", "food", "sport"] * 30
    model = fa.models.TextClassifier(dim=8, epochs=10, lr=0.5, loss="ova", seed=0).fit(texts, labels)
    names, probabilities = model.predict("goal match bread", k=2)
    assert set(names) == {"__label__sport", "__label__food"}
    assert (probabilities > 0.5).all()
    assert model.test(texts[:4], labels[:4], k=2)[2] == 1.0       # every true label found


def test_a_fasttext_file_trains_as_texts_and_labels(tmp_path, corpus):
    texts, labels = corpus
    path = tmp_path / "train.txt"
    path.write_text("".join(f"__label__{l} {t}\n" for t, l in zip(texts, labels)))
    settings = dict(dim=8, epochs=2, word_ngrams=2, bucket=500, seed=3)
    from_file = fa.models.TextClassifier(**settings).fit(path)
    from_lists = fa.models.TextClassifier(**settings).fit(texts, labels)
    assert from_file.labels == from_lists.labels and from_file.words == from_lists.words
    np.testing.assert_array_equal(from_file.input, from_lists.input)
    np.testing.assert_array_equal(from_file.output, from_lists.output)


def test_unused_buckets_are_one_zero_row():
    model = fa.models.TextClassifier(dim=4, epochs=1, word_ngrams=2, bucket=10_000, seed=0)
    model.fit(["a b", "c d"], ["x", "y"])
    d = model.dictionary
    assert model.input.shape == (model.input_rows.size + 1, 4)
    assert (model.input[-1] == 0).all()
    # a text of known words whose bigram no training text had: that bucket reads the zero row
    rows = d.encode(["a d"])[0]
    used = set(model.input_rows.tolist())
    assert any(r not in used for r in rows)
    vectors = [model.input[np.searchsorted(model.input_rows, r)] if r in used else np.zeros(4) for r in rows]
    np.testing.assert_allclose(model.get_sentence_vector("a d"), np.mean(vectors, axis=0), rtol=1e-6)


@pytest.mark.parametrize("loss", ["softmax", "hs"])
def test_save_and_load_predict_alike(tmp_path, corpus, loss):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=8, epochs=2, loss=loss, word_ngrams=2, bucket=300, seed=0).fit(texts, labels)
    model.save(tmp_path / "m.npz")
    again = fa.models.TextClassifier.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(again.predict_proba(texts[:20]), model.predict_proba(texts[:20]))
    assert again.labels == model.labels and again.loss == loss and again.word_ngrams == 2


def test_a_corrupt_model_file_is_a_clear_error(tmp_path, corpus):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=4, epochs=1, seed=0).fit(texts[:100], labels[:100])
    path = tmp_path / "m.npz"
    model.save(path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="m.npz"):
        fa.models.TextClassifier.load(path)
    fa.save({"settings": {"dim": 4}}, tmp_path / "other.npz")
    with pytest.raises(ValueError, match="not a saved TextClassifier"):
        fa.models.TextClassifier.load(tmp_path / "other.npz")


@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_hogwild_workers_learn(corpus, start_method):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=16, epochs=4, lr=0.5, workers=2, seed=0).fit(
        texts[:1000], labels[:1000], start_method=start_method)
    assert model.test(texts[1000:], labels[1000:])[1] > 0.95
    assert len(model.history) == 4 and model.history[-1] < model.history[0]


def test_one_worker_is_deterministic(corpus):
    texts, labels = corpus
    a = fa.models.TextClassifier(dim=8, epochs=2, seed=5).fit(texts, labels)
    b = fa.models.TextClassifier(dim=8, epochs=2, seed=5).fit(texts, labels)
    np.testing.assert_array_equal(a.input, b.input)


def test_callback_and_progress():
    texts, labels = _corpus(300)
    seen, done = [], []
    fa.models.TextClassifier(dim=4, epochs=3, seed=0).fit(
        texts, labels, callback=lambda epoch, loss: seen.append(epoch), progress=lambda n, rate: done.append(n))
    assert seen == [1, 2, 3] and done[-1] == 900


def test_fasttexts_argument_names():
    model = fa.models.TextClassifier(epoch=3, wordNgrams=2, minCount=2, minCountLabel=1, thread=2)
    assert (model.epochs, model.word_ngrams, model.min_count, model.min_count_label, model.workers) == (3, 2, 2, 1, 2)
    with pytest.raises(TypeError, match="epochs or fastText's epoch, not both"):
        fa.models.TextClassifier(epochs=3, epoch=4)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("settings, error, match", [
    (dict(word_ngrams=2, bucket=0), ValueError, "bucket must be > 0"),
    (dict(minn=4, maxn=3), ValueError, "minn must be <= maxn"),
    (dict(loss="hinge"), ValueError, "loss"),
    (dict(dim=0), ValueError, "dim must be >= 1"),
    (dict(lr=0), ValueError, "lr"),
    (dict(label=""), ValueError, "label must be a non-empty prefix"),
])
def test_bad_settings_are_refused_when_made(settings, error, match):
    with pytest.raises(error, match=match):
        fa.models.TextClassifier(**settings)


@pytest.mark.parametrize("texts, labels, error, match", [
    (["good text", ""], ["a", "b"], ValueError, "line 1 has no word the model knows"),
    (["good text", "   "], ["a", "b"], ValueError, "line 1 has no word the model knows"),
    (["good text", 7], ["a", "b"], TypeError, "line 1 is a int, not a str"),
    (["good text", "more"], ["a"], ValueError, "2 texts but 1 labels"),
    (["good text", "more"], ["a", "a"], ValueError, "1 label\\(s\\).*at least 2"),
    (["good text", "more"], ["a", "b c"], ValueError, "must be one token"),
    (["good text", "more"], ["a", []], ValueError, "text 1 has no label"),
])
def test_bad_training_data_is_refused_before_training(texts, labels, error, match):
    model = fa.models.TextClassifier(dim=4, epochs=1)
    with pytest.raises(error, match=match):
        model.fit(texts, labels)
    assert model.input is None and model.dictionary is None     # nothing kept


def test_a_failed_fit_keeps_the_trained_model(corpus):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=4, epochs=1, seed=0).fit(texts[:100], labels[:100])
    before = model.input.copy(), model.labels
    with pytest.raises(ValueError):
        model.fit(["fine", ""], ["a", "b"])
    np.testing.assert_array_equal(model.input, before[0])
    assert model.labels == before[1]


def test_only_rare_words_and_unlabelled_lines_are_refused():
    with pytest.raises(ValueError, match="only words seen fewer than min_count=2"):
        fa.models.TextClassifier(dim=4, epochs=1, min_count=2).fit(["a a b", "c"], ["x", "y"])
    with pytest.raises(ValueError, match="line 1 has no label"):
        fa.models.TextClassifier(dim=4, epochs=1).fit(["__label__x a b", "c d", "__label__y e"])


def test_prediction_input_is_checked(corpus):
    texts, labels = corpus
    model = fa.models.TextClassifier(dim=4, epochs=1, seed=0).fit(texts[:200], labels[:200])
    with pytest.raises(ValueError, match="line 0 has no word the model knows"):
        model.predict("zzz qqq")
    with pytest.raises(TypeError, match="line 1 is a bytearray"):
        model.predict(["goal", bytearray(b"x")])
    with pytest.raises(ValueError, match="label '__label__weather' was never seen"):
        model.test(["goal match"], ["weather"])
    with pytest.raises(ValueError, match="k must be >= 1"):
        model.predict("goal", k=0)
    with pytest.raises(RuntimeError, match="not trained"):
        fa.models.TextClassifier().predict("goal")
    with pytest.raises(FileNotFoundError):
        model.test(os.path.join("no", "such", "file.txt"))
