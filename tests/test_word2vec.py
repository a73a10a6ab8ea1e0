"""fa.models.Word2Vec and the CBOW sampler: vocabulary, training on a planted corpus,
queries, analogies, files, and bad input."""
import os

import numpy as np
import pytest

import fastad as fa
from fastad.data import CbowSampler


def topics_corpus(sentences=400, seed=0):
    """Sentences of one topic each: words a0..a7 or b0..b7, never mixed."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(sentences):
        topic = "ab"[k % 2]
        out.append([f"{topic}{i}" for i in rng.integers(0, 8, 12)])
    return out


def test_vocabulary_counts_filters_and_orders_by_count():
    corpus = [["x", "y", "y", "z"], ["w"], ["y", "x", "q"]]
    model = fa.models.Word2Vec(min_count=2, dim=4)
    assert model.build_vocab(corpus) is model
    assert model.words == ["y", "x"] and model.counts.tolist() == [3, 2]
    assert (model.corpus_count, model.corpus_total_words) == (3, 8)
    assert model.vectors.shape == model.output.shape == (2, 4)
    # training encodes the corpus block by block with this vocabulary, words outside it dropped
    [(ids, ends)] = fa.data.TokenStream(corpus, model.index).blocks()
    assert ids.dtype == np.int32 and ids.tolist() == [1, 0, 0, 0, 1] and ends.tolist() == [3, 3, 5]


def test_fit_learns_the_topics_deterministically_with_one_worker():
    corpus = topics_corpus()
    settings = dict(dim=16, window=3, negative=4, min_count=1, sample=0, epochs=5, seed=3)
    losses = []
    model = fa.models.Word2Vec(**settings).fit(corpus, callback=lambda e, loss: losses.append(loss))
    assert len(losses) == 5 and losses[-1] < losses[0] and model.history == losses
    near = [w for w, _ in model.most_similar("a0", topn=5)]
    assert all(w.startswith("a") for w in near) and "a0" not in near
    assert model.similarity("a0", "a1") > model.similarity("a0", "b1")
    again = fa.models.Word2Vec(**settings).fit(corpus)
    assert np.array_equal(model.vectors, again.vectors)


def test_input_vectors_start_as_gensims_and_output_vectors_at_zero():
    # gensim 4 starts W uniform in [-1, 1) / dim (word2vec.c: [-0.5, 0.5) / dim, which
    # left the held-out loss of bench/peers.py 0.003 above gensim's); C starts at zero.
    # An lr of 1e-12 leaves the vectors where they started.
    dim = 32
    model = fa.models.Word2Vec(dim=dim, window=2, negative=2, min_count=1, sample=0, epochs=1,
                               lr=1e-12, min_lr=0, seed=5).fit(topics_corpus(sentences=40))
    W = model.vectors
    assert W.dtype == np.float32 and W.shape == (16, dim)
    assert np.abs(W).max() < 1.0 / dim and np.abs(W).max() > 0.95 / dim
    assert abs(float(np.mean(np.abs(W))) * dim - 0.5) < 0.05       # uniform on [-1, 1): E|x| = 1/2
    assert np.abs(model.output).max() < 1e-9


def test_cbow_and_two_workers_learn_the_topics_too():
    corpus = topics_corpus()
    for sg, workers in ((False, 1), (True, 2)):
        model = fa.models.Word2Vec(dim=16, window=3, negative=4, min_count=1, sample=0, epochs=5,
                                   sg=sg, workers=workers, seed=1).fit(corpus)
        near = [w for w, _ in model.most_similar("b2", topn=5)]
        assert all(w.startswith("b") for w in near), (sg, workers, near)


def test_every_epoch_of_hogwild_workers_walks_the_corpus_and_reports_progress():
    """Each epoch has its own claim counter: a later epoch's workers find every block
    unclaimed (a counter left at the end of the corpus would give them nothing to train,
    and the epoch a nan loss). One worker or two, `progress` hears of the examples."""
    corpus = topics_corpus()
    for workers in (1, 2):
        done = []
        model = fa.models.Word2Vec(dim=8, window=3, negative=2, min_count=1, sample=0, epochs=3, seed=1,
                                   workers=workers).fit(corpus, start_method="threads",
                                                        progress=lambda n, rate: done.append(n))
        assert len(model.history) == 3 and np.all(np.isfinite(model.history)), workers
        assert done and max(done) > 0, workers


def test_hogwild_workers_start_once_a_fit_unless_the_epochs_are_watched(monkeypatch):
    """Without a callback (which reads the vectors between epochs), every epoch trains in one
    run of the workers; a progress counts on across the epochs of that run."""
    runs = []
    run = fa.hogwild.run

    def counted(*args, **kwargs):
        runs.append(kwargs["start_method"])
        return run(*args, **kwargs)

    monkeypatch.setattr(fa.hogwild, "run", counted)
    settings = dict(dim=8, window=3, negative=2, min_count=1, sample=0, epochs=3, seed=1, workers=2)
    for watch, starts in (({}, 1), ({"callback": lambda epoch, loss: None}, 3),
                          ({"progress": lambda done, rate: None}, 1)):
        runs.clear()
        model = fa.models.Word2Vec(**settings).fit(topics_corpus(), start_method="threads", **watch)
        assert runs == ["threads"] * starts and len(model.history) == 3
        assert np.all(np.isfinite(model.history))


@pytest.mark.parametrize("sg", [True, False])
def test_batched_fit_learns_the_topics_as_the_per_example_fit(sg):
    # 16 examples a step (their gradients applied together) against one: the same topics,
    # and a held-out-free check of the training loss per example, which must stay close.
    corpus = topics_corpus()
    settings = dict(dim=16, window=3, negative=4, min_count=1, sample=0, epochs=5, seed=1, sg=sg)
    one = fa.models.Word2Vec(**settings).fit(corpus)
    batched = fa.models.Word2Vec(**settings).fit(corpus, batch_size=16)
    near = [w for w, _ in batched.most_similar("b2", topn=5)]
    assert all(w.startswith("b") for w in near), near
    assert abs(batched.history[-1] - one.history[-1]) < 0.05 * one.history[-1]
    assert not np.array_equal(batched.vectors, one.vectors)
    again = fa.models.Word2Vec(**settings).fit(corpus, batch_size=16)
    assert np.array_equal(batched.vectors, again.vectors)
    with pytest.raises(ValueError, match="batch_size"):
        fa.models.Word2Vec(**settings).fit(corpus, batch_size=0)
    threads = fa.models.Word2Vec(**settings, workers=2).fit(corpus, batch_size=16, start_method="threads")
    assert all(w.startswith("b") for w, _ in threads.most_similar("b2", topn=5))


def planted_model():
    """A model whose vectors are set by hand: king - man + woman = queen."""
    model = fa.models.Word2Vec(dim=3, min_count=1)
    vectors = {"man": [1, 0, 0], "woman": [1, 1, 0], "king": [1, 0, 1], "queen": [1, 1, 1],
               "apple": [-1, 0, 0.2], "pear": [-1, 0.1, 0.2]}
    model.words = list(vectors)
    model.index = {w: i for i, w in enumerate(model.words)}
    model.counts = np.ones(len(vectors), dtype=np.int64)
    model.vectors = np.array(list(vectors.values()), dtype=np.float32)
    model.output = np.zeros_like(model.vectors)
    return model


def test_analogies_and_their_evaluation_file(tmp_path):
    model = planted_model()
    assert model.analogy("man", "king", "woman")[0][0] == "queen"
    path = tmp_path / "questions-words.txt"
    path.write_text(": royals\nman king woman queen\nwoman queen man king\n"
                    ": fruit\nman king apple queen\nman king unknown queen\n")
    result = model.evaluate_analogies(path)
    assert result["correct"] == 2 and result["total"] == 3 and result["skipped"] == 1
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["sections"] == {"royals": (2, 2), "fruit": (0, 1)}
    path.write_text("man king woman\n")
    with pytest.raises(ValueError, match="line 1 holds 3 words, expected 4"):
        model.evaluate_analogies(path)


def test_most_similar_takes_vectors_and_excludes():
    model = planted_model()
    assert model.most_similar(np.array([-1.0, 0.0, 0.2]), topn=1)[0][0] == "apple"
    assert model.most_similar("apple", topn=1, exclude=["pear"])[0][0] != "pear"
    assert len(model.most_similar("apple", topn=100)) == 5
    with pytest.raises(KeyError, match="'plum' is not in the vocabulary"):
        model.most_similar("plum")
    with pytest.raises(ValueError, match="shape \\(3,\\)"):
        model.most_similar(np.zeros(4))
    with pytest.raises(ValueError, match="topn must be a positive int"):
        model.most_similar("apple", topn=0)


def test_save_load_and_the_word2vec_text_format(tmp_path):
    model = planted_model()
    model.save(tmp_path / "w2v.npz")
    back = fa.models.Word2Vec.load(tmp_path / "w2v.npz")
    assert back.words == model.words and np.array_equal(back.vectors, model.vectors)
    assert back.analogy("man", "king", "woman")[0][0] == "queen"
    model.save_word2vec_format(tmp_path / "w2v.txt")
    lines = (tmp_path / "w2v.txt").read_text().splitlines()
    assert lines[0] == "6 3" and lines[3].split()[0] == "king"
    assert np.allclose([float(x) for x in lines[3].split()[1:]], [1, 0, 1])
    fa.save({"something": np.zeros(2)}, tmp_path / "other.npz")
    with pytest.raises(ValueError, match="is not a saved Word2Vec"):
        fa.models.Word2Vec.load(tmp_path / "other.npz")


def test_the_text_format_is_written_atomically_and_errors_name_the_path(tmp_path, monkeypatch):
    # it once wrote its own "path.tmp-PID" without fsync, and a missing folder named that file
    model = planted_model()
    path = tmp_path / "no" / "such" / "w2v.txt"
    with pytest.raises(FileNotFoundError) as caught:
        model.save_word2vec_format(path)
    message = str(caught.value)
    assert (f"Word2Vec.save_word2vec_format: cannot write {path}: the folder {path.parent} does "
            f"not exist") in message and ".tmp" not in message
    path = tmp_path / "w2v.txt"
    model.save_word2vec_format(path)
    before = path.read_text()
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    model.save_word2vec_format(path)
    assert synced and path.read_text() == before
    model.vectors = model.vectors * 2

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        model.save_word2vec_format(path)
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["w2v.txt"]        # no temporary file left


def test_bad_input_is_named_and_a_failed_fit_keeps_the_model():
    with pytest.raises(ValueError, match="empty"):
        fa.models.Word2Vec().fit([[], []])
    with pytest.raises(ValueError, match="min_count=5 leaves 0 word"):
        fa.models.Word2Vec(min_count=5).fit([["a", "b"]])
    with pytest.raises(TypeError, match="sentence 0 is a string"):
        fa.models.Word2Vec(min_count=1).fit(["a b c"])
    for kwargs, error, message in ((dict(window=0), ValueError, "window"),
                                   (dict(negative=0), ValueError, "negative"),
                                   (dict(dim=-1), ValueError, "dim"),
                                   (dict(lr=0.01, min_lr=0.1), ValueError, "min_lr"),
                                   (dict(sample=-1), ValueError, "sample"),
                                   (dict(seed=None), TypeError, "seed")):
        with pytest.raises(error, match=message):
            fa.models.Word2Vec(**kwargs)
    with pytest.raises(RuntimeError, match="not trained"):
        fa.models.Word2Vec().most_similar("a")
    model = planted_model()
    before = model.vectors.copy()
    with pytest.raises(ValueError):
        model.fit([["only"]])
    assert np.array_equal(model.vectors, before)


def test_text_file_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(" ".join(s) for s in topics_corpus(100)) + "\n\n")
    model = fa.models.Word2Vec(dim=8, min_count=1, epochs=1, sample=0).fit(path)
    assert len(model) == 16 and "a3" in model and model.vector("a3").shape == (8,)


def test_cbow_sampler_fills_the_window_with_mean_weights():
    tokens = np.array([0, 1, 2, 3, 4])
    context, weights, target = (fa.IndexInput([0, 0]), fa.Input(np.zeros((2, 1))),
                                fa.IndexInput([0, 0, 0]))
    sampler = CbowSampler(tokens, context, weights, target, window=1, seed=0)
    drawn = [(c.tolist(), w.ravel().tolist(), t.tolist()) for c, w, t in sampler.epoch()]
    assert [(c, w, t[0]) for c, w, t in drawn] == [
        ([1, 0], [1.0, 0.0], 0), ([0, 2], [0.5, 0.5], 1), ([1, 3], [0.5, 0.5], 2),
        ([2, 4], [0.5, 0.5], 3), ([3, 0], [1.0, 0.0], 4)]
    with pytest.raises(ValueError, match=r"weights \(2 \* window a centre\) must be a CPU Input of 2 values"):
        CbowSampler(tokens, context, fa.Input(np.zeros(3)), target, window=1)
    with pytest.raises(ValueError, match="context must hold 2 \\* window = 4 ids for each centre, got 2"):
        CbowSampler(tokens, context, weights, target, window=2)
    two = fa.IndexInput([0] * 4)
    with pytest.raises(ValueError, match="with 2 centres an example, give mask"):
        CbowSampler(tokens, two, fa.Input(np.zeros(4)), fa.IndexInput([0] * 6), window=1)
    with pytest.raises(ValueError, match=r"\(1 \+ k\) ids for each of the 2 centres, got 5"):
        CbowSampler(tokens, two, fa.Input(np.zeros(4)), fa.IndexInput([0] * 5), window=1,
                    mask=fa.Input(np.zeros(2)))


@pytest.mark.parametrize("centres", [5, 7])
def test_batched_cbow_draws_the_one_centre_stream_and_masks_the_last_example(centres):
    tokens = np.arange(97) % 13
    ends = np.array([30, 31, 97])
    window, k = 2, 3

    def sampler(b, mask=None):
        return CbowSampler(tokens, fa.IndexInput([0] * (b * 2 * window)),
                           fa.Input(np.zeros((b, 2 * window, 1))), fa.IndexInput([0] * (b * (1 + k))),
                           mask=mask, sentence_ends=ends, window=window, sample=0.05, seed=1)

    one = [(c.tolist(), w.ravel().tolist(), t.tolist()) for c, w, t in sampler(1).epoch()]
    batched = sampler(centres, fa.Input(np.zeros(centres)))
    examples = list(batched.epoch())
    drawn = []
    for n, (c, w, t, m) in enumerate(examples):
        c, w, t = c.reshape(centres, -1), w.reshape(centres, -1), t.reshape(centres, -1)
        real = int(m.sum())
        assert m.tolist() == [1.0] * real + [0.0] * (centres - real)
        assert real == centres or n == len(examples) - 1
        assert np.all(c[real:] == c[real - 1]) and np.all(t[real:] == t[real - 1])
        drawn += [(c[i].tolist(), w[i].tolist(), t[i].tolist()) for i in range(real)]
    assert drawn == one
    assert batched.epoch_centres == len(one) and len(one) % centres



def test_samplers_sharing_a_claim_walk_the_corpus_side_by_side():
    """Samplers that share a claim counter take blocks of the corpus in order: alone, one
    draws the whole corpus exactly as a sampler without a claim (its progress being
    its position in the corpus); two, drawing in turns, take each block once between
    them, each its blocks in corpus order, and a sampler that starts late only
    gets the blocks left."""
    from fastad.data import SkipGramSampler
    rng = np.random.default_rng(0)
    ends = np.cumsum(rng.integers(0, 9, 300))
    tokens = rng.integers(0, 20, ends[-1])
    k = 3

    def sampler(claim=None, rank=0):
        return SkipGramSampler(tokens, fa.IndexInput([0]), fa.IndexInput([0] * (1 + k)), sentence_ends=ends,
                               window=3, seed=5, rank=rank, workers=2 if claim is not None else 1,
                               claim=claim, block_tokens=40)

    def walk(s):
        out = []
        for c, ctx in s.epoch():
            out.append((int(c[0]), ctx.tolist(), s.progress(), s.where()))
        return out

    plain = walk(sampler())
    claim = np.zeros(1, dtype=np.int64)
    alone = sampler(claim)
    walked = walk(alone)
    assert [w[:2] for w in walked] == [w[:2] for w in plain]
    assert [w[2] for w in walked] == [w[2] for w in plain] and alone.progress() == 1.0
    blocks = round(tokens.size / 40)
    assert claim[0] >= blocks
    claim[0] = 0
    late = sampler(claim, rank=1)
    assert walk(late) == [] or claim[0] > blocks      # nothing left: the late one draws nothing
    claim[0] = 0
    late_start = blocks - 3
    claim[0] = late_start
    assert len(walk(sampler(claim))) < len(plain) / 5   # started at block 37 of 40: the tail only

    claim[0] = 0
    pair, sentences = (sampler(claim, 0), sampler(claim, 1)), ([], [])
    streams = [iter(s.epoch()) for s in pair]
    live = [True, True]
    while any(live):
        for r in (0, 1):
            if live[r]:
                try:
                    next(streams[r])
                    sentences[r].append(int(pair[r].where().rsplit(" ", 1)[1].rstrip(")")))
                except StopIteration:
                    live[r] = False
    for mine in sentences:
        assert mine and np.all(np.diff(mine) >= 0)                       # in corpus order
    assert not set(sentences[0]) & set(sentences[1])                     # each sentence once
    assert sum(len(x) for x in sentences) == sum(s.epoch_pairs for s in pair)
    every = {int(w[3].rsplit(" ", 1)[1].rstrip(")")) for w in plain}
    assert set(sentences[0]) | set(sentences[1]) == every                # the whole corpus
    with pytest.raises(TypeError, match="claim must be"):
        sampler(np.zeros(1))


def test_hogwild_workers_claim_the_blocks_a_slow_worker_leaves(monkeypatch):
    """Word2Vec's workers share one claim counter: when one worker is held back until the
    other has finished, the other walks the whole corpus (with fixed shards it would
    train its half only, and the late one the other half alone at the end)."""
    import threading
    from fastad.models import runner
    from fastad.models.text import word2vec as w2v
    monkeypatch.setattr(w2v, "BLOCK_TOKENS", 40)
    first_done, items = threading.Event(), {}
    run_worker = runner.run_worker

    def held_back(rank, *args):
        if rank == 1:
            first_done.wait(60)
        try:
            result = run_worker(rank, *args)
            items[rank] = result["examples"]
            return result
        finally:
            if rank == 0:
                first_done.set()

    monkeypatch.setattr(runner, "run_worker", held_back)
    corpus = topics_corpus()
    settings = dict(dim=8, window=3, negative=2, min_count=1, sample=0, epochs=1, seed=1)
    model = fa.models.Word2Vec(**settings, workers=2).fit(corpus, start_method="threads")
    assert items[1] == 0 and items[0] > 0
    # worker 0 alone, in corpus order, on the stream of rank 0 and with the lr by position:
    # the one-worker fit exactly
    one = fa.models.Word2Vec(**settings).fit(corpus)
    assert np.array_equal(model.vectors, one.vectors) and model.history == one.history
