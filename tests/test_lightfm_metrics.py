"""fa.metrics in LightFM's call forms (precision_at_k, recall_at_k, auc_score, reciprocal_rank,
predict_rank): per-user arrays equal to LightFM 1.17's on the same factors. LightFM's outputs
below were recorded with tests/lightfm_metrics.py; where FASTAD_LIGHTFM_PYTHON names an
interpreter with LightFM, the test also runs it live on the same data."""
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

HERE = os.path.dirname(os.path.abspath(__file__))
K = 3

# LightFM 1.17 on `data()` (k = 3): predict_rank's data, and each metric (preserve_rows=True)
LIGHTFM_RANKS = [0, 7, 8, 4, 2, 8, 1, 5, 6, 2, 0, 4, 1, 6, 10, 13, 0, 7, 12, 0, 6, 1, 9, 8, 4, 5, 1]
THIRD, TWO_THIRDS = 1 / 3, 2 / 3
LIGHTFM = {
    "precision": [THIRD, THIRD, THIRD, TWO_THIRDS, THIRD, THIRD, TWO_THIRDS, 0, 0, 0, THIRD, 0],
    "recall": [THIRD, 0.5, 0.5, 0.4, 0.5, 0.2, TWO_THIRDS, 0, np.nan, 0, 1, np.nan],
    "auc": [0.3333333432674408, 0.7222222089767456, 0.5, 0.5333333015441895, 0.625, 0.2888888716697693,
            0.8666666150093079, 0.1818181276321411, 0.5, 0.2222222089767456, 0.8571428656578064, 0.5],
    "rr": [1, 1 / 3, 0.5, 1, 0.5, 1, 1, 0.1, 0, 0.2, 0.5, 0],
}
HAS_TEST = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0], dtype=bool)


class Scorer:
    """A recommender as fa.metrics sees one: scores(user_ids) over every item."""

    def __init__(self, U, V, b):
        self.U, self.V, self.b = U, V, b

    def scores(self, user_ids):
        return self.U[user_ids] @ self.V.T + self.b


def data():
    rng = np.random.default_rng(53)
    U = rng.normal(size=(12, 4)).astype(np.float32)
    V = rng.normal(size=(15, 4)).astype(np.float32)
    b = rng.normal(scale=0.3, size=15).astype(np.float32)
    cell = rng.random((12, 15))
    test = sp.csr_matrix((cell < 0.15).astype(np.float32))
    train = sp.csr_matrix(((cell >= 0.15) & (cell < 0.45)).astype(np.float32))
    return Scorer(U, V, b), test, train


def ours(model, test, train, keep):
    return {"precision": fa.metrics.precision_at_k(model, test, train, k=K, preserve_rows=keep),
            "recall": fa.metrics.recall_at_k(model, test, train, K, preserve_rows=keep),
            "auc": fa.metrics.auc_score(model, test, train, preserve_rows=keep),
            "rr": fa.metrics.reciprocal_rank(model, test, train, preserve_rows=keep)}


@pytest.mark.parametrize("keep", [False, True])
def test_equal_to_lightfms_recorded_outputs(keep):
    model, test, train = data()
    np.testing.assert_array_equal(fa.metrics.predict_rank(model, test, train).data, LIGHTFM_RANKS)
    for name, values in ours(model, test, train, keep).items():
        expected = np.array(LIGHTFM[name]) if keep else np.array(LIGHTFM[name])[HAS_TEST]
        np.testing.assert_allclose(values, expected, rtol=1e-6, err_msg=name)


