"""fa.metrics against hand computations on tiny cases, with ties, filters and bad input."""
import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

# user 0 ranks items 0 1 2 3 4; user 1 ranks 3, then 1 and 2 (tied: the lower id first), 4, 0
SCORES = np.array([[0.9, 0.8, 0.7, 0.6, 0.5],
                   [0.1, 0.5, 0.5, 0.9, 0.2]])
TEST = sp.csr_matrix(np.array([[0, 1, 0, 1, 0],       # user 0 held out items 1 and 3
                               [0, 0, 1, 0, 0]]))     # user 1 held out item 2
L3 = 1 / np.log2(3)


def test_top_k_breaks_ties_by_the_lower_item_id():
    np.testing.assert_array_equal(fa.metrics.top_k(np.array([[0.1, 0.9, 0.5, 0.9]]), 2), [[1, 3]])
    np.testing.assert_array_equal(fa.metrics.top_k(np.array([[0.1, 0.9, 0.5, 0.9]]), 3), [[1, 3, 2]])
    np.testing.assert_array_equal(fa.metrics.top_k(np.ones((2, 4)), 2), [[0, 1], [0, 1]])
    np.testing.assert_array_equal(fa.metrics.top_k(SCORES, 9), [[0, 1, 2, 3, 4], [3, 1, 2, 4, 0]])


def test_top_k_takes_k_from_zero_up():
    assert fa.metrics.top_k(SCORES, 0).shape == (2, 0)
    with pytest.raises(ValueError, match="top_k: k must be >= 0, got -1"):
        fa.metrics.top_k(SCORES, -1)
    with pytest.raises(ValueError, match="top_k: scores holds NaN"):
        fa.metrics.top_k(np.array([[0.0, np.nan]]), 1)
    with pytest.raises(ValueError, match=r"top_k: scores must be a 2-D .* got shape \(3,\)"):
        fa.metrics.top_k([1.0, 2.0, 3.0], 1)


def test_top_k_ranks_minus_infinity_last():
    scores = np.array([[-np.inf, 2.0, -np.inf, 1.0]])
    np.testing.assert_array_equal(fa.metrics.top_k(scores, 3), [[1, 3, 0]])


def test_metrics_at_3_by_hand():
    # user 0: top 3 = 0 1 2, one hit at rank 2; user 1: top 3 = 3 1 2, one hit at rank 3
    assert fa.metrics.precision_at_k(SCORES, TEST, k=3) == pytest.approx((1 / 3 + 1 / 3) / 2)
    assert fa.metrics.recall_at_k(SCORES, TEST, k=3) == pytest.approx((1 / 2 + 1) / 2)
    ndcg0 = L3 / (1 + L3)                 # one hit at rank 2; the best is hits at ranks 1 and 2
    ndcg1 = 0.5 / 1                       # one hit at rank 3 (1/log2 4); the best is a hit at rank 1
    assert fa.metrics.ndcg_at_k(SCORES, TEST, k=3) == pytest.approx((ndcg0 + ndcg1) / 2)
    ap0 = (1 / 2) / 2                     # precision@2 at the hit, over min(3, 2 held out)
    ap1 = (1 / 3) / 1
    assert fa.metrics.mean_average_precision_at_k(SCORES, TEST, k=3) == pytest.approx((ap0 + ap1) / 2)


def test_auc_by_hand_with_a_tie_counting_one_half():
    # user 0: item 1 (0.8) beats 2 and 4 of {0, 2, 4}; item 3 (0.6) beats 4: 3 of 6 pairs
    # user 1: item 2 (0.5) beats 0 and 4, ties with 1, loses to 3: 2.5 of 4 pairs
    assert fa.metrics.auc(SCORES, TEST) == pytest.approx((3 / 6 + 2.5 / 4) / 2)


def test_train_items_are_never_ranked_nor_counted_as_negatives():
    train = sp.csr_matrix(np.array([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]))
    # user 0 now ranks 1 2 3 4: top 3 holds both held-out items
    assert fa.metrics.precision_at_k(SCORES, TEST, k=3, train=train) == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert fa.metrics.recall_at_k(SCORES, TEST, k=3, train=train) == pytest.approx(1.0)
    # user 0: negatives are 2 and 4 only: item 1 beats both, item 3 beats 4: 3 of 4
    assert fa.metrics.auc(SCORES, TEST, train=train) == pytest.approx((3 / 4 + 2.5 / 4) / 2)


def test_users_without_held_out_items_are_skipped():
    scores = np.vstack([SCORES, [[1.0, 0.0, 0.0, 0.0, 0.0]]])
    test = sp.vstack([TEST, sp.csr_matrix((1, 5))]).tocsr()
    for metric in (fa.metrics.precision_at_k, fa.metrics.recall_at_k, fa.metrics.ndcg_at_k,
                   fa.metrics.mean_average_precision_at_k):
        assert metric(scores, test, k=3) == pytest.approx(metric(SCORES, TEST, k=3))
    assert fa.metrics.auc(scores, test) == pytest.approx(fa.metrics.auc(SCORES, TEST))


