"""Skip-gram with shared negatives (pWord2Vec's form): the window loss node against a float64
numpy reference of one example (value, gradients, and the rows' SGD step inside backward),
its sampler, `Word2Vec(shared_negatives=True)` in one and several workers, files, and bad
input."""
import numpy as np
import pytest

import fastad as fa
from fastad.data import SharedNegativeSampler
from fastad.models.text._shared import window_loss


def reference(W, C, context, weights, target):
    """(loss, dW, dC) of one window in float64 numpy: each kept context row (weight != 0)
    scored against the centre (label 1) and the negatives (label 0), the logits' binary
    cross-entropy weighted by the row's weight; repeated ids add."""
    W, C = W.astype(np.float64), C.astype(np.float64)
    keep = np.asarray(weights) != 0
    rows, w = np.asarray(context)[keep], np.asarray(weights, dtype=np.float64)[keep]
    target = np.asarray(target)
    scores = W[rows] @ C[target].T
    labels = np.zeros(target.size)
    labels[0] = 1
    loss = float((w[:, None] * (np.logaddexp(0, scores) - scores * labels)).sum())
    g = w[:, None] * (1 / (1 + np.exp(-scores)) - labels)
    dW, dC = np.zeros_like(W), np.zeros_like(C)
    np.add.at(dW, rows, g @ C[target])
    np.add.at(dC, target, g.T @ W[rows])
    return loss, dW, dC


# a window of 6 slots: a repeated context word, two empty slots, a weight of 2; the target
# repeats a negative and holds the centre again as a negative
CONTEXT, WEIGHTS, TARGET = [3, 5, 3, 0, 9, 0], [1, 1, 1, 0, 2, 0], [4, 1, 1, 7, 4]


def tables(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 0.5, (12, 7)).astype(dtype), rng.normal(0, 0.5, (10, 7)).astype(dtype)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_window_loss_and_gradients_match_the_numpy_reference(dtype, tol):
    W0, C0 = tables(dtype)
    W, C = fa.Parameter(W0.copy(), dtype=dtype), fa.Parameter(C0.copy(), dtype=dtype)
    weights = fa.Input(np.array(WEIGHTS), dtype=dtype)
    loss = window_loss(W, fa.IndexInput(CONTEXT), weights, C, fa.IndexInput(TARGET))
    loss.backward()
    want, dW, dC = reference(W0, C0, CONTEXT, WEIGHTS, TARGET)
    assert loss.shape == () and loss.dtype == dtype
    assert abs(loss.item() - want) <= tol * abs(want)
    np.testing.assert_allclose(W.grad, dW, rtol=tol, atol=tol)
    np.testing.assert_allclose(C.grad, dC, rtol=tol, atol=tol)
    assert not W.grad[[0, 1, 2]].any()          # the empty slots' id 0 gets nothing


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_the_rows_steps_inside_fastad_train_match_the_reference(dtype, optimizer):
    # plain SGD: the node steps the rows in place; Adagrad: the rows go to its row step
    W0, C0 = tables(dtype, seed=1)
    W, C = fa.Parameter(W0.copy(), dtype=dtype), fa.Parameter(C0.copy(), dtype=dtype)
    context, target = fa.IndexInput(CONTEXT), fa.IndexInput(TARGET)
    weights = fa.Input(np.array(WEIGHTS), dtype=dtype)
    loss = window_loss(W, context, weights, C, target)
    lr = 0.1
    opt = fa.optim.SGD([W, C], lr=lr) if optimizer == "sgd" else fa.optim.Adagrad([W, C], lr=lr)
    fa.train(loss, opt, {context: np.array([CONTEXT]), weights: np.array([WEIGHTS], dtype=dtype),
                         target: np.array([TARGET])})
    _, dW, dC = reference(W0, C0, CONTEXT, WEIGHTS, TARGET)
    if optimizer == "adagrad":      # one step of Adagrad from zero state: lr * g / (sqrt(g^2) + eps)
        eps = opt.eps
        dW = np.where(dW != 0, dW / (np.abs(dW) + eps), 0)
        dC = np.where(dC != 0, dC / (np.abs(dC) + eps), 0)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(W.numpy(), W0 - lr * dW, rtol=tol, atol=tol)
    np.testing.assert_allclose(C.numpy(), C0 - lr * dC, rtol=tol, atol=tol)