def test_equal_to_lightfm_run_live_where_it_is_installed(tmp_path):
    """Run where FASTAD_LIGHTFM_PYTHON names LightFM's interpreter (else the recorded outputs
    above stand for it: this test then checks that they are what the live run would see)."""
    model, test, train = data()
    python = os.environ.get("FASTAD_LIGHTFM_PYTHON")
    if not python:
        assert len(LIGHTFM_RANKS) == test.nnz
        return
    arrays = {"U": model.U, "V": model.V, "b": model.b}
    for name, m in (("test", test), ("train", train)):
        arrays.update({f"{name}_indptr": m.indptr, f"{name}_indices": m.indices, f"{name}_shape": m.shape})
    np.savez(tmp_path / "in.npz", **arrays)
    subprocess.run([python, os.path.join(HERE, "lightfm_metrics.py"), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, capture_output=True)
    live = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(fa.metrics.predict_rank(model, test, train).data, live["ranks"])
    for keep in (False, True):
        for name, values in ours(model, test, train, keep).items():
            np.testing.assert_allclose(values, live[f"{name}_{keep}"], rtol=1e-6, err_msg=name)


def test_a_fastad_recommender_in_both_call_forms():
    """A BPR model: the mean of LightFM's per-user precision is the scores form's precision."""
    rng = np.random.default_rng(0)
    likes = sp.csr_matrix((rng.random((60, 40)) < 0.2).astype(np.float64))
    train, test = fa.data.train_test_split(likes, test_fraction=0.25, seed=0)
    model = fa.models.BPR(60, 40, dim=8).fit(train, epochs=3)
    per_user = fa.metrics.precision_at_k(model, test, train, k=5)
    assert per_user.shape == (np.count_nonzero(np.diff(test.indptr)),)
    scores = model.scores(np.arange(60))
    assert per_user.mean() == pytest.approx(fa.metrics.precision_at_k(scores, test, 5, train))
    assert fa.metrics.recall_at_k(model, test, train, k=5).mean() == pytest.approx(
        fa.metrics.recall_at_k(scores, test, k=5, train=train))


def test_a_model_with_its_own_predict_rank_is_asked_for_it():
    model, test, train = data()

    class Ranked:
        def predict_rank(self, test_interactions, train_interactions=None, user_features=None,
                         item_features=None, num_threads=1, check_intersections=True):
            self.features = (user_features, item_features, num_threads)
            return fa.metrics.predict_rank(model, test_interactions, train_interactions)

    ranked = Ranked()
    got = fa.metrics.auc_score(ranked, test, train, user_features="u", item_features="i", num_threads=2)
    np.testing.assert_allclose(got, np.array(LIGHTFM["auc"])[HAS_TEST], rtol=1e-6)
    assert ranked.features == ("u", "i", 2)


def test_bad_input_is_named():
    model, test, train = data()
    with pytest.raises(ValueError, match="precision_at_k: k must be"):
        fa.metrics.precision_at_k(model, test, train, k=0)
    with pytest.raises(ValueError, match="auc_score: num_threads must be"):
        fa.metrics.auc_score(model, test, train, num_threads=0)
    with pytest.raises(ValueError, match="reciprocal_rank: test_interactions and train_interactions share 27"):
        fa.metrics.reciprocal_rank(model, test, test)
    fa.metrics.reciprocal_rank(model, test, test, check_intersections=False)
    with pytest.raises(ValueError, match="recall_at_k: item_features given, but Scorer scores users"):
        fa.metrics.recall_at_k(model, test, item_features=sp.identity(15))
    with pytest.raises(TypeError, match="precision_at_k: .*unexpected keyword argument 'train'.*LightFM's"):
        fa.metrics.precision_at_k(model, test, train=train)
    with pytest.raises(TypeError, match="precision_at_k: .*with scores.*takes \\(scores, test, k=10"):
        fa.metrics.precision_at_k(model.scores(np.arange(12)), test, train_interactions=train)
    with pytest.raises(ValueError, match="auc_score: train_interactions has shape \\(12, 14\\)"):
        fa.metrics.auc_score(model, test, train[:, :14])
    with pytest.raises(ValueError, match="Scorer.scores gave shape \\(10, 15\\) for 10 users, expected \\(10, 16\\)"):
        fa.metrics.precision_at_k(model, sp.hstack([test, sp.csr_matrix((12, 1))]).tocsr())
