"""fa.data: interaction matrices, their per-user splits and the BPR triple sampler."""
import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

# user 0 liked 5 items, user 1 one item, user 2 two items (with weights)
LIKES = sp.csr_matrix(np.array([[1, 1, 0, 1, 1, 1],
                                [0, 0, 3, 0, 0, 0],
                                [2, 0, 0, 0, 0, 1]], dtype=np.float32))


def counts(matrix):
    return np.diff(matrix.tocsr().indptr).tolist()


def test_leave_k_out_holds_k_of_each_user_with_more_than_k():
    train, test = fa.data.leave_k_out(LIKES, k=1, seed=0)
    assert counts(test) == [1, 0, 1] and counts(train) == [4, 1, 1]
    assert (train + test != LIKES).nnz == 0            # a partition that keeps the values
    assert train.multiply(test).nnz == 0
    _, test2 = fa.data.leave_k_out(LIKES, k=2, seed=0)
    assert counts(test2) == [2, 0, 0]


def test_train_test_split_holds_a_rounded_fraction_of_each_user():
    train, test = fa.data.train_test_split(LIKES, test_fraction=0.4, seed=0)
    assert counts(test) == [2, 0, 1]                    # round(2.0), round(0.4), round(0.8)
    assert (train + test != LIKES).nnz == 0 and train.multiply(test).nnz == 0
    assert train.shape == test.shape == LIKES.shape


def test_splits_are_seeded():
    likes = fa.data.planted_interactions(50, 40, per_user=10, seed=0)
    a = fa.data.train_test_split(likes, 0.3, seed=1)[1]
    b = fa.data.train_test_split(likes, 0.3, seed=1)[1]
    c = fa.data.train_test_split(likes, 0.3, seed=2)[1]
    assert (a != b).nnz == 0 and (a != c).nnz > 0
    assert counts(a) == [3] * 50


def test_planted_interactions_give_each_user_per_user_items():
    likes = fa.data.planted_interactions(30, 20, per_user=5, seed=0)
    assert likes.shape == (30, 20) and counts(likes) == [5] * 30
    assert set(likes.data.tolist()) == {1.0}
    with pytest.raises(ValueError, match="per_user must be < n_items"):
        fa.data.planted_interactions(3, 5, per_user=5)


def test_sample_triples_draws_liked_positives_and_unliked_negatives():
    triples = fa.data.sample_triples(LIKES, n=20_000, seed=0)
    liked = LIKES.toarray() > 0
    assert liked[triples["users"], triples["pos"]].all()
    assert not liked[triples["users"], triples["neg"]].any()
    # users in proportion to their interactions: 5, 1 and 2 of 8
    share = np.bincount(triples["users"], minlength=3) / 20_000
    np.testing.assert_allclose(share, [5 / 8, 1 / 8, 2 / 8], atol=0.02)
    # user 1's negatives are uniform over the 5 items it did not like
    negatives = np.bincount(triples["neg"][triples["users"] == 1], minlength=6)
    assert negatives[2] == 0
    np.testing.assert_allclose(negatives[[0, 1, 3, 4, 5]] / negatives.sum(), 0.2, atol=0.04)
    again = fa.data.sample_triples(LIKES, n=20_000, seed=0)
    assert all(np.array_equal(triples[key], again[key]) for key in triples)
    assert len(fa.data.sample_triples(LIKES)["users"]) == LIKES.nnz


def test_sample_triples_names_the_users_who_liked_every_item():
    likes = sp.csr_matrix(np.array([[1, 1, 1], [1, 0, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match=r"users who liked every item.*users \[0, 2\]"):
        fa.data.sample_triples(likes)


@pytest.mark.parametrize("function", [fa.data.train_test_split, fa.data.leave_k_out,
                                      fa.data.sample_triples])
def test_bad_matrices_are_named(function):
    name = function.__name__
    with pytest.raises(TypeError, match=f"{name}: interactions must be a scipy sparse"):
        function(LIKES.toarray())
    with pytest.raises(ValueError, match=f"{name}: interactions must hold non-negative finite values; "
                                         "it holds -1.0 at user 1, item 0"):
        function(sp.csr_matrix(np.array([[1.0, 0.0], [-1.0, 0.0]])))
    with pytest.raises(ValueError, match="holds nan at user 0, item 1"):
        function(sp.csr_matrix(np.array([[1.0, np.nan], [0.0, 1.0]])))
    with pytest.raises(ValueError, match=r"interactions is empty: shape \(2, 2\)"):
        function(sp.csr_matrix(np.zeros((2, 2))))
    with pytest.raises(ValueError, match=r"interactions has shape \(0, 3\)"):
        function(sp.csr_matrix((0, 3)))


def test_bad_split_arguments_are_named():
    with pytest.raises(ValueError, match="test_fraction must be a number in \\(0, 1\\), got 1.5"):
        fa.data.train_test_split(LIKES, test_fraction=1.5)
    with pytest.raises(ValueError, match="leave_k_out: k must be >= 1, got 0"):
        fa.data.leave_k_out(LIKES, k=0)
    with pytest.raises(TypeError, match="leave_k_out: seed must be an int, got 1.5"):
        fa.data.leave_k_out(LIKES, seed=1.5)
    with pytest.raises(ValueError, match="train_test_split: seed must be >= 0, got -2"):
        fa.data.train_test_split(LIKES, seed=-2)
    with pytest.raises(ValueError, match="sample_triples: n must be >= 1, got 0"):
        fa.data.sample_triples(LIKES, n=0)