def grouped_reference(W, C, context, weights, target, groups):
    """(loss, dW, dC) of one window whose kept context rows (weight != 0, in slot order) go in
    order to min(groups, n) groups, group g taking rows g n // groups up to (g + 1) n // groups,
    each scored against the centre and its own k negatives, target[1 + g k : 1 + (g + 1) k]:
    the sum of `reference` over the groups."""
    keep = np.flatnonzero(np.asarray(weights) != 0)
    n, k = keep.size, (len(target) - 1) // groups
    used = min(groups, n)
    loss, dW, dC = 0.0, np.zeros(W.shape), np.zeros(C.shape)
    for g in range(used):
        rows = keep[g * n // used:(g + 1) * n // used]
        part = reference(W, C, np.asarray(context)[rows], np.asarray(weights)[rows],
                         [target[0]] + list(target[1 + g * k:1 + (g + 1) * k]))
        loss, dW, dC = loss + part[0], dW + part[1], dC + part[2]
    return loss, dW, dC


# seven kept context rows (a repeated word, an empty slot between them) and two groups of three
# negatives: the first group repeats a negative and holds the centre again, and the second shares
# a negative with the first; with three groups the rows split 2, 2, 3
GROUP_CONTEXT, GROUP_WEIGHTS = [3, 5, 3, 0, 9, 2, 8, 11, 0, 6], [1, 1, 1, 0, 2, 1, 1, 1, 0, 1]
GROUP_TARGETS = {2: [4, 1, 1, 4, 7, 2, 1], 3: [4, 1, 1, 4, 7, 2, 1, 0, 9, 6]}


@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_each_group_of_context_words_is_scored_against_its_own_negatives(groups, dtype, tol):
    W0, C0 = tables(dtype)
    target = GROUP_TARGETS[groups]
    W, C = fa.Parameter(W0.copy(), dtype=dtype), fa.Parameter(C0.copy(), dtype=dtype)
    weights = fa.Input(np.array(GROUP_WEIGHTS), dtype=dtype)
    loss = window_loss(W, fa.IndexInput(GROUP_CONTEXT), weights, C, fa.IndexInput(target), groups)
    loss.backward()
    want, dW, dC = grouped_reference(W0, C0, GROUP_CONTEXT, GROUP_WEIGHTS, target, groups)
    assert abs(loss.item() - want) <= tol * abs(want)
    np.testing.assert_allclose(W.grad, dW, rtol=tol, atol=tol)
    np.testing.assert_allclose(C.grad, dC, rtol=tol, atol=tol)
    # not the window against all of its negatives at once, nor against the first group's alone
    everything = reference(W0, C0, GROUP_CONTEXT, GROUP_WEIGHTS, target)[0]
    first = reference(W0, C0, GROUP_CONTEXT, GROUP_WEIGHTS, target[:1 + (len(target) - 1) // groups])[0]
    assert abs(everything - want) > 0.1 and abs(first - want) > 0.01


@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_groups_rows_step_in_place_as_the_reference_and_fewer_words_than_groups_leave_negatives_unread(
        groups, dtype):
    W0, C0 = tables(dtype, seed=2)
    lr, tol = 0.1, (1e-12 if dtype == np.float64 else 2e-6)
    target = GROUP_TARGETS[groups]
    # the window with all its words, then one with two words (two groups of one word: with three
    # groups the third's negatives, rows 0, 9 and 6, are neither read nor stepped)
    short = [5, 0, 0, 0, 0, 0, 0, 0, 0, 3], [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    for context_ids, weight_values in [(GROUP_CONTEXT, GROUP_WEIGHTS), short]:
        W, C = fa.Parameter(W0.copy(), dtype=dtype), fa.Parameter(C0.copy(), dtype=dtype)
        context, tgt = fa.IndexInput(context_ids), fa.IndexInput(target)
        weights = fa.Input(np.array(weight_values), dtype=dtype)
        loss = window_loss(W, context, weights, C, tgt, groups)
        fa.train(loss, fa.optim.SGD([W, C], lr=lr), {context: np.array([context_ids]), tgt: np.array([target]),
                                                    weights: np.array([weight_values], dtype=dtype)})
        _, dW, dC = grouped_reference(W0, C0, context_ids, weight_values, target, groups)
        np.testing.assert_allclose(W.numpy(), W0 - lr * dW, rtol=tol, atol=tol)
        np.testing.assert_allclose(C.numpy(), C0 - lr * dC, rtol=tol, atol=tol)
    assert np.array_equal(C.numpy()[[0, 6, 9]], C0[[0, 6, 9]])


def sequential_centre_step(W, C, context, weights, target, groups, lr):
    """(W, C) after one in-place SGD step of lr with `sequential_centre`: the gradients of
    `grouped_reference` (the scores as the window found them), except that context row i
    steps against the centre's row as the steps of rows 0..i-1 left it, in float64."""
    W, C = W.astype(np.float64), C.astype(np.float64)
    keep = np.flatnonzero(np.asarray(weights) != 0)
    n, k = keep.size, (len(target) - 1) // groups
    used = min(groups, n)
    newW = W.copy()
    running = C[target[0]].copy()
    for g in range(used):
        negatives = list(target[1 + g * k:1 + (g + 1) * k])
        for i in keep[g * n // used:(g + 1) * n // used]:
            row, weight = context[i], weights[i]
            scores = W[row] @ C[[target[0]] + negatives].T
            grad = weight * (1 / (1 + np.exp(-scores)) - np.eye(1, 1 + k)[0])
            newW[row] -= lr * (grad[0] * running + grad[1:] @ C[negatives])
            running -= lr * grad[0] * W[row]
    _, _, dC = grouped_reference(W, C, context, weights, target, groups)
    return newW, C - lr * dC


@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sequential_centre_steps_each_context_row_against_the_centre_the_rows_before_left(groups, dtype):
    W0, C0 = tables(dtype, seed=3)
    W0 *= 4                                      # steps large enough for the order to show
    lr, tol = 0.5, (1e-12 if dtype == np.float64 else 5e-6)
    target = GROUP_TARGETS.get(groups, TARGET)
    context_ids, weight_values = (GROUP_CONTEXT, GROUP_WEIGHTS) if groups > 1 else (CONTEXT, WEIGHTS)
    results = {}
    for sequential in (True, False):
        W, C = fa.Parameter(W0.copy(), dtype=dtype), fa.Parameter(C0.copy(), dtype=dtype)
        context, tgt = fa.IndexInput(context_ids), fa.IndexInput(target)
        weights = fa.Input(np.array(weight_values), dtype=dtype)
        loss = window_loss(W, context, weights, C, tgt, groups, sequential_centre=sequential)
        history = fa.train(loss, fa.optim.SGD([W, C], lr=lr),
                           {context: np.array([context_ids]), tgt: np.array([target]),
                            weights: np.array([weight_values], dtype=dtype)})
        results[sequential] = W.numpy().copy(), C.numpy().copy(), history
    wantW, wantC = sequential_centre_step(W0, C0, context_ids, weight_values, target, groups, lr)
    np.testing.assert_allclose(results[True][0], wantW, rtol=tol, atol=tol)
    np.testing.assert_allclose(results[True][1], wantC, rtol=tol, atol=tol)
    # the output rows and the loss are the simultaneous step's; the context rows are not
    np.testing.assert_allclose(results[True][1], results[False][1], rtol=tol, atol=tol)
    assert results[True][2] == results[False][2]
    assert np.abs(results[True][0] - results[False][0]).max() > 1e-3


def test_sequential_centre_leaves_the_gradients_sent_to_other_optimizers_as_they_are():
    W0, C0 = tables(np.float64, seed=4)
    grads = []
    for sequential in (True, False):
        W, C = fa.Parameter(W0.copy()), fa.Parameter(C0.copy())
        weights = fa.Input(np.array(WEIGHTS, dtype=np.float64))
        window_loss(W, fa.IndexInput(CONTEXT), weights, C, fa.IndexInput(TARGET),
                    sequential_centre=sequential).backward()
        grads.append((W.grad.copy(), C.grad.copy()))
    assert all(np.array_equal(a, b) for a, b in zip(*grads))


def test_window_loss_groups_are_checked():
    W, C = fa.Parameter(np.zeros((5, 3))), fa.Parameter(np.zeros((4, 3)))
    ctx, weights = fa.IndexInput([0, 1]), fa.Input(np.ones(2))
    with pytest.raises(ValueError, match="target must hold the centre, then k >= 1 negatives for each of the 2"):
        window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2, 3]), 2)
    with pytest.raises(ValueError, match="for each of the 3 group"):
        window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2]), 3)
    with pytest.raises(ValueError, match="groups must be >= 1"):
        window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2]), 0)
    with pytest.raises(TypeError, match="groups must be an int"):
        window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2]), 1.0)
    with pytest.raises(TypeError, match="sequential_centre must be a bool"):
        window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2]), sequential_centre=1)
    assert window_loss(W, ctx, weights, C, fa.IndexInput([0, 1, 2]), 2).item() == pytest.approx(4 * np.log(2))


