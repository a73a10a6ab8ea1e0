"""fa.models.BPR with implicit's conventions: built as BayesianPersonalizedRanking is and sized by
fit, its regularization, implicit's recommend / similar_items / similar_users calls checked
against implicit itself on the same factors, and the memory of its factors (drawn in float32,
adopted without a copy)."""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

USERS, ITEMS = 120, 60


@pytest.fixture(scope="module")
def likes():
    return fa.data.planted_interactions(USERS, ITEMS, per_user=8, rank=3, seed=2)


@pytest.fixture(scope="module")
def fitted(likes):
    """A model built implicit's way (item biases, regularization), lightly trained."""
    return fa.models.BPR(factors=8, iterations=3, learning_rate=0.05, random_state=1).fit(likes)


def implicit_model(model, with_biases=True):
    """implicit's BPR over fastad's factors: its user factors end in a column of ones, its item
    factors in the item biases, so its scores are fastad's."""
    bpr = pytest.importorskip("implicit.cpu.bpr")
    peer = bpr.BayesianPersonalizedRanking(factors=model.dim)
    users, items = model.U.value, model.V.value
    if with_biases:
        users = np.hstack([users, np.ones((len(users), 1), users.dtype)])
        items = np.hstack([items, model.item_bias.value])
    peer.user_factors, peer.item_factors = users.astype(np.float32), items.astype(np.float32)
    return peer


# ---------------------------------------------------------------- construction

def test_built_implicits_way_it_is_sized_by_fit_with_implicits_defaults(likes):
    model = fa.models.BPR(factors=8, iterations=2)
    assert model.n_users is None and model.n_items is None and not list(model.parameters())
    assert (model.learning_rate, model.regularization, model.iterations) == (0.01, 0.01, 2)
    assert fa.models.BPR().dim == 100 and fa.models.BPR().iterations == 100
    assert model.fit(likes) is model
    assert model.U.shape == (USERS, 8) and model.V.shape == (ITEMS, 8) and model.biases
    assert len(model.history) == 2                  # iterations is fit's default epochs
    model.fit(likes, epochs=1)                      # fit's own argument wins for its call
    assert len(model.history) == 1 and model.U.shape == (USERS, 8)
    with pytest.raises(ValueError, match=r"has shape \(120, 59\), expected \(120, 60\)"):
        model.fit(likes[:, :59])                    # sized once: a later fit must match


def test_built_fastads_way_it_keeps_fastads_defaults():
    model = fa.models.BPR(30, 20)
    assert (model.dim, model.regularization, model.learning_rate, model.iterations) == (32, 0.0, 0.05, 1)
    assert not model.biases and model.U.shape == (30, 32)
    model = fa.models.BPR(30, 20, dim=4, regularization=0.1, biases=True)
    assert model.regularization == 0.1 and model.biases


@pytest.mark.parametrize("kwargs, message", [
    ({"dim": 8, "factors": 8}, "give dim or implicit's factors, not both"),
    ({"seed": 3, "random_state": 4}, "give seed or implicit's random_state, not both"),
    ({"n_users": 5}, "give both n_users and n_items"),
    ({"factors": 0}, "dim must be >= 1"),
    ({"regularization": -1.0}, "regularization must be"),
    ({"learning_rate": 0}, "learning_rate must be"),
    ({"iterations": 1.5}, "iterations must be an int"),
    ({"copy": "no"}, "copy must be True or False"),
])
def test_bad_construction_is_a_clear_error(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        fa.models.BPR(**kwargs)


def test_a_model_without_factors_says_to_fit_it_first():
    model = fa.models.BPR(factors=4)
    for call in (lambda: model.recommend(0), lambda: model.similar_items(0), lambda: model.similar_users(0),
                 lambda: model.recommend(0, sp.csr_matrix((1, 3))), lambda: model.scores([0]),
                 lambda: model.save("never.npz"), lambda: model.auc({"users": [0], "pos": [0], "neg": [1]})):
        with pytest.raises(ValueError, match="no factors yet"):
            call()


def test_regularization_reaches_the_fit(likes):
    """The same fit with and without the L2 term differs, and the term shrinks the factors."""
    norms = []
    for reg in (0.0, 0.5):
        model = fa.models.BPR(factors=8, iterations=3, learning_rate=0.05, regularization=reg,
                              random_state=1).fit(likes)
        norms.append(np.linalg.norm(model.V.value))
    assert norms[1] < 0.9 * norms[0]


def test_saved_and_loaded_it_keeps_its_settings(fitted, tmp_path):
    fitted.save(tmp_path / "bpr.npz")
    loaded = fa.models.BPR.load(tmp_path / "bpr.npz")
    assert (loaded.regularization, loaded.learning_rate, loaded.iterations) == (
        fitted.regularization, fitted.learning_rate, fitted.iterations)
    np.testing.assert_array_equal(loaded.U.value, fitted.U.value)


# ---------------------------------------------------------------- recommend, implicit's call

def test_recommend_of_one_user_is_implicits(fitted, likes):
    peer = implicit_model(fitted)
    for user in (0, 7, 55):
        ours = fitted.recommend(user, likes[user])
        theirs = peer.recommend(user, likes[user])
        assert ours[0].shape == (10,)
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", [
    {"N": 5},
    {"N": 7, "filter_already_liked_items": False},
    {"N": 4, "items": [40, 3, 17, 25, 8, 59, 0]},
    {"N": 6, "filter_items": [1, 2, 3, 10, 20]},
])
def test_recommend_of_several_users_is_implicits(fitted, likes, call):
    peer = implicit_model(fitted)
    users = np.array([3, 0, 99, 41])
    ours = fitted.recommend(users, likes[users], **call)
    theirs = peer.recommend(users, likes[users], **call)
    assert ours[0].shape == (4, call["N"])
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


