"""WARP and k-OS WARP in the compiled loop: `fa.ranking_loss(..., weights=)` (each triple's loss
times a constant), `fa.data.WarpSampler` (negatives drawn against the current scores, LightFM's
rank weight) and `BPR(loss="warp" | "warp-kos")`."""
import math

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa
from fastad.models.recsys._pairs import ONLINE_RATE_STEP, WARP_MAX_WEIGHT, online_weight, warp_weight

# ------------------------------------------------------------------ ranking_loss(weights=)

IDS = ([0, 1, 4], [1, 2, 3], [5, 5, 0])


def _tables(f64=True, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    return [fa.Parameter(rng.normal(size=shape), dtype=dtype) for shape in ((5, 3), (6, 3), (6, 1))]


def _composed_weighted(U, V, b, w, loss, reduction, regularization):
    """The weighted loss of composed ops: margin_loss "none", the L2 term, times the weights."""
    u, i, j = (fa.IndexInput(ids) for ids in IDS)
    losses = fa.margin_loss(fa.ranking_margin(U, u, V, i, j, item_bias=b), loss, "none")
    if regularization:
        squares = (fa.vector_dot(U[u], U[u]) + fa.vector_dot(V[i], V[i]) + fa.vector_dot(V[j], V[j])
                   + fa.reshape(b[i] * b[i], (3,)) + fa.reshape(b[j] * b[j], (3,)))
        losses = losses + squares * (0.5 * regularization)
    losses = losses * w
    return {"sum": losses.sum(), "mean": losses.mean(), "none": losses}[reduction]


@pytest.mark.parametrize("loss", ["hinge", "bpr"])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("regularization", [0.0, 0.1])
def test_weights_scale_each_triples_loss_and_gradient_as_the_composed_ops(loss, reduction, regularization):
    results = []
    for fused in (True, False):
        U, V, b = _tables()
        w = fa.Input([0.5, 0.0, 2.0], dtype=np.float64)
        if fused:
            out = fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], item_bias=b, reduction=reduction,
                                  regularization=regularization, loss=loss, weights=w)
        else:
            out = _composed_weighted(U, V, b, w, loss, reduction, regularization)
        out.backward(np.ones(3) if reduction == "none" else None)
        results.append([out.numpy()] + [p.grad for p in (U, V, b)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_a_weight_of_zero_leaves_its_rows_alone_and_a_weight_scales_the_gradient():
    U, V, b = _tables()
    w = fa.Input([1.0, 1.0, 1.0], dtype=np.float64)
    loss = fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], item_bias=b, reduction="sum", loss="hinge",
                           weights=w)
    loss.backward()
    ones = U.grad.copy()
    w.set_value([3.0, 0.0, 0.0])
    loss.forward()
    U.zero_grad()
    loss.backward()
    expected = np.zeros_like(ones)
    expected[0] = 3 * ones[0]           # user 0 is only in triple 0
    np.testing.assert_allclose(U.grad, expected)


def test_bad_weights_raise():
    U, V, b = _tables()
    with pytest.raises(ValueError, match=r"ranking_loss: weights must have the ids' shape \(3,\)"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Input(np.ones(2), dtype=np.float64))
    with pytest.raises(ValueError, match="ranking_loss: weights must take no gradient"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Parameter(np.ones(3), dtype=np.float64))
    with pytest.raises(TypeError, match="ranking_loss: mixed dtypes"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Input(np.ones(3), dtype=np.float32))
    with pytest.raises(TypeError, match="ranking_loss: weights must be a fastad Variable"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=np.ones(3))


# ------------------------------------------------------------------ the rank weight

def test_the_rank_weight_is_lightfms_log_of_the_estimated_rank():
    assert warp_weight(1001, 1) == pytest.approx(math.log(1000))
    assert warp_weight(1001, 3) == pytest.approx(math.log(333))       # floor(1000 / 3)
    assert warp_weight(1001, 10) == pytest.approx(math.log(100))
    assert warp_weight(5, 2) == pytest.approx(math.log(2))
    assert warp_weight(5, 3) == 0.0 and warp_weight(5, 9) == 0.0       # floor below 1: log(max(1, .))
    assert warp_weight(10 ** 6, 1) == WARP_MAX_WEIGHT == 10.0          # log(999,999) > 10: capped


# ------------------------------------------------------------------ WarpSampler