def test_window_loss_arguments_are_checked():
    W, C = fa.Parameter(np.zeros((5, 3))), fa.Parameter(np.zeros((4, 3)))
    ctx, tgt = fa.IndexInput([0, 1]), fa.IndexInput([0, 1, 2])
    with pytest.raises(ValueError, match="weights must be an Input of 2 values"):
        window_loss(W, ctx, fa.Input(np.zeros(3)), C, tgt)
    with pytest.raises(ValueError, match="weights must be an Input of 2 values"):
        window_loss(W, ctx, fa.Parameter(np.zeros(2)), C, tgt)
    with pytest.raises(TypeError):
        window_loss(W, ctx, fa.Input(np.zeros(2), dtype=np.float64), C, tgt)
    with pytest.raises(ValueError, match="context must be a non-empty 1-D"):
        window_loss(W, fa.IndexInput([[0, 1]]), fa.Input(np.zeros(2)), C, tgt)
    loss = window_loss(W, ctx, fa.Input(np.ones(2)), C, tgt)
    tgt.set_value([0, 1, 4])
    with pytest.raises(IndexError):
        loss.forward()


def test_the_sampler_fills_a_whole_window_and_shares_the_centres_negatives():
    tokens = np.array([0, 1, 2, 3, 4, 5])
    context, weights, target = fa.IndexInput([0] * 4), fa.Input(np.zeros(4)), fa.IndexInput([0] * 4)
    sampler = SharedNegativeSampler(tokens, context, weights, target, window=2, seed=0)
    drawn = [(c.tolist(), w.tolist(), t.tolist()) for c, w, t in sampler.epoch()]
    assert [t[0] for _, _, t in drawn] == [0, 1, 2, 3, 4, 5]        # every centre, once
    for k, (c, w, t) in enumerate(drawn):
        n = int(sum(w))
        assert w == [1.0] * n + [0.0] * (4 - n) and 1 <= n <= 4
        assert all(abs(word - k) <= 2 and word != k for word in c[:n]) and c[n:] == [0] * (4 - n)
        assert len(t) == 4            # the centre, then 3 negatives
    assert sampler.epoch_pairs == sum(sum(w) for _, w, _ in drawn)
    assert sampler.epoch_examples == 6
    with pytest.raises(ValueError, match="SharedNegativeSampler: context must hold 2 \\* window = 6 ids"):
        SharedNegativeSampler(tokens, context, weights, target, window=3)
    with pytest.raises(ValueError, match="SharedNegativeSampler: window"):
        SharedNegativeSampler(tokens, context, weights, target, window=0)
    with pytest.raises(ValueError, match="SharedNegativeSampler: target must hold the centre and at least one"):
        SharedNegativeSampler(tokens, context, weights, fa.IndexInput([0]), window=2)