def test_k_larger_than_the_item_count_is_capped():
    # every item is in the list: user 0 hits 2 of 5, user 1 hits 1 of 5
    assert fa.metrics.precision_at_k(SCORES, TEST, k=10) == pytest.approx((2 / 5 + 1 / 5) / 2)
    assert fa.metrics.recall_at_k(SCORES, TEST, k=10) == pytest.approx(1.0)
    assert fa.metrics.ndcg_at_k(SCORES, TEST, k=10) == fa.metrics.ndcg_at_k(SCORES, TEST, k=5)


def test_rows_of_chosen_users():
    # the scores of user 1 alone, named by users=
    assert fa.metrics.precision_at_k(SCORES[1:], TEST, k=1, users=[1]) == 0.0
    assert fa.metrics.recall_at_k(SCORES[1:], TEST, k=3, users=[1]) == 1.0


class RowModel:
    """A stand-in recommender whose scores are fixed rows."""

    def __init__(self, scores):
        self.table = scores

    def scores(self, users):
        return self.table[users]


def test_evaluate_matches_the_functions_in_any_batch_size():
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((30, 12))
    likes = sp.random(30, 12, density=0.4, random_state=1, format="csr")
    train, test = fa.data.train_test_split(likes, 0.3, seed=2)
    full = fa.metrics.evaluate(RowModel(scores), test, train=train, k=4, batch_size=7)
    users = np.flatnonzero(np.diff(test.indptr))
    rows = scores[users]
    assert full["precision@4"] == pytest.approx(fa.metrics.precision_at_k(rows, test, 4, train, users))
    assert full["recall@4"] == pytest.approx(fa.metrics.recall_at_k(rows, test, 4, train, users))
    assert full["ndcg@4"] == pytest.approx(fa.metrics.ndcg_at_k(rows, test, 4, train, users))
    assert full["map@4"] == pytest.approx(
        fa.metrics.mean_average_precision_at_k(rows, test, 4, train, users))
    assert full["auc"] == pytest.approx(fa.metrics.auc(rows, test, train, users))
    one_batch = fa.metrics.evaluate(RowModel(scores), test, train=train, k=4, batch_size=1000)
    assert one_batch == pytest.approx(full)


def test_a_perfect_and_a_reversed_ranking():
    test = sp.csr_matrix(np.eye(4))
    assert fa.metrics.auc(np.eye(4), test) == 1.0
    assert fa.metrics.auc(-np.eye(4), test) == 0.0
    assert fa.metrics.ndcg_at_k(np.eye(4), test, k=2) == 1.0
    assert fa.metrics.mean_average_precision_at_k(np.eye(4), test, k=2) == 1.0


@pytest.mark.parametrize("metric", [fa.metrics.precision_at_k, fa.metrics.recall_at_k,
                                    fa.metrics.ndcg_at_k, fa.metrics.mean_average_precision_at_k])
def test_k_must_be_a_positive_int(metric):
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        metric(SCORES, TEST, k=0)
    with pytest.raises(TypeError, match="k must be an int, got 2.5"):
        metric(SCORES, TEST, k=2.5)


def test_bad_scores_and_splits_are_named():
    with pytest.raises(ValueError, match="scores has 4 item columns but test has 5 items"):
        fa.metrics.auc(SCORES[:, :4], TEST)
    with pytest.raises(ValueError, match="scores has 1 rows but test has 2 users; pass users="):
        fa.metrics.auc(SCORES[:1], TEST)
    with pytest.raises(ValueError, match="scores holds non-finite values"):
        fa.metrics.auc(np.where(SCORES > 0.85, np.nan, SCORES), TEST)
    with pytest.raises(ValueError, match="scores must be a 2-D"):
        fa.metrics.auc(SCORES[0], TEST)
    with pytest.raises(ValueError, match="test must hold non-negative finite values; "
                                         "it holds -1.0 at user 1, item 2"):
        fa.metrics.auc(SCORES, sp.csr_matrix(np.array([[0, 1, 0, 0, 0], [0, 0, -1, 0, 0]])))
    with pytest.raises(ValueError, match=r"train has shape \(2, 4\), expected \(2, 5\)"):
        fa.metrics.auc(SCORES, TEST, train=sp.csr_matrix((2, 4)))
    with pytest.raises(TypeError, match="test must be a scipy sparse user x item matrix"):
        fa.metrics.auc(SCORES, TEST.toarray())
    with pytest.raises(IndexError, match="users holds 2 at position 1, outside the 2 users"):
        fa.metrics.auc(SCORES, TEST, users=[0, 2])
    with pytest.raises(ValueError, match="no user of these scores has a held-out item"):
        fa.metrics.precision_at_k(SCORES[:1], TEST, users=[0], train=TEST)


def test_evaluate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="evaluate: k must be >= 1"):
        fa.metrics.evaluate(RowModel(SCORES), TEST, k=-1)
    with pytest.raises(ValueError, match="evaluate: batch_size must be >= 1, got 0"):
        fa.metrics.evaluate(RowModel(SCORES), TEST, batch_size=0)
    with pytest.raises(ValueError, match="evaluate: no user of `users` has a held-out item"):
        fa.metrics.evaluate(RowModel(SCORES), TEST, users=[], k=2)