def _warp_setup(likes, U, V, bias=None, batch=1, **kwargs):
    dtype = U.dtype
    users, pos, neg = (fa.IndexInput([0] * batch) for _ in range(3))
    weights = fa.Input(np.zeros(batch), dtype=dtype)
    params = [fa.Parameter(x, dtype=dtype) for x in (U, V) + (() if bias is None else (bias,))]
    sampler = fa.data.WarpSampler(likes, users, pos, neg, weights, *params, **kwargs)
    loss = fa.ranking_loss(params[0], users, params[1], pos, neg, item_bias=params[2] if bias is not None else None,
                           loss="hinge", weights=weights, reduction="sum")
    return sampler, loss, params


def _one_user_likes(items, n_items):
    return sp.csr_matrix((np.ones(len(items)), ([0] * len(items), items)), shape=(1, n_items))


def test_one_warp_step_is_the_weighted_hinge_update_of_the_drawn_violator():
    """One positive, every unliked item a violator: the first draw that is not the liked item
    is the negative (tries = 1 with this seed), its weight log(floor((n - 1) / 1)), and the SGD
    step that of the weighted hinge, computed here in numpy."""
    n_items, dim, lr = 1001, 4, 0.01
    rng = np.random.default_rng(0)
    U = rng.normal(size=(1, dim))
    V = np.tile(U, (n_items, 1))             # every item scores |U|^2 ...
    V[7] = -U[0]                             # ... but the liked one, far below: all violate
    bias = rng.normal(size=(n_items, 1)) * 0.01
    sampler, loss, (Up, Vp, bp) = _warp_setup(_one_user_likes([7], n_items), U, V, bias, examples=1,
                                              seed=3)
    fa.train(loss, fa.optim.SGD([Up, Vp, bp], lr=lr), sampler, epochs=1)
    user, pos, neg = (int(leaf.value[0]) for leaf in sampler.leaves[:3])
    weight = float(sampler.leaves[3].value[0])
    assert (user, pos) == (0, 7) and neg != 7
    assert weight == pytest.approx(math.log(n_items - 1))
    # numpy: the hinge's gradient of the margin is -1 (the triple violates), times the weight
    u, vi, vj = U[0].copy(), V[7].copy(), V[neg].copy()
    assert u @ vj + bias[neg, 0] > u @ vi + bias[7, 0] - 1
    np.testing.assert_allclose(Up.value[0], u + lr * weight * (vi - vj), rtol=1e-12)
    np.testing.assert_allclose(Vp.value[7], vi + lr * weight * u, rtol=1e-12)
    np.testing.assert_allclose(Vp.value[neg], vj - lr * weight * u, rtol=1e-12)
    np.testing.assert_allclose(bp.value[[7, neg], 0], bias[[7, neg], 0] + lr * weight * np.array([1, -1]))
    untouched = np.setdiff1d(np.arange(n_items), [7, neg])
    np.testing.assert_array_equal(Vp.value[untouched], V[untouched])


@pytest.mark.parametrize("rank_estimate", ["sampled", "online"])
def test_weighted_multiplies_the_rank_weight_by_the_positives_stored_value(rank_estimate):
    """One user likes items 7 (stored 2.5) and 9 (stored 0.5); every other item violates at once."""
    n_items, dim = 1001, 4
    U = np.ones((1, dim))
    V = np.ones((n_items, dim))
    V[[7, 9]] = -1.0
    likes = sp.csr_matrix(([2.5, 0.5], ([0, 0], [7, 9])), shape=(1, n_items))
    for weighted in (False, True):
        sampler, loss, _ = _warp_setup(likes, U, V, examples=2, seed=3, weighted=weighted,
                                       rank_estimate=rank_estimate)
        drawn = {int(pos[0]): float(weight[0]) for _, pos, _, weight in sampler.epoch()}
        assert drawn.keys() == {7, 9} and sampler.weighted == weighted
        base = math.log(n_items - 1)        # every draw violates: the first draw, or a rate of 1
        expected = {7: 2.5 * base, 9: 0.5 * base} if weighted else {7: base, 9: base}
        assert drawn == pytest.approx(expected, rel=1e-6)