def topics_corpus(sentences=400, seed=0):
    """Sentences of one topic each: words a0..a7 or b0..b7, never mixed."""
    rng = np.random.default_rng(seed)
    return [[f"{'ab'[k % 2]}{i}" for i in rng.integers(0, 8, 12)] for k in range(sentences)]


SETTINGS = dict(dim=16, window=3, negative=4, min_count=1, sample=0, epochs=5, shared_negatives=True)


def test_word2vec_with_shared_negatives_learns_the_topics_deterministically():
    corpus = topics_corpus()
    losses = []
    model = fa.models.Word2Vec(seed=3, **SETTINGS).fit(corpus, callback=lambda e, loss: losses.append(loss))
    assert len(losses) == 5 and losses[-1] < losses[0]
    near = [w for w, _ in model.most_similar("a0", topn=5)]
    assert all(w.startswith("a") for w in near)
    again = fa.models.Word2Vec(seed=3, **SETTINGS).fit(corpus)
    assert np.array_equal(model.vectors, again.vectors)
    pairs = fa.models.Word2Vec(seed=3, **dict(SETTINGS, shared_negatives=False)).fit(corpus)
    assert not np.array_equal(model.vectors, pairs.vectors)       # the option reaches the training


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_hogwild_workers_train_the_shared_form(start_method, groups):
    model = fa.models.Word2Vec(seed=1, workers=2, negative_groups=groups, **SETTINGS).fit(
        topics_corpus(), start_method=start_method)
    near = [w for w, _ in model.most_similar("b2", topn=5)]
    assert all(w.startswith("b") for w in near), near