def test_recommend_told_apart_by_the_call(fitted, likes):
    """A sparse second argument or one of implicit's keywords is implicit's call, whose
    user_items rows go with the users asked for; fastad's filters by user id."""
    ours, _ = fitted.recommend(5, likes[5], N=3)
    again, _ = fitted.recommend(5, user_items=likes[5], N=3)
    fastads, _ = fitted.recommend(5, k=3)               # liked: the matrix of the last fit
    np.testing.assert_array_equal(ours, again)
    np.testing.assert_array_equal(ours, fastads)
    unfiltered, _ = fitted.recommend(5, None, N=3, filter_already_liked_items=False)
    np.testing.assert_array_equal(unfiltered, fitted.recommend(5, k=3, filter_liked=False)[0])


@pytest.mark.parametrize("call, error, message", [
    (lambda m, likes: m.recommend(0, likes[0], recalculate_user=True), NotImplementedError,
     "recalculate_user is not supported"),
    (lambda m, likes: m.recommend(0, likes[:2]), ValueError, "one row per user asked for"),
    (lambda m, likes: m.recommend([0, 1], likes[0], N=2), ValueError, "one row per user asked for"),
    (lambda m, likes: m.recommend(0, N=3), TypeError, "user_items must be a scipy sparse"),
    (lambda m, likes: m.recommend(0, likes[0], items=[1, 2], filter_items=[3]), ValueError,
     "give items .* or filter_items"),
    (lambda m, likes: m.recommend(0, likes[0], N=0), ValueError, "N must be >= 1"),
    (lambda m, likes: m.recommend(0, likes[0], items=[ITEMS]), IndexError, "items holds 60"),
    (lambda m, likes: m.recommend(USERS, likes[0]), IndexError, "userid is 120"),
    (lambda m, likes: m.recommend(0, likes[0], k=3), TypeError, "k belong to fastad's call"),
    (lambda m, likes: m.recommend(0, N=3, filter_liked=False, liked=likes), TypeError,
     "filter_liked, liked belong to fastad's call"),
])
def test_implicits_recommend_refuses_bad_input(fitted, likes, call, error, message):
    with pytest.raises(error, match=message):
        call(fitted, likes)


def test_implicits_bpr_refuses_recalculate_user_too(fitted, likes):
    peer = implicit_model(fitted)
    with pytest.raises(NotImplementedError):
        peer.recommend(0, likes[0], recalculate_user=True)


# ---------------------------------------------------------------- similar_items, similar_users

@pytest.fixture(scope="module")
def unbiased(likes):
    """implicit's BPR takes cosines with its bias column appended; without biases they agree."""
    return fa.models.BPR(factors=8, iterations=3, learning_rate=0.05, random_state=3, biases=False).fit(likes)


@pytest.mark.parametrize("call", [{}, {"N": 4}, {"N": 5, "items": [9, 2, 33, 4, 50, 12]},
                                  {"N": 6, "filter_items": [0, 1, 2]}])
