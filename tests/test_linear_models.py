"""fa.models.LinearModel and FactorizationMachine: the per-example updates against numpy
loops, the factorization machine's pairs against brute force, labels, importance weights,
Hogwild workers, save/load and bad input."""
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa


def _data(n=400, features=50, seed=0, valued=False):
    """Sparse examples of 1-8 features (values 1, or in [0.5, 2]) and planted logistic labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, n)
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    indices = np.concatenate([np.sort(rng.choice(features, k, replace=False)) for k in lengths])
    values = rng.uniform(0.5, 2, indices.size) if valued else np.ones(indices.size)
    X = sp.csr_matrix((values.astype(np.float32), indices, indptr), shape=(n, features))
    truth = rng.normal(size=features)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ truth)))).astype(np.int64)
    return X, y


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


@pytest.mark.parametrize("valued", [False, True])
def test_logistic_sgd_is_the_per_example_update(valued):
    X, y = _data(valued=valued)
    model = fa.models.LinearModel(loss="logistic", optimizer="sgd", lr=0.1).fit(X, y)
    w, b = np.zeros(X.shape[1]), 0.0
    for r in range(X.shape[0]):
        row = X.getrow(r)
        g = _sigmoid(b + row.data @ w[row.indices]) - y[r]
        w[row.indices] -= 0.1 * g * row.data
        b -= 0.1 * g
    np.testing.assert_allclose(model.weights["W"], w, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(model.weights["b"], [b], rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(model.decision_function(X), X @ w + b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("loss, targets", [("squared", lambda y: y), ("hinge", lambda y: 2 * y - 1)])
def test_squared_and_hinge_sgd_are_their_per_example_updates(loss, targets):
    X, y = _data(seed=1, valued=True)
    t = targets(y).astype(np.float64)
    model = fa.models.LinearModel(loss=loss, optimizer="sgd", lr=0.05).fit(X, y.astype(float) if loss == "squared" else y)
    w, b = np.zeros(X.shape[1]), 0.0
    for r in range(X.shape[0]):
        row = X.getrow(r)
        z = b + row.data @ w[row.indices]
        g = 2 * (z - t[r]) if loss == "squared" else (-t[r] if 1 - t[r] * z > 0 else 0.0)
        w[row.indices] -= 0.05 * g * row.data
        b -= 0.05 * g
    np.testing.assert_allclose(model.weights["W"], w, rtol=2e-4, atol=2e-6)


def test_factorization_machine_pairs_are_every_pair_of_features():
    X, y = _data(n=60, features=12, seed=2, valued=True)
    fm = fa.models.FactorizationMachine(k=4, init_std=0.3, passes=1, normalize=False).fit(X, y)
    V, W, b = fm.weights["V"][:12].astype(np.float64), fm.weights["W"][:12], fm.weights["b"][0]
    expected = []
    for r in range(X.shape[0]):
        row = X.getrow(r)
        pairs = sum(row.data[i] * row.data[j] * V[row.indices[i]] @ V[row.indices[j]]
                    for i in range(row.nnz) for j in range(i + 1, row.nnz))
        expected.append(b + row.data @ W[row.indices] + pairs)
    np.testing.assert_allclose(fm.decision_function(X), expected, rtol=1e-5, atol=1e-6)
    assert fm.weights["V"].shape == (13, 4) and not fm.weights["V"][12].any()   # the padding row


def _fm_start(X):
    """The factors a FactorizationMachine(k=3, init_std=0.2) draws for X's used rows of 20
    (seed 0), zero weights and bias, in float64."""
    V = np.zeros((20, 3))
    used = np.unique(X.indices)
    V[used] = np.random.default_rng(0).normal(0, 0.2, (used.size, 3))
    return V, np.zeros(20), 0.0


def _fm_gradients(X, y, r, V, w, b):
    """(ids, values, the logit's loss slope g, the factors' gradient) of example r."""
    row = X.getrow(r)
    ids, x = row.indices, row.data.astype(np.float64)
    s = x @ V[ids]
    z = b + x @ w[ids] + 0.5 * (s @ s - ((x[:, None] * V[ids]) ** 2).sum())
    g = _sigmoid(z) - y[r]
    return ids, x, g, g * (x[:, None] * s[None, :] - (x ** 2)[:, None] * V[ids])


@pytest.mark.parametrize("valued", [False, True])
def test_factorization_machine_sgd_is_the_per_example_update(valued):
    X, y = _data(n=150, features=20, seed=3, valued=valued)
    fm = fa.models.FactorizationMachine(k=3, init_std=0.2, optimizer="sgd", lr=0.05, normalize=False).fit(X, y)
    V, w, b = _fm_start(X)
    for r in range(X.shape[0]):
        ids, x, g, grad_V = _fm_gradients(X, y, r, V, w, b)
        w[ids] -= 0.05 * g * x
        V[ids] -= 0.05 * grad_V
        b -= 0.05 * g
    np.testing.assert_allclose(fm.weights["V"][:20], V, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(fm.weights["W"][:20], w, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("valued", [False, True])
def test_factorization_machine_adagrad_is_libffms_per_example_step(valued):
    """The default optimizer trains in ffm.h's compiled loop (one field, the O(len k) form):
    AdaGrad from accumulators of 1, each step from the example's gradient in float64."""
    X, y = _data(n=150, features=20, seed=3, valued=valued)
    fm = fa.models.FactorizationMachine(k=3, init_std=0.2, lr=0.1, normalize=False).fit(X, y)
    V, w, b = _fm_start(X)
    GV, Gw, Gb = np.ones_like(V), np.ones_like(w), 1.0
    for r in range(X.shape[0]):
        ids, x, g, grad_V = _fm_gradients(X, y, r, V, w, b)
        Gb += g ** 2
        b -= 0.1 * g / np.sqrt(Gb)
        Gw[ids] += (g * x) ** 2
        w[ids] -= 0.1 * g * x / np.sqrt(Gw[ids])
        GV[ids] += grad_V ** 2
        V[ids] -= 0.1 * grad_V / np.sqrt(GV[ids])
    np.testing.assert_allclose(fm.weights["V"][:20], V, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(fm.weights["W"][:20], w, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(fm.weights["b"][0], b, rtol=1e-3, atol=1e-5)


def _crossed_logit(W, b, V, ids, x, sides):
    """VW's --lrq logit in float64: the pairs of positions on sides 0 and 1 only."""
    z = b + sum(x[p] * W[ids[p]] for p in range(len(ids)))
    for p in range(len(ids)):
        for q in range(len(ids)):
            if sides[p] == 0 and sides[q] == 1:
                z += x[p] * x[q] * V[ids[p], 0] @ V[ids[q], 0]
    return z


@pytest.mark.parametrize("crossed", [False, True])
def test_factorization_machine_one_field_gradient_is_the_logits_finite_difference(crossed):
    from fastad.models.linear._online import FieldAwareUpdate
    rng = np.random.default_rng(22)
    weights = {"W": rng.normal(size=12).astype(np.float32), "b": np.array([0.3], np.float32),
               "V": rng.normal(size=(12, 1, 4)).astype(np.float32)}
    ids = np.array([1, 5, 5, 9, 2], np.int32)          # a feature twice, a position without a field
    x = np.array([1.0, 0.5, 2.0, -1.5, 1.0], np.float32)
    fields = np.array([0, 1, 0, 1, -1] if crossed else [0, 0, 0, 0, -1], np.int32)
    logit, grad = FieldAwareUpdate(weights, 0.1, True, crossed).gradient(ids, x, fields)
    W, b, V = (weights[n].astype(np.float64) for n in ("W", "b", "V"))
    reference = _crossed_logit if crossed else _ffm_logit
    assert logit == pytest.approx(reference(W, b[0], V, ids, x, fields), rel=1e-6)
    for p in range(len(ids)):
        for j in range(4):
            up, down = V.copy(), V.copy()
            up[ids[p], 0, j] += 1e-6
            down[ids[p], 0, j] -= 1e-6
            numeric = (reference(W, b[0], up, ids, x, fields) - reference(W, b[0], down, ids, x, fields)) / 2e-6
            analytic = sum(grad[q, 0, j] for q in range(len(ids)) if ids[q] == ids[p])
            assert analytic == pytest.approx(numeric, abs=1e-5), (p, j)


def test_labels_classes_and_probabilities():
    X, y = _data(seed=4)
    names = np.where(y == 1, "click", "skip")
    model = fa.models.LinearModel(passes=3).fit(X, names)
    assert list(model.classes_) == ["click", "skip"]
    proba = model.predict_proba(X)
    assert proba.shape == (X.shape[0], 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1)
    predicted = model.predict(X)
    np.testing.assert_array_equal(predicted, np.where(proba[:, 1] > 0.5, "skip", "click"))
    assert fa.metrics.roc_auc(names == "skip", proba[:, 1]) > 0.75      # it learned the planted rule
    dense = fa.models.LinearModel(passes=3).fit(X.toarray(), names)
    np.testing.assert_array_equal(dense.weights["W"], model.weights["W"])


def test_importance_weights_of_zero_train_nothing():
    X, y = _data(seed=5)
    keep = np.arange(X.shape[0]) % 3 != 0
    weighted = fa.models.LinearModel(optimizer="sgd").fit(X, y, sample_weight=keep.astype(float))
    kept = fa.models.LinearModel(optimizer="sgd").fit(X[keep], y[keep])
    np.testing.assert_array_equal(weighted.weights["W"], kept.weights["W"])
    doubled = fa.models.LinearModel(optimizer="sgd").fit(X, y, sample_weight=np.full(X.shape[0], 2.0))
    twice_lr = fa.models.LinearModel(optimizer="sgd", lr=0.2).fit(X, y)
    np.testing.assert_allclose(doubled.weights["W"], twice_lr.weights["W"], rtol=1e-5, atol=1e-6)


def test_hogwild_workers_and_save_load(tmp_path):
    X, y = _data(n=2000, seed=6)
    fm = fa.models.FactorizationMachine(k=4, passes=2, workers=2, shuffle=True).fit(
        X, y, start_method="threads")
    assert fa.metrics.roc_auc(y, fm.decision_function(X)) > 0.75
    fm.save(tmp_path / "fm.npz")
    back = fa.models.FactorizationMachine.load(tmp_path / "fm.npz")
    np.testing.assert_array_equal(back.decision_function(X), fm.decision_function(X))
    assert back.k == 4 and list(back.classes_) == [0, 1]
    reg = fa.models.LinearModel(loss="squared").fit(X, y.astype(float))
    reg.save(tmp_path / "reg.safetensors")
    np.testing.assert_array_equal(fa.models.LinearModel.load(tmp_path / "reg.safetensors").predict(X),
                                  reg.predict(X))


def test_bad_input():
    X, y = _data(seed=7)
    with pytest.raises(ValueError, match=r"y must hold one label per example \(400\), got shape \(3,\)"):
        fa.models.LinearModel().fit(X, y[:3])
    with pytest.raises(ValueError, match="needs two classes, y holds 1"):
        fa.models.LinearModel().fit(X, np.zeros(400))
    bad = X.copy()
    bad.data[5] = np.nan
    with pytest.raises(ValueError, match="example 0 of X holds a value that is not finite"):
        fa.models.LinearModel().fit(bad, y)
    with pytest.raises(ValueError, match="sample_weight must hold one finite, non-negative weight"):
        fa.models.LinearModel().fit(X, y, sample_weight=-np.ones(400))
    with pytest.raises(ValueError, match="loss must be one of"):
        fa.models.LinearModel(loss="poisson")
    with pytest.raises(RuntimeError, match="not trained"):
        fa.models.FactorizationMachine().predict(X)
    model = fa.models.LinearModel(loss="hinge").fit(X, y)
    with pytest.raises(ValueError, match="X has 49 features"):
        model.predict(X[:, :49])
    with pytest.raises(ValueError, match="hinge loss gives no probabilities"):
        model.predict_proba(X)
    with pytest.raises(ValueError, match="squared loss takes finite numbers"):
        fa.models.LinearModel(loss="squared").fit(X, np.full(400, np.inf))


def _vw_file(path, n=600, seed=8):
    """A VW-format file of words (some repeated within a line), a site and importance
    weights on some lines, labels planted on two words."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{k}" for k in range(40)]
    lines, labels = [], []
    for r in range(n):
        words = rng.choice(vocabulary, rng.integers(2, 7))
        label = int(("w1" in words) or ("w2" in words and rng.random() < 0.8))
        importance = " 2" if r % 5 == 0 else ""
        lines.append(f"{label}{importance} |w {' '.join(words)} |s site={r % 7}\n")
        labels.append(label)
    path.write_text("".join(lines))
    return np.array(labels)


def test_fit_and_predict_from_a_vw_file_and_features(tmp_path):
    labels = _vw_file(tmp_path / "train.vw")
    hasher = fa.features.Hasher(bits=12, quadratic=["ws"])
    model = fa.models.LinearModel(passes=3, hasher=hasher).fit(tmp_path / "train.vw")
    features = fa.features.read_vw(tmp_path / "train.vw", hasher)
    same = fa.models.LinearModel(passes=3, hasher=hasher).fit(features)
    np.testing.assert_array_equal(model.weights["W"], same.weights["W"])
    assert model.n_features == 2 ** 12
    assert fa.metrics.roc_auc(labels, model.decision_function(tmp_path / "train.vw")) > 0.9
    unweighted = fa.models.LinearModel(passes=3, hasher=hasher).fit(
        features, sample_weight=np.ones(len(features)))
    assert not np.array_equal(unweighted.weights["W"], model.weights["W"])   # the file's weights count
    model.save(tmp_path / "m.npz")
    back = fa.models.LinearModel.load(tmp_path / "m.npz")
    assert back.hasher == hasher.settings()
    np.testing.assert_array_equal(back.decision_function(tmp_path / "train.vw"),
                                  model.decision_function(features))


def test_factorization_machine_counts_a_repeated_feature_at_each_position(tmp_path):
    (tmp_path / "r.vw").write_text("1 |w a a b\n0 |w b c c c\n1 |w a\n")
    hasher = fa.features.Hasher(bits=6, constant=False)
    fm = fa.models.FactorizationMachine(k=3, init_std=0.5, hasher=hasher, normalize=False).fit(tmp_path / "r.vw")
    f = fa.features.read_vw(tmp_path / "r.vw", hasher)
    V, W, b = fm.weights["V"].astype(np.float64), fm.weights["W"], fm.weights["b"][0]
    for r in range(3):
        ids, x = f.ids[f.offsets[r]:f.offsets[r + 1]], f.values[f.offsets[r]:f.offsets[r + 1]]
        pairs = sum(x[p] * x[q] * V[ids[p]] @ V[ids[q]] for p in range(ids.size)
                    for q in range(p + 1, ids.size))
        expected = b + x @ W[ids] + pairs
        assert fm.decision_function(f)[r] == pytest.approx(expected, rel=1e-5)
    ix, off = fa.IndexInput(np.zeros(4, np.int64)), fa.IndexInput([0, 0])
    graph = fm._logit({k: fa.Parameter(v) for k, v in fm.weights.items()}, ix, off, None)
    in_graph = fa.predict(graph, fa.data.BagSampler(ix, off, f.ids, f.offsets, pad=2 ** 6))
    np.testing.assert_allclose(in_graph.ravel(), fm.decision_function(f), rtol=1e-5)


def test_unlabelled_lines_are_refused_for_training(tmp_path):
    (tmp_path / "u.vw").write_text("1 |w a\n|w b\n")
    with pytest.raises(ValueError, match=r"example 1 has no label \(NaN\)"):
        fa.models.LinearModel().fit(tmp_path / "u.vw")
    with pytest.raises(ValueError, match="give y, the labels of X"):
        fa.models.LinearModel().fit(sp.csr_matrix(np.eye(3)))
    with pytest.raises(TypeError, match="hasher must be a fa.features.Hasher or its settings"):
        fa.models.LinearModel(hasher=18)


# ---------------------------------------------------------------- optimizer="vw"

def test_vw_update_is_vowpal_wabbits(tmp_path):
    """The default update trains as VW's own (adaptive, normalised, invariant) on one file:
    our b plays VW's constant feature when the hasher adds none. (VW's squared and quantile
    losses train on the prediction clipped to the range of the labels seen so far, which
    ours do not.)"""
    pyvw = pytest.importorskip("vowpalwabbit.pyvw")
    rng = np.random.default_rng(11)
    lines = []
    for r in range(800):
        words = rng.choice(30, rng.integers(2, 6))
        label = 1 if (3 in words or 4 in words) != (rng.random() < 0.1) else -1
        weight = " 3" if r % 7 == 0 else ""
        lines.append(f"{label}{weight} |w {' '.join(f'w{k}:{1 + k % 3}' for k in words)} |s site={r % 5}\n")
    (tmp_path / "t.vw").write_text("".join(lines))
    for loss in ("logistic", "hinge"):
        ours = fa.models.LinearModel(loss=loss, hasher=fa.features.Hasher(bits=16, constant=False)).fit(
            tmp_path / "t.vw").decision_function(tmp_path / "t.vw")
        model, preds = tmp_path / "vw.model", tmp_path / "vw.preds"
        train = pyvw.Workspace(f"--quiet --loss_function {loss} -b 16 -d {tmp_path / 't.vw'} -f {model}")
        train.run_parser()
        train.finish()
        score = pyvw.Workspace(f"--quiet -t -i {model} -d {tmp_path / 't.vw'} -r {preds}")
        score.run_parser()
        score.finish()
        theirs = np.array([float(line.split()[0]) for line in preds.read_text().splitlines()])
        # VW approximates 1/sqrt and the logistic step (to ~1e-4); the rest is float rounding
        np.testing.assert_allclose(ours, theirs, atol=0.02 * np.abs(theirs).max(), err_msg=loss)


def test_vw_update_is_invariant_to_a_features_scale():
    """Normalised: a column multiplied by 1000 trains to the same predictions (its weight
    divided by 1000), where Adagrad's do not."""
    X, y = _data(seed=12, valued=True)
    scaled = X.tocsc(copy=True)
    scaled.data[scaled.indptr[3]:scaled.indptr[4]] *= 1000
    scaled = scaled.tocsr()
    for optimizer, same in (("vw", True), ("adagrad", False)):
        plain = fa.models.LinearModel(optimizer=optimizer, passes=2).fit(X, y)
        big = fa.models.LinearModel(optimizer=optimizer, passes=2).fit(scaled, y)
        close = np.allclose(plain.decision_function(X), big.decision_function(scaled), rtol=1e-4, atol=1e-4)
        assert close == same, optimizer
    assert big.weights["W"][3] != 0


@pytest.mark.parametrize("loss, label", [("squared", 3.0), ("quantile", 3.0), ("logistic", 1), ("hinge", 1)])
def test_vw_update_never_steps_past_the_label(loss, label):
    """Invariant: one example of a huge importance weight moves the prediction to the label
    (squared, quantile, hinge's margin) or towards it without passing (logistic), as if
    it were seen that many times in small steps."""
    X = sp.csr_matrix(np.array([[1.0, 2.0, 0.5], [1.0, 0.0, 0.0]], np.float32))
    y = np.array([label, -label if loss == "hinge" else 0 if loss == "logistic" else 0.0])
    model = fa.models.LinearModel(loss=loss).fit(X, y, sample_weight=[1e6, 0.0])
    p = model.decision_function(X[:1])[0]
    if loss in ("squared", "quantile"):
        assert p == pytest.approx(label, rel=1e-3)
    elif loss == "hinge":
        assert p == pytest.approx(1.0, rel=1e-3)
    else:
        assert 5 < p < 40              # the logistic loss has no minimum: far, but finite
    small = fa.models.LinearModel(loss=loss, optimizer="sgd", lr=0.5).fit(X, y, sample_weight=[1e6, 0.0])
    assert abs(small.decision_function(X[:1])[0]) > 1e3     # a plain step flies past


def test_vw_update_skips_examples_of_importance_zero():
    """An importance of 0 trains nothing and counts in no running sum: as if the example
    were left out."""
    X, y = _data(seed=19, valued=True)
    keep = np.arange(X.shape[0]) % 3 != 0
    weighted = fa.models.LinearModel(passes=2).fit(X, y, sample_weight=keep.astype(float))
    kept = fa.models.LinearModel(passes=2).fit(X[keep], y[keep])
    np.testing.assert_array_equal(weighted.weights["W"], kept.weights["W"])
    np.testing.assert_array_equal(weighted.weights["b"], kept.weights["b"])


def test_vw_update_hogwild_threads_and_progress():
    X, y = _data(n=3000, seed=13)
    seen = []
    model = fa.models.LinearModel(passes=3, workers=2, shuffle=True).fit(
        X, y, callback=lambda epoch, loss: seen.append((epoch, loss)))
    assert [epoch for epoch, _ in seen] == [1, 2, 3] and seen[2][1] < seen[0][1]
    assert fa.metrics.roc_auc(y, model.decision_function(X)) > 0.8
    with pytest.raises(ValueError, match="optimizer 'vw' runs its workers as threads"):
        fa.models.LinearModel(workers=2).fit(X, y, start_method="spawn")
    with pytest.raises(TypeError, match="optimizer 'vw' takes no optimizer_options"):
        fa.models.LinearModel(optimizer_options={"l1": 1.0})
    assert fa.models.LinearModel().lr == 0.5 and fa.models.LinearModel(optimizer="sgd").lr == 0.1


def _streamed_file(path, labels, seed=21):
    """A VW file of the given labels (values -1/+1, or classes), words planted on them."""
    rng = np.random.default_rng(seed)
    lines = []
    for r, label in enumerate(labels):
        words = [f"c{label}"] * int(rng.random() < 0.7) + [f"n{k}" for k in rng.integers(0, 30, 3)]
        importance = " 3" if r % 4 == 0 else ""
        lines.append(f"{label}{importance} |w {' '.join(words)} |s v:{rng.uniform(0.5, 2):.3f}\n")
    path.write_text("".join(lines))


@pytest.mark.parametrize("loss, oaa, workers", [("logistic", None, 1), ("hinge", None, 1),
                                                ("squared", None, 1), ("logistic", 3, 1),
                                                ("logistic", None, 2)])
def test_vw_update_from_a_path_streams_chunks_as_the_whole_file(tmp_path, monkeypatch, loss, oaa, workers):
    """fit(path) with optimizer="vw" trains CHUNK examples at a time as the file is parsed (in
    a thread of its own): at one worker bit for bit the whole file's training, the first
    chunks held back until they show a binary loss's two classes (here the first 13 lines
    are all -1)."""
    from fastad.models.linear import linear_model
    rng = np.random.default_rng(22)
    labels = rng.integers(1, 4, 300) if oaa else np.where(np.arange(300) < 13, -1, rng.choice([-1, 1], 300))
    _streamed_file(tmp_path / "s.vw", labels)
    threads = []
    original = linear_model.iter_vw

    def recorded(*args, **kwargs):
        for chunk in original(*args, **kwargs):
            threads.append(threading.current_thread().name)
            yield chunk

    monkeypatch.setattr(linear_model, "CHUNK", 5)
    monkeypatch.setattr(linear_model, "iter_vw", recorded)
    hasher = fa.features.Hasher(bits=9)
    settings = dict(loss=loss, oaa=oaa, passes=2, hasher=hasher, workers=workers)
    streamed = fa.models.LinearModel(**settings).fit(tmp_path / "s.vw")
    assert len(threads) == 60 and set(threads) == {"fastad-parse"}
    whole = fa.models.LinearModel(**settings).fit(fa.features.read_vw(tmp_path / "s.vw", hasher))
    np.testing.assert_array_equal(streamed.classes_, whole.classes_)
    if workers == 1:
        np.testing.assert_allclose(streamed.history, whole.history, rtol=1e-6)
        np.testing.assert_array_equal(streamed.weights["W"], whole.weights["W"])
        np.testing.assert_array_equal(streamed.weights["b"], whole.weights["b"])
    else:
        assert fa.metrics.roc_auc(labels > 0, streamed.decision_function(tmp_path / "s.vw")) > 0.8
    assert not [t for t in threading.enumerate() if t.name == "fastad-parse"]


def test_vw_update_from_a_path_raises_a_chunks_errors(tmp_path, monkeypatch):
    """A streamed file's bad line, unlabelled example, third class or single class raises
    as the whole file's would, the parsing thread ended and the model untouched."""
    from fastad.models.linear import linear_model
    monkeypatch.setattr(linear_model, "CHUNK", 4)
    hasher = fa.features.Hasher(bits=8)
    model = fa.models.LinearModel(hasher=hasher)
    cases = {"-1 |w a\n1 |w b\n" * 5 + "1 |w c:x\n": r"line 11, column 8: feature 'c:x'",
             "-1 |w a\n1 |w b\n" * 5 + "|w c\n": r"example 10 has no label \(NaN\)",
             "-1 |w a\n1 |w b\n" * 5 + "2 |w c\n": r"needs two classes, y holds 3: \[-1.  1.  2.\]",
             "1 |w a\n" * 9: r"needs two classes, y holds 1",
             "": r"holds no examples"}
    for text, message in cases.items():
        (tmp_path / "bad.vw").write_text(text)
        with pytest.raises(ValueError, match=message):
            model.fit(tmp_path / "bad.vw")
        assert model.weights is None
        assert not [t for t in threading.enumerate() if t.name == "fastad-parse"]


def test_factorization_machine_refuses_the_vw_update():
    with pytest.raises(ValueError, match="optimizer 'vw' is LinearModel's"):
        fa.models.FactorizationMachine(optimizer="vw")


# ---------------------------------------------------------------- quantile loss

@pytest.mark.parametrize("optimizer", ["vw", "adagrad"])
def test_quantile_loss_fits_the_quantile(optimizer):
    """y = noise of a known quantile at one constant feature: the intercept learns the tau
    quantile of the labels."""
    rng = np.random.default_rng(15)
    n = 6000
    X = sp.csr_matrix(np.ones((n, 1), np.float32))
    y = rng.exponential(1.0, n)
    for tau in (0.2, 0.5, 0.9):
        model = fa.models.LinearModel(loss="quantile", quantile_tau=tau, optimizer=optimizer, passes=4,
                                      lr=0.5 if optimizer == "vw" else 0.05).fit(X, y)
        assert model.predict(X[:1])[0] == pytest.approx(np.quantile(y, tau), abs=0.12), tau
    with pytest.raises(ValueError, match="quantile_tau must be"):
        fa.models.LinearModel(loss="quantile", quantile_tau=1.0)
    with pytest.raises(ValueError, match="quantile loss takes finite numbers"):
        fa.models.LinearModel(loss="quantile").fit(X, np.full(n, np.nan))


def test_quantile_loss_graph_step_is_the_per_example_update():
    X, y = _data(seed=16, valued=True)
    t = y.astype(np.float64) * 3
    model = fa.models.LinearModel(loss="quantile", quantile_tau=0.3, optimizer="sgd", lr=0.05).fit(X, t)
    w, b = np.zeros(X.shape[1]), 0.0
    for r in range(X.shape[0]):
        row = X.getrow(r)
        z = b + row.data @ w[row.indices]
        g = -0.3 if t[r] > z else 0.7 if t[r] < z else 0.0
        w[row.indices] -= 0.05 * g * row.data
        b -= 0.05 * g
    np.testing.assert_allclose(model.weights["W"], w, rtol=2e-4, atol=2e-6)


# ---------------------------------------------------------------- one against all

@pytest.mark.parametrize("optimizer, loss", [("vw", "logistic"), ("adagrad", "logistic"), ("vw", "hinge")])
def test_one_against_all_multiclass(tmp_path, optimizer, loss):
    rng = np.random.default_rng(17)
    lines, labels = [], []
    for r in range(1500):
        label = int(rng.integers(1, 4))
        words = [f"c{label}"] * 2 + [f"n{k}" for k in rng.integers(0, 20, 3)]
        lines.append(f"{label} |w {' '.join(words)}\n")
        labels.append(label)
    (tmp_path / "m.vw").write_text("".join(lines))
    hasher = fa.features.Hasher(bits=10)
    model = fa.models.LinearModel(oaa=3, optimizer=optimizer, loss=loss, passes=2, hasher=hasher).fit(
        tmp_path / "m.vw")
    assert model.weights["W"].shape == (2 ** 10, 3) and model.weights["b"].shape == (3,)
    predicted = model.predict(tmp_path / "m.vw")
    assert set(predicted) <= {1, 2, 3} and (predicted == np.array(labels)).mean() > 0.95
    if loss != "logistic":
        return
    proba = model.predict_proba(tmp_path / "m.vw")
    assert proba.shape == (1500, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_array_equal(np.argmax(proba, axis=1) + 1, predicted)
    model.save(tmp_path / "oaa.npz")
    back = fa.models.LinearModel.load(tmp_path / "oaa.npz")
    np.testing.assert_array_equal(back.predict(tmp_path / "m.vw"), predicted)
    with pytest.raises(ValueError, match=r"with oaa=3 the labels are the classes 1..3 \(VW's --oaa\), got 4"):
        fa.models.LinearModel(oaa=3).fit(sp.csr_matrix(np.eye(3)), [1, 2, 4])
    with pytest.raises(ValueError, match="oaa must be >= 2"):
        fa.models.LinearModel(oaa=1)


def test_one_against_all_graph_step_is_each_classes_binary_update():
    X, _ = _data(n=200, seed=18, valued=True)
    y = np.random.default_rng(18).integers(1, 4, X.shape[0])
    model = fa.models.LinearModel(oaa=3, optimizer="sgd", lr=0.1).fit(X, y)
    W, b = np.zeros((X.shape[1], 3)), np.zeros(3)
    for r in range(X.shape[0]):
        row = X.getrow(r)
        z = b + row.data @ W[row.indices]
        g = _sigmoid(z) - (np.arange(1, 4) == y[r])
        W[row.indices] -= 0.1 * row.data[:, None] * g[None, :]
        b -= 0.1 * g
    np.testing.assert_allclose(model.weights["W"], W, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(model.weights["b"], b, rtol=2e-4, atol=2e-6)


# ---------------------------------------------------------------- field-aware

def _ffm_logit(W, b, V, ids, x, fields):
    """libffm's logit in float64, pair by pair."""
    z = b + sum(x[p] * W[ids[p]] for p in range(len(ids)))
    for p in range(len(ids)):
        for q in range(p + 1, len(ids)):
            if fields[p] >= 0 and fields[q] >= 0:
                z += x[p] * x[q] * V[ids[p], fields[q]] @ V[ids[q], fields[p]]
    return z


def test_field_aware_gradient_is_the_logits_finite_difference():
    from fastad.models.linear._online import FieldAwareUpdate
    rng = np.random.default_rng(20)
    weights = {"W": rng.normal(size=12).astype(np.float32), "b": np.array([0.3], np.float32),
               "V": rng.normal(size=(12, 3, 4)).astype(np.float32)}
    ids = np.array([1, 5, 5, 9, 2], np.int32)          # a feature twice, a field unseen (-1)
    x = np.array([1.0, 0.5, 2.0, -1.5, 1.0], np.float32)
    fields = np.array([0, 2, 1, 2, -1], np.int32)
    logit, grad = FieldAwareUpdate(weights, 0.1, True).gradient(ids, x, fields)
    W, b, V = (weights[n].astype(np.float64) for n in ("W", "b", "V"))
    assert logit == pytest.approx(_ffm_logit(W, b[0], V, ids, x, fields), rel=1e-6)
    # the gradient in V[ids[p], f], summed over the positions of one feature, by central differences
    for p in range(len(ids)):
        for f in range(3):
            for j in range(4):
                up, down = V.copy(), V.copy()
                up[ids[p], f, j] += 1e-6
                down[ids[p], f, j] -= 1e-6
                numeric = (_ffm_logit(W, b[0], up, ids, x, fields) - _ffm_logit(W, b[0], down, ids, x, fields)) / 2e-6
                analytic = sum(grad[q, f, j] for q in range(len(ids)) if ids[q] == ids[p])
                assert analytic == pytest.approx(numeric, abs=1e-5), (p, f, j)


class _LibffmAdagrad:
    """The numpy reference of libffm's AdaGrad (each accumulator from 1, lr 0.2) over a
    factorization machine's V and W (float64, stepped in place) and its bias b."""

    def __init__(self, V, W):
        self.V, self.W, self.b = V, W, 0.0
        self.GV, self.GW, self.Gb = np.ones_like(V), np.ones_like(W), 1.0

    def step(self, slope, ids, x, gV):
        """One example's step: the logit's slope, its features' ids and values, V's gradient."""
        self.Gb += slope ** 2
        self.b -= 0.2 * slope / np.sqrt(self.Gb)
        gW = np.zeros_like(self.W)
        gW[ids] = slope * x
        self.GW += gW ** 2
        self.W -= 0.2 * gW / np.sqrt(self.GW)
        self.GV += gV ** 2
        self.V -= 0.2 * gV / np.sqrt(self.GV)


def test_field_aware_steps_are_libffms_adagrad():
    rng = np.random.default_rng(21)
    n, features = 60, 15
    lengths = rng.integers(2, 6, n)
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    indices = np.concatenate([rng.choice(features, k, replace=False) for k in lengths])
    X = sp.csr_matrix((rng.uniform(0.5, 2, indices.size).astype(np.float32), indices, indptr), shape=(n, features))
    y = rng.integers(0, 2, n)
    column_fields = np.arange(features) % 3
    ffm = fa.models.FactorizationMachine(k=2, init_std=0.3, field_aware=True, lr=0.2,
                                        normalize=False).fit(X, y, fields=column_fields)
    used = np.unique(X.indices)
    V = np.zeros((features + 1, 3, 2))
    V[used] = np.random.default_rng(0).normal(0, 0.3, (used.size, 3, 2))
    ref = _LibffmAdagrad(V, np.zeros(features + 1))
    W = ref.W
    for r in range(n):
        row = X.getrow(r)
        ids, x, f = row.indices, row.data.astype(np.float64), column_fields[row.indices]
        slope = _sigmoid(_ffm_logit(W, ref.b, V, ids, x, f)) - y[r]
        dV = np.zeros_like(V)
        for p in range(len(ids)):
            for q in range(len(ids)):
                if p != q:
                    dV[ids[p], f[q]] += x[p] * x[q] * V[ids[q], f[p]]
        ref.step(slope, ids, x, slope * dV)
    b = ref.b
    np.testing.assert_allclose(ffm.weights["V"], V, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(ffm.weights["W"], W, rtol=1e-3, atol=1e-5)
    expected = [_ffm_logit(W, b, V, X.getrow(r).indices, X.getrow(r).data, column_fields[X.getrow(r).indices])
                for r in range(n)]
    np.testing.assert_allclose(ffm.decision_function(X), expected, rtol=1e-4, atol=1e-5)


def test_field_aware_from_a_vw_file_learns_field_pairs(tmp_path):
    """A label that only a pair of fields tells: the namespaces are the fields."""
    rng = np.random.default_rng(22)
    lines, labels = [], []
    for r in range(4000):
        a, c = rng.integers(0, 6), rng.integers(0, 6)
        label = int((a % 2) == (c % 2))
        lines.append(f"{label} |user u{a} |item i{c}\n")
        labels.append(label)
    (tmp_path / "p.vw").write_text("".join(lines))
    hasher = fa.features.Hasher(bits=12)
    ffm = fa.models.FactorizationMachine(k=4, init_std=0.1, passes=4, field_aware=True, hasher=hasher,
                                         workers=2, shuffle=True).fit(tmp_path / "p.vw")
    assert ffm.weights["V"].shape == (2 ** 12 + 1, 3, 4)       # fields: u, i and the constant's
    assert list(ffm.fields_) == [ord("i"), ord("u"), 128]
    assert fa.metrics.roc_auc(labels, ffm.decision_function(tmp_path / "p.vw")) > 0.95
    ffm.save(tmp_path / "ffm.npz")
    back = fa.models.FactorizationMachine.load(tmp_path / "ffm.npz")
    np.testing.assert_array_equal(back.decision_function(tmp_path / "p.vw"), ffm.decision_function(tmp_path / "p.vw"))
    (tmp_path / "new.vw").write_text("1 |user u1 |zzz q\n")             # field z unseen: no pairs
    assert np.isfinite(ffm.decision_function(tmp_path / "new.vw")).all()
    with pytest.raises(ValueError, match="learned its fields from Features"):
        ffm.decision_function(sp.csr_matrix((1, 2 ** 12)))
    X = sp.csr_matrix(np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="needs fields=, each column's field"):
        fa.models.FactorizationMachine(field_aware=True).fit(X, [0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"fields must hold one int >= 0 per column of X \(4\)"):
        fa.models.FactorizationMachine(field_aware=True).fit(X, [0, 1, 0, 1], fields=[0, 1])
    with pytest.raises(ValueError, match="fields= is the field-aware form's"):
        fa.models.FactorizationMachine().fit(X, [0, 1, 0, 1], fields=[0, 1, 0, 1])
    with pytest.raises(ValueError, match="trains as libffm, by Adagrad"):
        fa.models.FactorizationMachine(field_aware=True, optimizer="sgd")
    with pytest.raises(ValueError, match="takes no optimizer_options"):
        fa.models.FactorizationMachine(optimizer_options={"eps": 1e-8})


def test_factorization_machine_interactions_pair_two_namespaces_only(tmp_path):
    """interactions="ui" (VW's --lrq ui): only user x item pairs; the steps are AdaGrad's on
    that logit, the predictions its, and a matrix (no namespaces) is refused."""
    rng = np.random.default_rng(23)
    users, items = rng.integers(0, 30, 400), rng.integers(0, 30, 400)
    labels = ((users % 2) == (items % 2)).astype(int)      # a pure user x item interaction
    lines = [f"{2 * t - 1} |u u{a} |i i{b} |t t{a % 3}" for t, a, b in zip(labels, users, items)]
    (tmp_path / "p.vw").write_text("\n".join(lines) + "\n")
    hasher = fa.features.Hasher(bits=12)
    fm = fa.models.FactorizationMachine(k=2, init_std=0.3, lr=0.2, passes=1, hasher=hasher,
                                        interactions="ui", normalize=False).fit(tmp_path / "p.vw")
    features = fa.features.read_vw(tmp_path / "p.vw", hasher)
    sides = np.where(features.fields == ord("u"), 0, np.where(features.fields == ord("i"), 1, -1))
    V = np.zeros((2 ** 12 + 1, 1, 2))
    used = np.unique(features.ids)
    V[used] = np.random.default_rng(0).normal(0, 0.3, (used.size, 1, 2))
    ref = _LibffmAdagrad(V, np.zeros(2 ** 12 + 1))
    W = ref.W
    for r in range(len(features)):
        at = slice(features.offsets[r], features.offsets[r + 1])
        ids, x, side = features.ids[at], features.values[at].astype(np.float64), sides[at]
        g = _sigmoid(_crossed_logit(W, ref.b, V, ids, x, side)) - labels[r]
        s0, s1 = (x[side == i] @ V[ids[side == i], 0] for i in (0, 1))
        gV = np.zeros_like(V)
        for p in range(len(ids)):
            if side[p] >= 0:
                gV[ids[p], 0] += g * x[p] * (s1 if side[p] == 0 else s0)
        ref.step(g, ids, x, gV)
    b = ref.b
    np.testing.assert_allclose(fm.weights["V"], V[:, 0], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(fm.weights["W"], W, rtol=1e-3, atol=1e-5)
    expected = [_crossed_logit(W, b, V, features.ids[features.offsets[r]:features.offsets[r + 1]],
                               features.values[features.offsets[r]:features.offsets[r + 1]],
                               sides[features.offsets[r]:features.offsets[r + 1]]) for r in range(len(features))]
    np.testing.assert_allclose(fm.decision_function(tmp_path / "p.vw"), expected, rtol=1e-4, atol=1e-5)
    fm.save(tmp_path / "fm.npz")
    back = fa.models.FactorizationMachine.load(tmp_path / "fm.npz")
    assert back.interactions == "ui"
    np.testing.assert_array_equal(back.decision_function(features), fm.decision_function(features))
    with pytest.raises(ValueError, match="pairs namespaces: give Features"):
        fm.decision_function(sp.csr_matrix((1, 2 ** 12)))
    for bad in ("uu", "u", 3):
        with pytest.raises(ValueError, match="interactions takes two different namespaces"):
            fa.models.FactorizationMachine(interactions=bad)
    with pytest.raises(ValueError, match="interactions takes two different namespaces"):
        fa.models.FactorizationMachine(interactions="ui", optimizer="sgd")


@pytest.mark.parametrize("options", [{}, {"interactions": "ui"}, {"field_aware": True},
                                     {"optimizer": "sgd", "lr": 0.05}])
def test_factorization_machine_normalize_is_libffms_instance_wise_normalisation(tmp_path, options):
    """normalize=True (the default) trains and predicts on each example's values divided by
    their norm, position by position (a feature met twice stays two positions)."""
    rng = np.random.default_rng(24)
    lines = [f"{rng.choice([-1, 1])} |u u{rng.integers(9)}:{rng.uniform(0.5, 3):.3f} u{rng.integers(9)} "
             f"|i i{rng.integers(9)} i{rng.integers(9)}:2" for _ in range(200)]
    (tmp_path / "n.vw").write_text("\n".join(lines) + "\n")
    hasher = fa.features.Hasher(bits=10)
    features = fa.features.read_vw(tmp_path / "n.vw", hasher)
    scaled = fa.features.read_vw(tmp_path / "n.vw", hasher)
    for r in range(len(scaled)):
        at = slice(scaled.offsets[r], scaled.offsets[r + 1])
        scaled.values[at] /= np.sqrt((scaled.values[at].astype(np.float64) ** 2).sum())
    normed = fa.models.FactorizationMachine(k=3, hasher=hasher, **options).fit(features)
    raw = fa.models.FactorizationMachine(k=3, hasher=hasher, normalize=False, **options).fit(scaled)
    for name in ("V", "W", "b"):
        np.testing.assert_allclose(normed.weights[name], raw.weights[name], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(normed.decision_function(features), raw.decision_function(scaled), rtol=1e-5,
                               atol=1e-6)
    assert not np.allclose(normed.decision_function(features), raw.decision_function(features))


def test_unit_rows_divides_each_example_by_its_norm():
    from fastad.models.linear._online import unit_rows
    data = np.array([3, 4, 0, 0, -2], np.float32)
    out = unit_rows(data, np.array([0, 2, 2, 4, 5], np.int64))     # an empty example, a zero one
    np.testing.assert_allclose(out, [0.6, 0.8, 0, 0, -1], rtol=1e-7)
    assert out.dtype == np.float32 and data[0] == 3                  # a new array


def test_renumber_numbers_the_used_ids_in_order():
    from fastad.models.linear._online import renumber
    used, ids = renumber(np.array([7, 2, 7, 0], np.int32), 9)
    np.testing.assert_array_equal(used, [0, 2, 7])
    np.testing.assert_array_equal(ids, [2, 1, 2, 0])


@pytest.mark.parametrize("options", [{}, {"interactions": "ui"}, {"field_aware": True},
                                     {"optimizer": "sgd", "lr": 0.05}, {"loss": "squared"}])
def test_factorization_machine_one_against_all_is_k_binary_machines(tmp_path, monkeypatch, options):
    """FactorizationMachine(oaa=K) trains K factorization machines, class c's towards the binary
    targets of class c on every example: each class's predictions are those of a binary model
    started from the class's initial tables (class 1's are a binary model's of the same seed);
    predict is the highest class, predict_proba the sigmoids normalised, and a file keeps it."""
    rng = np.random.default_rng(26)
    users, items = rng.integers(0, 12, 600), rng.integers(0, 12, 600)
    labels = np.where(rng.random(600) < 0.9, 1 + users % 3, rng.integers(1, 4, 600))
    lines = [f"{t} |u u{a} |i i{b} |t t{a % 4}" for t, a, b in zip(labels, users, items)]
    (tmp_path / "m.vw").write_text("\n".join(lines) + "\n")
    hasher = fa.features.Hasher(bits=10)
    settings = dict(k=4, init_std=0.2, passes=3, hasher=hasher, **options)
    model = fa.models.FactorizationMachine(oaa=3, **settings).fit(tmp_path / "m.vw")
    shape = (3, len(model.fields_), 4) if options.get("field_aware") else (3, 4)
    assert model.weights["V"].shape == (2 ** 10 + 1, *shape)
    assert model.weights["W"].shape == (2 ** 10 + 1, 3) and model.weights["b"].shape == (3,)
    scores = model.decision_function(tmp_path / "m.vw")
    assert scores.shape == (600, 3)
    exact = options.get("optimizer") is None            # the compiled loop: the same float steps
    for c in range(3):
        binary = fa.models.FactorizationMachine(**settings)
        if c > 0:                                        # class c's initial tables
            def start(n_features, used=(), c=c):
                tables = model._new_weights(n_features, used)
                return {"V": tables["V"][:, c].copy(), "W": tables["W"][:, c].copy(), "b": tables["b"][c:c + 1].copy()}
            monkeypatch.setattr(binary, "_new_weights", start)
        features = fa.features.read_vw(tmp_path / "m.vw", hasher)
        target = (labels == c + 1).astype(np.float64)
        binary.fit(features, target if options.get("loss") == "squared" else target.astype(int))
        if options.get("loss") == "squared":             # oaa's regression targets are -1/+1
            binary = fa.models.FactorizationMachine(**settings)
            if c > 0:
                monkeypatch.setattr(binary, "_new_weights", start)
            binary.fit(features, 2 * target - 1)
        expected = binary.decision_function(tmp_path / "m.vw")
        if exact:
            np.testing.assert_array_equal(scores[:, c], expected)
        else:
            np.testing.assert_allclose(scores[:, c], expected, rtol=1e-3, atol=1e-4)
    predicted = model.predict(tmp_path / "m.vw")
    np.testing.assert_array_equal(predicted, 1 + np.argmax(scores, axis=1))
    assert (predicted == labels).mean() > 0.8                 # three classes: chance is a third
    if options.get("loss") != "squared":
        proba = model.predict_proba(tmp_path / "m.vw")
        np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-6)
        np.testing.assert_array_equal(np.argmax(proba, axis=1) + 1, predicted)
    model.save(tmp_path / "oaa.npz")
    back = fa.models.FactorizationMachine.load(tmp_path / "oaa.npz")
    assert back.oaa == 3
    np.testing.assert_array_equal(back.decision_function(tmp_path / "m.vw"), scores)
    with pytest.raises(ValueError, match=r"with oaa=3 the labels are the classes 1..3 \(VW's --oaa\), got 4"):
        fa.models.FactorizationMachine(oaa=3, **settings).fit(fa.features.read_vw(tmp_path / "m.vw", hasher),
                                                              np.where(labels == 3, 4, labels))