def test_negative_groups_reach_the_training_are_kept_and_checked(tmp_path):
    corpus = topics_corpus(100)
    one = fa.models.Word2Vec(seed=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    two = fa.models.Word2Vec(seed=2, negative_groups=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    assert one.negative_groups == 1 and not np.array_equal(one.vectors, two.vectors)
    again = fa.models.Word2Vec(seed=2, negative_groups=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    assert np.array_equal(two.vectors, again.vectors)
    two.save(tmp_path / "two.npz")
    assert fa.models.Word2Vec.load(tmp_path / "two.npz").negative_groups == 2
    with pytest.raises(ValueError, match="negative_groups .* must be >= 1, got 0"):
        fa.models.Word2Vec(shared_negatives=True, negative_groups=0)
    with pytest.raises(TypeError, match="negative_groups .* must be an int"):
        fa.models.Word2Vec(shared_negatives=True, negative_groups=2.0)


def test_word2vec_steps_the_centre_after_each_context_word(monkeypatch):
    # the same fit with the centre's steps taken together (pWord2Vec's order) ends elsewhere
    from fastad.models.text import word2vec
    corpus = topics_corpus(100)
    ordered = fa.models.Word2Vec(seed=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    real = word2vec.window_loss
    monkeypatch.setattr(word2vec, "window_loss", lambda *a, **kw: real(*a, **dict(kw, sequential_centre=False)))
    together = fa.models.Word2Vec(seed=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    assert not np.array_equal(ordered.vectors, together.vectors)


def test_bad_input_gives_the_errors_of_the_pair_form():
    with pytest.raises(ValueError, match="window"):
        fa.models.Word2Vec(window=0, shared_negatives=True)
    with pytest.raises(ValueError, match="negative"):
        fa.models.Word2Vec(negative=0, shared_negatives=True)
    with pytest.raises(ValueError, match="empty"):
        fa.models.Word2Vec(shared_negatives=True).fit([[], []])
    with pytest.raises(ValueError, match="min_count=1 leaves 1 word"):
        fa.models.Word2Vec(min_count=1, shared_negatives=True).fit([["only", "only"]])
    with pytest.raises(ValueError, match="shared_negatives=True is a form of skip-gram"):
        fa.models.Word2Vec(sg=False, shared_negatives=True)
    with pytest.raises(TypeError, match="shared_negatives"):
        fa.models.Word2Vec(shared_negatives="yes")
    model = fa.models.Word2Vec(**SETTINGS)
    with pytest.raises(ValueError, match="one window a step"):
        model.fit(topics_corpus(20), batch_size=4)
    assert model.vectors is None          # refused before any pass


def test_save_load_keeps_the_option_and_a_loaded_model_trains_on_with_either_form(tmp_path):
    corpus = topics_corpus(100)
    model = fa.models.Word2Vec(seed=2, **dict(SETTINGS, epochs=1)).fit(corpus)
    model.save(tmp_path / "shared.npz")
    back = fa.models.Word2Vec.load(tmp_path / "shared.npz")
    assert back.shared_negatives is True and np.array_equal(back.vectors, model.vectors)
    # switching is a training setting: the tables are the same, so the loaded model trains on
    # with the pair form, and the file it saves then records the form it holds
    back.shared_negatives = False
    back.train(corpus, epochs=1)
    back.save(tmp_path / "pairs.npz")
    assert fa.models.Word2Vec.load(tmp_path / "pairs.npz").shared_negatives is False
    # a setting that the shared form does not train is refused when training, not later
    cbow = fa.models.Word2Vec(sg=False, min_count=1, dim=8, epochs=1).fit(corpus)
    cbow.shared_negatives = True
    with pytest.raises(ValueError, match="a form of skip-gram"):
        cbow.train(corpus)


# ---------------------------------------------------------------- FastText's shared form

def test_the_subword_sampler_scores_the_centres_bag_against_its_window_and_shared_negatives():
    from fastad.data import SubwordSharedNegativeSampler
    words = ["ab", "cd", "ef", "gh", "ij", "kl"]
    ids, offsets = fa.text.subword_table(words, 3, 4, 50)
    bag, cut = fa.IndexInput([0] * int(np.diff(offsets).max())), fa.IndexInput([0, 0])
    scored, weights = fa.IndexInput([0] * 7), fa.Input(np.zeros(7))          # window 2: 4 slots, k = 3
    sampler = SubwordSharedNegativeSampler(np.arange(6), bag, cut, scored, weights, subword_ids=ids,
                                           subword_offsets=offsets, window=2, seed=0)
    drawn = [(b[:c[1]].tolist(), s.tolist(), w.tolist()) for b, c, s, w in sampler.epoch()]
    assert len(drawn) == 6
    for centre, (rows, s, w) in enumerate(drawn):
        n = int(sum(w[:4]))
        assert rows == ids[offsets[centre]:offsets[centre + 1]].tolist()      # the centre's own bag
        assert w[:4] == [1.0] * n + [0.0] * (4 - n) and w[4:] == [float(n)] * 3
        assert all(abs(word - centre) <= 2 and word != centre for word in s[:n]) and s[n:4] == [0] * (4 - n)
    assert sampler.epoch_pairs == sum(sum(w[:4]) for _, _, w in drawn)
    with pytest.raises(ValueError, match="needs no mask"):
        SubwordSharedNegativeSampler(np.arange(6), bag, cut, scored, weights, subword_ids=ids,
                                     subword_offsets=offsets, window=2, mask=fa.Input(np.ones(1)))
    with pytest.raises(ValueError, match="scored must hold 2 \\* window = 4 ids of the window and at least one"):
        SubwordSharedNegativeSampler(np.arange(6), bag, cut, fa.IndexInput([0] * 4), fa.Input(np.zeros(4)),
                                     subword_ids=ids, subword_offsets=offsets, window=2)


def test_fasttexts_shared_loss_is_the_sum_of_its_windows_pair_losses():
    from fastad.models.text.fasttext import _shared_graph
    rng = np.random.default_rng(4)
    W0, C0 = rng.normal(0, 0.5, (30, 5)), rng.normal(0, 0.5, (9, 5))
    W, C = fa.Parameter(W0, dtype=np.float64), fa.Parameter(C0, dtype=np.float64)
    (bag, cut, scored, weights), loss = _shared_graph(W, C, dict(window=2, negative=3, bag_capacity=4))
    bag.set_value([7, 21, 3, 0]), cut.set_value([0, 3])
    scored.set_value([[4, 6, 0, 0, 1, 8, 8]]), weights.set_value(np.array([[1, 1, 0, 0, 2, 2, 2.0]]))
    loss.forward()
    h = W0[[7, 21, 3]].mean(axis=0)
    softplus = lambda x: np.logaddexp(0, x)
    pairs = [softplus(-h @ C0[c]) + sum(softplus(h @ C0[j]) for j in (1, 8, 8)) for c in (4, 6)]
    assert abs(loss.item() - sum(pairs)) < 1e-12


def test_fasttext_with_shared_negatives_learns_saves_and_refuses_cbow(tmp_path):
    settings = dict(SETTINGS, bucket=1_000, seed=1)
    model = fa.models.FastText(**settings).fit(topics_corpus())
    near = [w for w, _ in model.wv.most_similar("a0", topn=5)]
    assert all(w.startswith("a") for w in near), near
    assert model.history[-1] < model.history[0]
    model.save(tmp_path / "ft.npz")
    back = fa.models.FastText.load(tmp_path / "ft.npz")
    assert back.shared_negatives is True and np.array_equal(back.vectors, model.vectors)
    with pytest.raises(ValueError, match="a form of skip-gram"):
        fa.models.FastText(sg=False, shared_negatives=True)