@pytest.mark.parametrize("ids", [7, [7, 20, 58]])
def test_similar_items_is_implicits(unbiased, ids, call):
    peer = implicit_model(unbiased, with_biases=False)
    ours = unbiased.similar_items(ids, **call)
    theirs = peer.similar_items(ids, **call)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)
    if not call:
        assert np.all(np.atleast_2d(ours[0])[:, 0] == ids)     # the item itself first


@pytest.mark.parametrize("call", [{}, {"N": 3, "users": [5, 9, 11, 70]}, {"N": 4, "filter_users": [0]}])
def test_similar_users_is_implicits(unbiased, call):
    peer = implicit_model(unbiased, with_biases=False)
    ours = unbiased.similar_users([3, 9], **call)
    theirs = peer.similar_users(np.array([3, 9]), **call)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


def test_similar_items_with_k_lists_the_nearest_others(unbiased):
    implicit_ids, _ = unbiased.similar_items(7, N=6)
    others, _ = unbiased.similar_items(7, k=5)
    np.testing.assert_array_equal(others, implicit_ids[1:])
    with pytest.raises(TypeError, match="k= .* is fastad's older call"):
        unbiased.similar_items(7, N=3, k=3)
    with pytest.raises(ValueError, match="give items .* or filter_items"):
        unbiased.similar_items(7, items=[1, 2], filter_items=[3])


# ---------------------------------------------------------------- memory of the factors

def test_factors_are_drawn_in_float32_without_a_float64_transient():
    """A float64 draw (then cast) would need 3x the tables' bytes at its peak; drawn in their
    dtype straight into the Parameters, the peak is the tables themselves."""
    tracemalloc.start()
    try:
        model = fa.models.BPR(20_000, 5_000, dim=32, biases=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    tables = model.U.value.nbytes + model.V.value.nbytes
    assert model.U.value.dtype == np.float32
    assert peak < 1.2 * tables, (peak, tables)
    assert abs(model.U.value.std() - 0.1) < 0.005          # N(0, scale)


def test_given_float32_tables_are_adopted_without_a_copy():
    U = np.random.default_rng(0).normal(size=(9, 4)).astype(np.float32)
    V = np.random.default_rng(1).normal(size=(7, 4)).astype(np.float32)
    model = fa.models.BPR(U=U, V=V)
    assert np.shares_memory(model.U.value, U) and np.shares_memory(model.V.value, V)
    assert (model.n_users, model.n_items, model.dim) == (9, 7, 4)
    model.fit(fa.data.planted_interactions(9, 7, per_user=2, seed=0), epochs=1)
    assert np.array_equal(model.U.value, U)                 # trained in place
    copied = fa.models.BPR(U=U, V=V, copy=True)
    assert not np.shares_memory(copied.U.value, U)


@pytest.mark.parametrize("unfit", [
    lambda U: U.astype(np.float64),                         # another dtype than the model's
    lambda U: np.asfortranarray(U),                         # not C-contiguous
    lambda U: U[:, ::2],                                    # a strided view
    lambda U: _read_only(U),
])
def test_tables_a_parameter_cannot_train_in_place_are_copied(unfit):
    U = unfit(np.ones((6, 4), np.float32))
    model = fa.models.BPR(U=U, V=np.ones((5, U.shape[1]), np.float32))
    assert not np.shares_memory(model.U.value, U)
    assert model.U.value.dtype == np.float32 and model.U.value.flags.c_contiguous


def _read_only(array):
    array.flags.writeable = False
    return array


def test_fit_lays_out_its_own_copy_of_the_matrix_without_copying_it_again():
    """Interactions(copy=False) holds a CSR matrix's arrays as they are (its view read-only), which
    Recommender.fit does with the copy check_interactions made; copy=True, the default, keeps
    the caller's matrix apart."""
    matrix = fa.data.planted_interactions(50, 30, per_user=4, seed=0).astype(np.float64)
    held = fa.data.Interactions(matrix, copy=False)
    assert np.shares_memory(held.matrix.indices, matrix.indices)
    assert not held.matrix.indices.flags.writeable
    apart = fa.data.planted_interactions(50, 30, per_user=4, seed=0)
    assert not np.shares_memory(fa.data.Interactions(apart).matrix.indices, apart.indices)
    assert apart.indices.flags.writeable
    model = fa.models.BPR(50, 30, dim=4).fit(apart)
    assert not np.shares_memory(model.liked.indices, apart.indices)
    with pytest.raises(TypeError, match="Interactions: copy must be True or False"):
        fa.data.Interactions(apart, copy="no")