#: each row size's target elements: in each 32-byte lane block of a row of 19 floats or doubles,
#: and its tail; of a row of 83 (a tile of 64 floats or two of 32 doubles, then pairs of lanes, then
#: a tail of 3), every fourth element and the last
TARGETS = {19: (0, 5, 9, 13, 17), 83: tuple(range(1, 83, 4)) + (82,)}
SCAN_EPOCHS = 12


def _scan_setup(dtype, features, violate, dim):
    """50 users of one representation u who like item 0 (score 0: a candidate violates above -1),
    and for each target element d of a row of `dim` a candidate: +-4 at d (in the item's first feature, weight 4, with
    features), the rest of its score (-4.5 or +2.5: -0.5 or -1.5 in all) at another element
    (its second feature, weight 0.5). A scan that missed d, either feature or its weight would
    judge the candidate the other way. With features the user is 2 * U[0] + 0.5 * U[1]."""
    targets, n_users = TARGETS[dim], 50
    u = np.linspace(0.5, 1.5, dim)
    big, rest = (4.0, -4.5) if violate else (-4.0, 2.5)
    parts = np.zeros((2, len(targets) + 1, dim))     # (feature, item, element): each item's two parts
    for k, d in enumerate(targets, start=1):
        other = (d + 7) % dim
        parts[0, k, d], parts[1, k, other] = big / u[d], rest / u[other]
    likes = sp.csr_matrix((np.ones(n_users), (np.arange(n_users), np.zeros(n_users))), shape=(n_users, len(targets) + 1))
    users, pos, neg = (fa.IndexInput([0]) for _ in range(3))
    weights = fa.Input([0.0], dtype=dtype)
    if not features:
        tables = (u[None, :].repeat(n_users, 0), parts[0] + parts[1])
        options = {}
    else:
        n_items = len(targets) + 1
        tables = (np.stack([0.6 * u, -0.4 * u]), np.concatenate([parts[0] / 4.0, parts[1] / 0.5]))
        item_features = sp.hstack([sp.identity(n_items) * 4.0, sp.identity(n_items) * 0.5]).tocsr()
        options = {"user_features": sp.csr_matrix(np.tile([2.0, 0.5], (n_users, 1))),
                   "item_features": item_features}
    U, V = (fa.Parameter(x, dtype=dtype) for x in tables)
    return fa.data.WarpSampler(likes, users, pos, neg, weights, U, V, seed=0, max_sampled=1, **options)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("features", [False, True])
@pytest.mark.parametrize("dim", sorted(TARGETS))
def test_the_scans_score_every_element_and_feature(dtype, features, dim):
    """One draw a positive. Candidates that violate only when every element (the tiles, the lane
    blocks and the tail), every feature and its weight count: each is drawn as a negative (the
    draws of the liked item 0 are skipped); candidates that do not violate, but would without
    any one of them: every positive is skipped."""
    n_items, positives = len(TARGETS[dim]) + 1, 50 * SCAN_EPOCHS
    sampler = _scan_setup(dtype, features, violate=True, dim=dim)
    drawn = [(int(j[0]), float(w[0])) for e in range(SCAN_EPOCHS) for _, _, j, w in sampler.epoch(e)]
    assert {j for j, _ in drawn} == set(range(1, n_items))
    assert len(drawn) + sampler.skipped == positives
    assert [w for _, w in drawn] == pytest.approx([warp_weight(n_items, 1)] * len(drawn))
    sampler = _scan_setup(dtype, features, violate=False, dim=dim)
    assert [ex for e in range(SCAN_EPOCHS) for ex in sampler.epoch(e)] == [] and sampler.skipped == positives


def test_tries_count_every_draw_a_liked_one_included():
    """Five items, the user likes item 0 and only item 3 violates: the draw that finds it is
    geometric (p = 1/5), and the weight log(max(1, floor(4 / tries))) is log 4 at the first
    draw, log 2 at the second, 0 later: their shares are 1/5 and 4/25."""
    V = np.array([[1.0], [-5.0], [-5.0], [5.0], [-5.0]])
    sampler, _, _ = _warp_setup(_one_user_likes([0], 5), np.ones((1, 1)), V, max_sampled=100,
                                examples=20_000, seed=0)
    drawn = list(sampler.epoch())
    assert {int(neg[0]) for _, _, neg, _ in drawn} == {3}
    weights = np.array([w[0] for _, _, _, w in drawn])
    assert set(np.round(weights, 6)) <= {round(math.log(4), 6), round(math.log(2), 6), 0.0}
    assert abs(np.mean(np.isclose(weights, math.log(4))) - 1 / 5) < 0.015
    assert abs(np.mean(np.isclose(weights, math.log(2))) - 4 / 25) < 0.015


