"""The ready models on a device: BPR/TwoTower.fit and Word2Vec.fit with device="cuda"
train batches there and reach the CPU fit's quality, seeded, with errors named and
the model untouched when a fit fails."""
import numpy as np
import pytest

import fastad as fa


def close(a, b):
    """Equal on the emulator; to rounding on a GPU (its atomic sums add in a varying order)."""
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def likes():
    matrix = fa.data.planted_interactions(300, 100, per_user=10, rank=4, noise=0.3, seed=0)
    return fa.data.train_test_split(matrix, 0.2, seed=0)


@pytest.mark.parametrize("optimizer, biases", [("sgd", True), ("adam", False)])
def test_bpr_with_batches_of_one_follows_the_cpu_fit(backend, optimizer, biases):
    matrix = fa.data.planted_interactions(40, 30, per_user=4, seed=1)
    cpu = fa.models.BPR(40, 30, dim=8, biases=biases)
    dev = fa.models.BPR(40, 30, dim=8, biases=biases)
    cpu_losses = cpu.fit(matrix, epochs=2, lr=0.05, optimizer=optimizer).history
    dev_losses = dev.fit(matrix, epochs=2, lr=0.05, optimizer=optimizer, device="cuda", batch_size=1).history
    close(dev_losses, cpu_losses)            # the same triples in the same order
    for name, value in cpu.state_dict().items():
        assert dev.state_dict()[name].dtype == value.dtype
        close(dev.state_dict()[name], value)
    assert dev.U.device == "cpu" and isinstance(dev.U.value, np.ndarray)


@pytest.mark.parametrize("negatives", ["uniform", "popularity"])
def test_bpr_device_batches_follow_the_cpu_fit_at_the_same_batch_size(backend, negatives):
    matrix = fa.data.planted_interactions(40, 30, per_user=4, seed=1)
    cpu = fa.models.BPR(40, 30, dim=8, biases=True)
    dev = fa.models.BPR(40, 30, dim=8, biases=True)
    close(dev.fit(matrix, epochs=2, lr=0.05, device="cuda", batch_size=16, negatives=negatives).history,
          cpu.fit(matrix, epochs=2, lr=0.05, batch_size=16, negatives=negatives).history)
    for name, value in cpu.state_dict().items():
        close(dev.state_dict()[name], value)


def test_bpr_on_the_device_ranks_as_well_as_on_the_cpu(backend, likes):
    train, test = likes
    cpu = fa.models.BPR(300, 100, dim=16, seed=1, biases=True)
    cpu.fit(train, epochs=10, lr=0.1)
    runs, seen = [], []
    for _ in range(2):
        model = fa.models.BPR(300, 100, dim=16, seed=1, biases=True)
        losses = model.fit(train, epochs=10, lr=0.1, device="cuda", batch_size=128,
                           callback=lambda epoch, loss: seen.append(epoch)).history
        runs.append((losses, model.state_dict()))
    assert losses[-1] < losses[0] and seen == list(range(1, 11)) * 2
    close(runs[0][0], runs[1][0])                         # same seed, same run
    for name in runs[0][1]:
        close(runs[0][1][name], runs[1][1][name])
    auc_cpu = fa.metrics.auc(cpu.scores(np.arange(300)), test, train=train)
    auc_dev = fa.metrics.auc(model.scores(np.arange(300)), test, train=train)
    assert auc_cpu > 0.8 and auc_dev > auc_cpu - 0.02, (auc_dev, auc_cpu)
    ids, _ = model.recommend([0, 1], k=5)
    assert ids.shape == (2, 5)
    assert all(not set(ids[u]) & set(train[u].indices) for u in (0, 1))   # liked items left out


