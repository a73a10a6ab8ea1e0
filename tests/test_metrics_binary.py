"""fa.metrics.roc_auc and log_loss: against brute force and scikit-learn, ties, weights,
logits, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa


def _pairwise_auc(labels, scores, weights):
    """The weighted share of (positive, negative) pairs in the right order, ties one half."""
    pos, neg = labels == 1, labels == 0
    diff = scores[pos][:, None] - scores[neg][None, :]
    pair_weights = weights[pos][:, None] * weights[neg][None, :]
    return ((diff > 0) + 0.5 * (diff == 0)).ravel() @ pair_weights.ravel() / pair_weights.sum()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 40), weighted=st.booleans())
def test_roc_auc_is_the_share_of_ordered_pairs(data, n, weighted):
    labels = np.array(data.draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)))
    scores = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), float)
    weights = (np.array(data.draw(st.lists(st.floats(0.1, 5), min_size=n, max_size=n)))
               if weighted else np.ones(n))
    if labels.min() == labels.max():
        with pytest.raises(ValueError, match="both classes must be present"):
            fa.metrics.roc_auc(labels, scores, weights if weighted else None)
        return
    got = fa.metrics.roc_auc(labels, scores, weights if weighted else None)
    assert got == pytest.approx(_pairwise_auc(labels, scores, weights), rel=1e-12)


def test_matches_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    logits = rng.normal(size=500) + labels
    probs = 1 / (1 + np.exp(-logits))
    weights = rng.uniform(0, 3, 500)
    assert fa.metrics.roc_auc(labels, logits) == pytest.approx(
        sklearn_metrics.roc_auc_score(labels, logits), rel=1e-12)
    assert fa.metrics.roc_auc(labels, logits, weights) == pytest.approx(
        sklearn_metrics.roc_auc_score(labels, logits, sample_weight=weights), rel=1e-12)
    assert fa.metrics.log_loss(labels, probs) == pytest.approx(
        sklearn_metrics.log_loss(labels, probs), rel=1e-12)
    assert fa.metrics.log_loss(labels, probs, weights) == pytest.approx(
        sklearn_metrics.log_loss(labels, probs, sample_weight=weights), rel=1e-12)


def test_log_loss_from_logits_is_stable_and_equals_the_probabilities_form():
    labels = np.array([1, 0, 1, 0])
    logits = np.array([2.0, -1.0, -0.5, 3.0])
    probs = 1 / (1 + np.exp(-logits))
    assert fa.metrics.log_loss(labels, logits, from_logits=True) == pytest.approx(
        fa.metrics.log_loss(labels, probs), rel=1e-12)
    # a confident wrong logit: its loss (800), where a rounded probability would clip to -log(eps)
    assert fa.metrics.log_loss([1], [-800.0], from_logits=True) == pytest.approx(800.0)
    assert fa.metrics.log_loss([1], [0.0]) == pytest.approx(-np.log(np.finfo(np.float64).eps))
    assert fa.metrics.log_loss([1], np.float32([0.0])) == pytest.approx(
        -np.log(np.finfo(np.float32).eps))


def test_bad_input():
    with pytest.raises(ValueError, match=r"must be 1-D of one length, got shapes \(3,\) and \(2,\)"):
        fa.metrics.roc_auc([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"labels must be 0 or 1, got \[2\]"):
        fa.metrics.roc_auc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="predictions must be finite numbers"):
        fa.metrics.log_loss([0, 1], [0.1, np.nan])
    with pytest.raises(ValueError, match="no examples"):
        fa.metrics.log_loss([], [])
    with pytest.raises(ValueError, match=r"probabilities must lie in \[0, 1\]"):
        fa.metrics.log_loss([0, 1], [0.1, 1.5])
    with pytest.raises(ValueError, match=r"sample_weight has shape \(1,\), expected \(2,\)"):
        fa.metrics.log_loss([0, 1], [0.1, 0.5], sample_weight=[1.0])
    with pytest.raises(ValueError, match="sample_weight must be finite and non-negative"):
        fa.metrics.roc_auc([0, 1], [0.1, 0.5], sample_weight=[1.0, -1.0])