def test_an_epoch_walks_each_interaction_once():
    """Every unliked item violates, so every positive is a triple: an epoch of the default size
    is each interaction once, in a shuffled order, and so is the next (another order); two
    workers walk their shares."""
    likes = fa.data.planted_interactions(40, 30, per_user=5, seed=0)
    U, V = np.ones((40, 1)), np.ones((30, 1))
    expected = sorted(zip(*likes.nonzero()))
    for rank, workers in ((0, 1), (0, 2), (1, 2)):
        sampler, _, _ = _warp_setup(likes, U, V, max_sampled=1000, seed=0, rank=rank, workers=workers)
        epochs = [[(int(u[0]), int(p[0])) for u, p, _, _ in sampler.epoch(e)] for e in range(2)]
        share = expected[rank * len(expected) // workers:(rank + 1) * len(expected) // workers]
        assert sorted(epochs[0]) == sorted(epochs[1]) == share and epochs[0] != epochs[1]


def _rows(side, array):
    """A table or state array as the sampler's prefetch targets name it: (side, address, row bytes)."""
    return side, array.ctypes.data, array[0].nbytes


def test_only_the_tables_rows_load_ahead_and_the_optimizers_state_rows_load_for_a_triple_found(monkeypatch):
    """Under Adagrad the loop gives the sampler the tables and the sums beside them: the next
    positive's user and item rows of the tables load ahead; the sums' rows (on the user's side
    and the items', the negative's included) only once a positive has found its triple, which
    most positives of a trained model do not. Both are let go after the run. By ids, and in
    LightFM's model (its WarpSampler inside FeatureSampler, the leaves its bags)."""
    likes = fa.data.planted_interactions(40, 30, per_user=5, seed=0)
    rng = np.random.default_rng(0)
    sampler, loss, (U, V, b) = _warp_setup(likes, rng.normal(size=(40, 8)), rng.normal(size=(30, 8)),
                                           np.zeros((30, 1)), examples=20, seed=0)
    during = []
    fa.train(loss, fa.optim.Adagrad([U, V, b], lr=0.1), sampler, report_every=1, progress=lambda done, per_second:
             during.append((sampler._row_prefetch_targets(), sampler._state_prefetch_targets())))
    ahead, states = during[0]
    tables = {_rows(0, U.value), _rows(1, V.value), _rows(1, b.value)}
    assert set(ahead) == tables
    assert not {address for _, address, _ in states} & {address for _, address, _ in tables}
    assert (0, U.value[0].nbytes) in {(side, width) for side, _, width in states}      # the user's sums
    assert sampler._row_prefetch_targets() == sampler._state_prefetch_targets() == []

    made, during = [], []
    real = fa.models.recsys.lightfm.WarpSampler
    monkeypatch.setattr(fa.models.recsys.lightfm, "WarpSampler", lambda *args, **kw: made.append(real(*args, **kw))
                        or made[-1])
    model = fa.models.LightFM(no_components=8, loss="warp", random_state=0)
    tags = sp.random(30, 12, density=0.3, format="csr", random_state=0)
    model.fit(likes, item_features=tags, epochs=1, progress=lambda done, per_second: during.append(
        (made[-1]._row_prefetch_targets(), made[-1]._state_prefetch_targets())))
    ahead, states = during[0]
    tables = {_rows(0, model.user_embeddings.value), _rows(1, model.item_embeddings.value),
              _rows(1, model.item_bias.value)}
    assert set(ahead) == tables
    assert {(side, width) for side, _, width in states} == {(side, width) for side, _, width in tables}
    assert not {address for _, address, _ in states} & {address for _, address, _ in tables}
    assert made[-1]._row_prefetch_targets() == made[-1]._state_prefetch_targets() == []


def test_a_positive_that_exhausts_max_sampled_takes_no_update():
    """No item comes within the margin of the liked one: every positive draws max_sampled
    negatives and is skipped; nothing is replayed and the tables stay as they were."""
    V = np.array([[10.0], [-5.0], [-5.0], [-5.0]])
    sampler, loss, params = _warp_setup(_one_user_likes([0], 4), np.ones((1, 1)), V, max_sampled=3,
                                        examples=50, seed=0)
    assert list(sampler.epoch()) == [] and sampler.skipped == 50
    history = fa.train(loss, fa.optim.SGD(params, lr=0.1), sampler, epochs=2)
    assert history == [0.0, 0.0] and sampler.skipped == 150
    np.testing.assert_array_equal(params[1].value, V)


def test_a_batch_whose_epoch_runs_out_fills_its_last_slots_with_weight_zero():
    V = np.array([[1.0], [-5.0], [5.0], [-5.0]])          # only item 2 violates
    sampler, _, _ = _warp_setup(_one_user_likes([0], 4), np.ones((1, 1)), V, batch=4,
                                max_sampled=1, examples=1, seed=2)
    (users, pos, neg, weights), = list(sampler.epoch())     # 2 of the 4 positives found item 2
    found = neg == 2
    assert found.sum() == 4 - sampler.skipped >= 1
    assert np.all(weights[~found] == 0) and np.all(neg[~found] == pos[~found])
    assert np.all(weights[found] == pytest.approx(math.log(3)))


def test_kos_takes_the_kth_best_of_the_sampled_positives():
    """The user's items score 3, 2, 1 (items 0, 1, 2): k-OS draws min(kos_n, 3) = 3 of them
    uniformly (with repetition, as LightFM) and takes the k-th best. The best of three is
    item 0 unless none was drawn (19/27), the median is item 1 in 13/27 of the draws, the
    worst is item 2 in 19/27."""
    V = np.array([[3.0], [2.0], [1.0], [9.0], [9.0]])
    likes = _one_user_likes([0, 1, 2], 5)
    for k, item, share in ((1, 0, 19 / 27), (2, 1, 13 / 27), (3, 2, 19 / 27)):
        sampler, _, _ = _warp_setup(likes, np.ones((1, 1)), V, kos_k=k, kos_n=10, examples=20_000, seed=1)
        positives = np.array([int(p[0]) for _, p, _, _ in sampler.epoch()])
        assert len(positives) > 19_000
        assert abs(np.mean(positives == item) - share) < 0.015, (k, np.bincount(positives))


def test_kos_with_a_user_without_items_skips_them_and_ends():
    likes = sp.csr_matrix(([1.0, 1.0], ([0, 2], [0, 1])), shape=(3, 6))    # user 1 has no item
    rng = np.random.default_rng(0)
    sampler, _, _ = _warp_setup(likes, rng.normal(size=(3, 2)), rng.normal(size=(6, 2)), kos_k=1,
                                kos_n=2, max_sampled=50, examples=300, seed=0)
    drawn = list(sampler.epoch())
    assert 0 < len(drawn) < 300 and {int(u[0]) for u, _, _, _ in drawn} <= {0, 2}
    assert len(drawn) + sampler.skipped == 300


def test_warp_sampler_bad_input_raises():
    likes = _one_user_likes([0], 4)
    U, V = np.ones((1, 2)), np.ones((4, 2))
    with pytest.raises(ValueError, match="WarpSampler: max_sampled must be >= 1, got 0"):
        _warp_setup(likes, U, V, max_sampled=0)
    with pytest.raises(TypeError, match="WarpSampler: max_sampled must be an integer"):
        _warp_setup(likes, U, V, max_sampled=2.0)
    with pytest.raises(ValueError, match=r"WarpSampler: kos_k \(3\) must be <= kos_n \(2\)"):
        _warp_setup(likes, U, V, kos_k=3, kos_n=2)
    with pytest.raises(ValueError, match="WarpSampler: the tables have 1 user rows and 5 item rows"):
        _warp_setup(likes, U, np.ones((5, 2)))
    with pytest.raises(ValueError, match=r"WarpSampler: item_bias must have shape \(4,\) or \(4, 1\)"):
        _warp_setup(likes, U, V, np.ones((3, 1)))
    users, pos, neg = (fa.IndexInput([0]) for _ in range(3))
    Up, Vp = fa.Parameter(U), fa.Parameter(V)
    with pytest.raises(ValueError, match="WarpSampler: weights must be an Input of 1 values"):
        fa.data.WarpSampler(likes, users, pos, neg, fa.Input(np.zeros(2)), Up, Vp)
    with pytest.raises(TypeError, match="WarpSampler: weights is float64 but user_table is float32"):
        fa.data.WarpSampler(likes, users, pos, neg, fa.Input(np.zeros(1), dtype=np.float64), Up, Vp)
    with pytest.raises(ValueError, match="WarpSampler: weighted positives are WARP's"):
        _warp_setup(likes, U, V, kos_k=1, weighted=True)
    with pytest.raises(ValueError, match="WarpSampler: rank_estimate must be one of 'sampled', 'online', "
                                         "got 'exact'"):
        _warp_setup(likes, U, V, rank_estimate="exact")


# ------------------------------------------------------------------ the online rank estimate

def test_the_online_weight_is_the_log_of_the_rate_times_the_other_items():
    assert online_weight(1001, 1.0) == pytest.approx(math.log(1000))
    assert online_weight(1001, 0.325) == pytest.approx(math.log(325))
    assert online_weight(1001, 0.0005) == 0.0                          # floor below 1: log(max(1, .))
    assert online_weight(10 ** 6, 1.0) == WARP_MAX_WEIGHT              # capped as warp_weight is


def test_online_draws_one_candidate_a_positive_and_moves_the_users_rate():
    """The liked item scores far above the others: no draw violates, each positive draws one
    candidate (the rate falls by ONLINE_RATE_STEP's factor once a positive) and takes no update."""
    n_items = 50
    U = np.ones((1, 2))
    V = -np.ones((n_items, 2))
    V[0] = 10.0
    sampler, loss, (Up, Vp) = _warp_setup(_one_user_likes([0], n_items), U, V, examples=6, seed=0,
                                          rank_estimate="online", max_sampled=10)
    assert sampler.rank_estimate == "online" and sampler.rates.tolist() == [1.0]
    fa.train(loss, fa.optim.SGD([Up, Vp], lr=0.1), sampler, epochs=1)
    assert sampler.skipped == 6
    assert sampler.rates[0] == pytest.approx((1 - ONLINE_RATE_STEP) ** 6, rel=1e-6)
    np.testing.assert_array_equal(Vp.value, V)
    assert _warp_setup(_one_user_likes([0], n_items), U, V)[0].rates is None


def test_online_weighs_a_violator_by_the_users_rate_counting_that_draw():
    n_items, dim = 1001, 4
    U = np.ones((1, dim))
    V = np.ones((n_items, dim))
    V[7] = -1.0                             # every item but the liked one violates
    sampler, loss, (Up, Vp) = _warp_setup(_one_user_likes([7], n_items), U, V, examples=1, seed=3,
                                          rank_estimate="online")
    sampler.rates[0] = 0.25
    fa.train(loss, fa.optim.SGD([Up, Vp], lr=0.01), sampler, epochs=1)
    rate = 0.25 + ONLINE_RATE_STEP * 0.75
    assert sampler.rates[0] == pytest.approx(rate, rel=1e-6)
    # log(324): the rate is a float32, 0.325 just below
    assert float(sampler.leaves[3].value[0]) == pytest.approx(math.log(math.floor(1000 * float(sampler.rates[0]))))
    assert int(sampler.leaves[2].value[0]) != 7


def test_a_fits_epochs_carry_the_users_rates():
    """A worker's epoch samplers (one an epoch) share its feeds' rates: the estimate builds up
    over a fit, as documented, instead of starting from 1 each epoch; BPR's and LightFM's."""
    likes = fa.data.planted_interactions(30, 20, per_user=4, seed=0)
    model = fa.models.BPR(30, 20, dim=4, loss="warp", rank_estimate="online", seed=0)
    _, feeds = model.example_graph(batch=1)
    first = model.epoch_sampler(feeds, fa.data.Interactions(likes), 40, [0, 0, 0])
    second = model.epoch_sampler(feeds, fa.data.Interactions(likes), 40, [0, 1, 0])
    assert first.rates is second.rates is feeds.rates and first.rates.shape == (30,)
    lightfm = fa.models.LightFM(no_components=4, loss="warp", rank_estimate="online").fit(likes, epochs=1)
    _, bags = lightfm.example_graph(batch=1)
    lightfm.epoch_sampler(bags, fa.data.Interactions(likes), 40, [0, 0, 0])
    rates = bags.rates
    lightfm.epoch_sampler(bags, fa.data.Interactions(likes), 40, [0, 1, 0])
    assert rates is not None and bags.rates is rates and rates.shape == (30,)


def test_rates_given_must_be_one_float32_per_user():
    U, V = np.ones((1, 2)), np.ones((50, 2))
    for bad in (np.ones(2, np.float32), np.ones(1, np.float64), [1.0]):
        with pytest.raises(ValueError, match="WarpSampler: rates must be a writeable C-contiguous float32 "
                                             "array of 1 values"):
            _warp_setup(_one_user_likes([0], 50), U, V, rank_estimate="online", rates=bad)


# ------------------------------------------------------------------ BPR(loss="warp" | "warp-kos")

@pytest.fixture(scope="module")
def split():
    likes = fa.data.planted_interactions(600, 200, per_user=15, seed=1)
    return fa.data.train_test_split(likes, 0.2, seed=1)


@pytest.mark.parametrize("loss, epochs, auc, rank_estimate", [("warp", 15, 0.68, "sampled"),
                                                            ("warp-kos", 200, 0.64, "sampled"),
                                                            ("warp", 15, 0.68, "online"),
                                                            ("warp-kos", 200, 0.62, "online")])
def test_bpr_trains_with_warp(split, loss, epochs, auc, rank_estimate):
    """(k-OS's epoch is one positive per user: 600 here, against WARP's 7,200. The online rank
    estimate draws one candidate a positive, so fewer positives find a violator and train.)"""
    train, test = split
    model = fa.models.BPR(600, 200, dim=16, loss=loss, biases=True, seed=2, rank_estimate=rank_estimate)
    before = fa.metrics.evaluate(model, test, train=train)["auc"]
    model.fit(train, epochs=epochs, lr=0.05, optimizer="adagrad", seed=0)
    after = fa.metrics.evaluate(model, test, train=train)["auc"]
    assert after > before + 0.14 and after > auc, (before, after)
    assert model(fa.IndexInput([1]), fa.IndexInput([2]), fa.IndexInput([3])).op_name == "ranking_loss"


def test_warp_kos_epochs_are_one_positive_per_user_by_default(split):
    train, _ = split
    model = fa.models.BPR(600, 200, dim=8, loss="warp-kos")
    assert model.epoch_samples(train) == 600 and fa.models.BPR(600, 200).epoch_samples(train) == train.nnz


@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_warp_trains_in_two_workers(split, start_method):
    train, test = split
    model = fa.models.BPR(600, 200, dim=16, loss="warp", biases=True, seed=2)
    history = model.fit(train, epochs=15, lr=0.05, optimizer="adagrad", seed=0, workers=2,
                        start_method=start_method).history
    assert len(history) == 15 and np.all(np.isfinite(history))
    assert fa.metrics.evaluate(model, test, train=train)["auc"] > 0.68


def test_save_and_load_keep_the_warp_loss_and_its_settings(split, tmp_path):
    train, _ = split
    model = fa.models.BPR(600, 200, dim=8, loss="warp-kos", max_sampled=7, kos_k=2, kos_n=4,
                          rank_estimate="online")
    model.fit(train, epochs=1, optimizer="adagrad")
    model.save(tmp_path / "warp.npz")
    loaded = fa.models.BPR.load(tmp_path / "warp.npz")
    assert (loaded.loss, loaded.max_sampled, loaded.kos_k, loaded.kos_n) == ("warp-kos", 7, 2, 4)
    assert loaded.rank_estimate == "online"
    assert loaded.settings() == model.settings()
    np.testing.assert_array_equal(loaded.scores([0, 1]), model.scores([0, 1]))
    _, feeds = loaded.example_graph()
    sampler = loaded.epoch_sampler(feeds, fa.data.Interactions(train), 5, 0)
    assert (sampler.max_sampled, sampler.kos_k, sampler.kos_n, sampler.rank_estimate) == (7, 2, 4, "online")


def test_bpr_warp_bad_input_raises():
    with pytest.raises(ValueError, match="BPR: max_sampled must be >= 1, got 0"):
        fa.models.BPR(10, 5, loss="warp", max_sampled=0)
    with pytest.raises(ValueError, match="BPR: kos_n must be >= 5, got 3"):
        fa.models.BPR(10, 5, loss="warp-kos", kos_n=3)
    with pytest.raises(ValueError, match="BPR: rank_estimate must be one of"):
        fa.models.BPR(10, 5, loss="warp", rank_estimate="exact")
    model = fa.models.BPR(10, 5, loss="warp")
    settings = fa.models.runner.RunSettings.for_fit("BPR.fit", 1, None, "cpu", None, samples=10,
                                                    optimizer="sgd", lr=0.05, first_epoch=1)
    model.check_run("BPR.fit", settings)
    with pytest.raises(ValueError, match="BPR.fit: loss='warp' draws its negatives against the current "
                                         "scores in the CPU loop"):
        model.check_run("BPR.fit", type("Settings", (), {"device": "cuda"})())


@pytest.mark.parametrize("workers, start_method", [(1, None), (2, "threads"), (2, "fork")])
def test_fit_passes_optimizer_options_to_every_workers_optimizer(split, workers, start_method):
    """Adagrad's sums starting at 1e12 (optimizer_options) make its steps vanish: the factors
    stay where they started, in one worker or two, threads or processes."""
    train, _ = split
    model = fa.models.BPR(600, 200, dim=8, loss="warp", seed=2)
    start = model.V.value.copy()
    model.fit(train, epochs=2, optimizer="adagrad", workers=workers, start_method=start_method,
              optimizer_options={"initial_accumulator_value": 1e12})
    assert np.abs(model.V.value - start).max() < 1e-4
    model.fit(train, epochs=1, optimizer="adagrad", workers=workers, start_method=start_method)
    assert np.abs(model.V.value - start).max() > 1e-3


def test_bad_optimizer_options_raise_before_training(split):
    train, _ = split
    model = fa.models.BPR(600, 200, dim=8, loss="warp")
    start = model.V.value.copy()
    with pytest.raises(TypeError, match="BPR.fit: optimizer_options {'momentum': 0.9} are not adagrad's"):
        model.fit(train, optimizer="adagrad", optimizer_options={"momentum": 0.9})
    with pytest.raises(ValueError, match="BPR.fit: optimizer_options: Adagrad: initial_accumulator_value"):
        model.fit(train, optimizer="adagrad", optimizer_options={"initial_accumulator_value": -1})
    with pytest.raises(TypeError, match="BPR.fit: optimizer_options must be a dict"):
        model.fit(train, optimizer_options=[("momentum", 0.9)])
    with pytest.raises(TypeError, match="BPR.fit: give the learning rate as lr"):
        model.fit(train, optimizer_options={"lr": 0.1})
    np.testing.assert_array_equal(model.V.value, start)


def test_a_bpr_saved_before_the_warp_settings_loads_with_their_defaults():
    import os
    path = os.path.join(os.path.dirname(__file__), "data", "saved_before_one_format", "bpr.npz")
    model = fa.models.BPR.load(path)
    assert (model.loss, model.max_sampled, model.kos_k, model.kos_n, model.rank_estimate) == \
        ("bpr", 10, 5, 10, "sampled")


def test_warp_models_saved_before_the_rank_estimate_load_with_the_sampled_one():
    """Files saved by BPR and LightFM before `rank_estimate` existed (a k-OS WARP BPR and a WARP
    LightFM, 20 users x 10 items): they load with its default, their settings and factors kept,
    and train on."""
    import os
    folder = os.path.join(os.path.dirname(__file__), "data", "saved_before_rank_estimate")
    bpr = fa.models.BPR.load(os.path.join(folder, "bpr_warp.npz"))
    assert (bpr.loss, bpr.max_sampled, bpr.kos_k, bpr.kos_n, bpr.rank_estimate, bpr.biases) == \
        ("warp-kos", 7, 2, 4, "sampled", True)
    np.testing.assert_allclose(bpr.scores([0, 1])[0][:4], [-0.2563682, -0.14561585, 0.01236786, -0.10503429],
                               rtol=1e-6)
    lightfm = fa.models.LightFM.load(os.path.join(folder, "lightfm_warp.npz"))
    assert (lightfm.loss, lightfm.max_sampled, lightfm.rank_estimate) == ("warp", 7, "sampled")
    np.testing.assert_allclose(lightfm.predict(np.zeros(4, int), np.arange(4)),
                               [-0.07748758, -0.0156539, -0.02642097, -0.029581], rtol=1e-6)
    likes = fa.data.planted_interactions(20, 10, per_user=4, seed=0)
    bpr.fit(likes, epochs=1, optimizer="adagrad")
    lightfm.fit_partial(likes, epochs=1)