@pytest.mark.parametrize("callback", [False, True], ids=["epochs together", "a run per epoch"])
def test_a_device_fit_follows_the_progress_and_callback_protocol(backend, callback):
    # The device loop reports as fa.train does: examples counting on across epochs (each
    # step a batch), at least once an epoch, the last at the fit's total; epochs from 1.
    matrix = fa.data.planted_interactions(40, 30, per_user=4, seed=1)
    done, rates, epochs = [], [], []
    settings = {"callback": lambda epoch, loss: epochs.append(epoch)} if callback else {}
    fa.models.BPR(40, 30, dim=8).fit(matrix, epochs=3, device="cuda", batch_size=16,
                                     progress=lambda n, rate: (done.append(n), rates.append(rate)),
                                     **settings)
    assert done == sorted(done) and len(done) >= 3 and all(rate > 0 for rate in rates)
    assert done[-1] == 3 * -(-matrix.nnz // 16) * 16
    assert epochs == ([1, 2, 3] if callback else [])


def test_two_tower_fits_on_the_device(backend, likes):
    train, test = likes
    rng = np.random.default_rng(0)
    tower = fa.models.TwoTower({"id": np.arange(300), "group": rng.integers(0, 5, 300)},
                               {"id": np.arange(100)}, dim=8)
    losses = tower.fit(train, epochs=5, lr=0.05, optimizer="adagrad", device="cuda", batch_size=256).history
    assert losses[-1] < losses[0]
    assert fa.metrics.auc(tower.scores(np.arange(300)), test, train=train) > 0.65


@pytest.mark.parametrize("model_class", ["BPR", "TwoTower"])
def test_a_device_fit_draws_its_batches_with_the_models_host_sampler(backend, monkeypatch, model_class):
    # The model, not the Recommender base, chooses the host's sampler and maps each batch it
    # draws to its examples; a model whose sampler draws nothing trains no step.
    matrix = fa.data.planted_interactions(40, 30, per_user=4, seed=1)
    cls = getattr(fa.models, model_class)
    model = cls(40, 30, dim=4) if model_class == "BPR" else cls({"id": np.arange(40)}, {"id": np.arange(30)},
                                                                 dim=4)
    calls = []
    host_sampler, drawn_examples = cls.host_sampler, cls.drawn_examples

    def counted_sampler(self, interactions, batch, n, seed, negatives):
        calls.append((batch, n))
        return host_sampler(self, interactions, batch, n, seed, negatives)

    def counted_examples(self, drawn):
        calls.append("batch")
        return drawn_examples(self, drawn)

    monkeypatch.setattr(cls, "host_sampler", counted_sampler)
    monkeypatch.setattr(cls, "drawn_examples", counted_examples)
    model.fit(matrix, epochs=2, device="cuda", batch_size=16)
    steps = -(-matrix.nnz // 16)
    assert calls == ([(16, steps)] + ["batch"] * steps) * 2


def test_bad_device_arguments_are_named_and_leave_the_model_as_it_was(backend, likes):
    train, _ = likes
    model = fa.models.BPR(300, 100, dim=4)
    before = {name: value.copy() for name, value in model.state_dict().items()}
    for kwargs, error, message in (
            (dict(device="gpu"), ValueError, r"BPR.fit: device='gpu': .*'cpu', 'cuda' or 'cuda:N'"),
            (dict(device="cuda:7"), ValueError, r"BPR.fit: device='cuda:7': "),
            (dict(device="cuda", workers=2), ValueError, "runs in one process; workers must be 1"),
            (dict(device="cuda", batch_size=0), ValueError, "batch_size must be >= 1"),
            (dict(batch_size=0), ValueError, "batch_size must be >= 1"),
            (dict(device="cuda", lr=-1.0), ValueError, "lr must be")):
        with pytest.raises(error, match=message):
            model.fit(train, **kwargs)
    assert model.liked is None
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


# ---------------------------------------------------------------- word2vec

TOPICS, WORDS_PER_TOPIC = 4, 20


def topic_sentences(n, seed):
    """Sentences of 10 words, each drawn from one topic's 20 words (t0_0 .. t3_19)."""
    rng = np.random.default_rng(seed)
    return [[f"t{k % TOPICS}_{w}" for w in rng.integers(0, WORDS_PER_TOPIC, 10)] for k in range(n)]


def heldout_loss(model, sentences, window=3, negatives=4, seed=0):
    """Mean SGNS loss of the held-out sentences' (centre, context) pairs within `window`,
    with uniform negatives."""
    rng = np.random.default_rng(seed)
    ids = [[model.index[w] for w in s] for s in sentences]
    pairs = np.array([(s[i], s[j]) for s in ids for i in range(len(s))
                      for j in range(max(0, i - window), min(len(s), i + window + 1)) if j != i])
    noise = rng.integers(0, len(model), (len(pairs), negatives))
    logsig = lambda x: -np.logaddexp(0, -x)
    W, C = model.vectors.astype(np.float64), model.output.astype(np.float64)
    positive = np.einsum("nk,nk->n", W[pairs[:, 0]], C[pairs[:, 1]])
    negative = np.einsum("nk,njk->nj", W[pairs[:, 0]], C[noise])
    return float(np.mean(-logsig(positive) - logsig(-negative).sum(axis=1)))


def topic_margin(model):
    """Mean cosine of words of one topic minus that of words of different topics."""
    unit = model.vectors / np.linalg.norm(model.vectors, axis=1, keepdims=True)
    topic = np.array([int(w[1]) for w in model.words])
    cosines = unit @ unit.T
    same = (topic[:, None] == topic) & ~np.eye(len(topic), dtype=bool)
    return cosines[same].mean() - cosines[topic[:, None] != topic].mean()


@pytest.mark.parametrize("sg", [True, False], ids=["skip-gram", "cbow"])
def test_word2vec_on_the_device_learns_as_well_as_on_the_cpu(backend, sg):
    train, held = topic_sentences(600, seed=0), topic_sentences(100, seed=1)
    settings = dict(dim=16, window=3, negative=4, min_count=1, sample=0, epochs=3, seed=2, sg=sg)
    cpu = fa.models.Word2Vec(**settings).fit(train)
    losses = []
    dev = fa.models.Word2Vec(**settings).fit(train, device="cuda", batch_size=256,
                                             callback=lambda epoch, loss: losses.append(loss))
    assert dev.history == losses and len(losses) == 3 and losses[-1] < losses[0]
    assert isinstance(dev.vectors, np.ndarray) and dev.vectors.dtype == np.float32
    assert heldout_loss(dev, held) < heldout_loss(cpu, held) + 0.05, (heldout_loss(dev, held),
                                                                      heldout_loss(cpu, held))
    assert topic_margin(dev) > 0.5 and topic_margin(dev) > topic_margin(cpu) - 0.1
    assert all(w.startswith("t1_") for w, _ in dev.most_similar("t1_0", topn=5))
    again = fa.models.Word2Vec(**settings).fit(train, device="cuda", batch_size=256)
    close(again.vectors, dev.vectors)                     # same seed, same run


@pytest.mark.parametrize("sg", [True, False], ids=["skip-gram", "cbow"])
def test_word2vec_device_batches_follow_the_cpu_fit_at_the_same_batch_size(backend, sg):
    # One compiled sampler draws both fits' batches (the same stream), and the device
    # runs the CPU's graph: the same steps, so the same vectors up to rounding.
    train = topic_sentences(60, seed=0)
    settings = dict(dim=8, window=2, negative=3, min_count=1, sample=1e-2, epochs=2, seed=4, sg=sg)
    cpu = fa.models.Word2Vec(**settings).fit(train, batch_size=32)
    dev = fa.models.Word2Vec(**settings).fit(train, device="cuda", batch_size=32)
    close(dev.history, cpu.history)
    close(dev.vectors, cpu.vectors)
    close(dev.output, cpu.output)


def test_word2vec_device_errors_and_a_failed_fit_keep_the_model(backend):
    corpus = topic_sentences(40, seed=0)
    model = fa.models.Word2Vec(dim=8, min_count=1, epochs=2).fit(corpus[:20])
    words, vectors = list(model.words), model.vectors.copy()
    for kwargs, message in ((dict(device="gpu"), r"Word2Vec.fit: device='gpu'"),
                            (dict(device="cuda:7"), r"Word2Vec.fit: device='cuda:7'"),
                            (dict(device="cuda", batch_size=-3), "batch_size must be >= 1"),
                            (dict(batch_size=0), "batch_size must be >= 1")):
        with pytest.raises(ValueError, match=message):
            model.fit(corpus, **kwargs)
    with pytest.raises(ValueError, match="workers must be 1, got 2"):
        fa.models.Word2Vec(min_count=1, workers=2).fit(corpus, device="cuda")

    def fail(epoch, loss):
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        model.fit(topic_sentences(40, seed=5)[:3] + [["new", "words", "here"]], device="cuda",
                  callback=fail)
    assert model.words == words and np.array_equal(model.vectors, vectors)
    assert model.most_similar(words[0], topn=1)[0][0] in words
