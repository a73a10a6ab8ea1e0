"""fa.models.LightFM and the feature bags of the compiled loop (fa.data.FeatureBags,
FeatureSampler, WarpSampler's user_features/item_features): updates against a numpy
reference in float64, identity features against the ids-only graph, the cold start, bad
input, save and load."""
import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

N_USERS, N_ITEMS = 60, 40


def _likes(seed=0):
    return fa.data.planted_interactions(N_USERS, N_ITEMS, per_user=6, seed=seed)


def _features(rows, extra, seed):
    """The identity beside `extra` random tag columns, weights in (0, 1)."""
    tags = sp.random(rows, extra, density=0.3, format="csr", random_state=seed)
    return sp.hstack([sp.identity(rows) * 0.5, tags]).tocsr()


def _fitted_tables(loss, likes, user_features, item_features):
    """A float64 LightFM with its tables made (no epoch trained)."""
    model = fa.models.LightFM(no_components=5, loss=loss, random_state=1, dtype=np.float64)
    model.fit(likes, user_features=user_features, item_features=item_features, epochs=0)
    for name in ("user_bias", "item_bias"):        # non-zero biases, so that their updates show
        model._parameters[name].value[:] = np.random.default_rng(2).normal(0, 0.1, model._parameters[name].shape)
    return model


def _one_step(model, likes, seed):
    """One SGD step of the model's graph on one example its sampler draws: the tables before
    and after, and the example's ids and extra value."""
    loss, bags = model.example_graph()
    sampler = model.epoch_sampler(bags, fa.data.Interactions(likes), 1, seed)
    params = dict(model.named_parameters())
    before = {name: p.value.copy() for name, p in params.items()}
    fa.train(loss, fa.optim.SGD(list(params.values()), lr=0.3), sampler, epochs=1)
    ids = [int(leaf.value[0]) for leaf in bags.ids]
    extra = None if bags.extra is None else float(bags.extra.value[0])
    return before, {name: p.value for name, p in params.items()}, ids, extra


@pytest.mark.parametrize("loss", ["bpr", "warp", "logistic"])
def test_a_step_is_the_numpy_reference(loss):
    likes = _likes()
    uf, itf = _features(N_USERS, 7, 3), _features(N_ITEMS, 5, 4)
    model = _fitted_tables(loss, likes, uf, itf)
    before, after, ids, extra = _one_step(model, likes, seed=5)
    Fu, Fi = uf.toarray(), itf.toarray()
    UE, IE, ub, ib = (before[k] for k in ("user_embeddings", "item_embeddings", "user_bias", "item_bias"))
    user = Fu[ids[0]]
    item = Fi[ids[1]] - (Fi[ids[2]] if loss != "logistic" else 0)      # pos minus neg
    u, d = user @ UE, item @ IE
    score = u @ d + item @ ib + (user @ ub if loss == "logistic" else 0)
    if loss == "bpr":
        slope = -1 / (1 + np.exp(score))                      # d(-log sigmoid(m))/dm
    elif loss == "warp":
        assert extra > 0 and score < 1                        # a violating negative was found
        slope = -extra                                        # d(w * (1 - m))/dm
    else:
        slope = 1 / (1 + np.exp(-score)) - 1                  # d bce(s, 1)/ds
    lr = 0.3
    np.testing.assert_allclose(after["user_embeddings"], UE - lr * slope * np.outer(user, d), rtol=0, atol=1e-12)
    np.testing.assert_allclose(after["item_embeddings"], IE - lr * slope * np.outer(item, u), rtol=0, atol=1e-12)
    np.testing.assert_allclose(after["item_bias"], ib - lr * slope * item, rtol=0, atol=1e-12)
    expected_ub = ub - lr * slope * user if loss == "logistic" else ub
    np.testing.assert_allclose(after["user_bias"], expected_ub, rtol=0, atol=1e-12)
    assert not np.array_equal(after["item_embeddings"], IE)


@pytest.mark.parametrize("kos", [False, True])
def test_identity_features_train_as_the_ids_graph(kos):
    """WARP over identity feature bags draws the same triples and takes the same steps as
    fa.ranking_loss over the tables themselves (BPR(loss='warp')'s graph), to rounding."""
    likes = _likes(1)
    rng = np.random.default_rng(0)
    U0, V0, b0 = rng.normal(0, 0.3, (N_USERS, 6)), rng.normal(0, 0.3, (N_ITEMS, 6)), rng.normal(0, 0.1, N_ITEMS)
    kos_k = 2 if kos else None

    U, V, b = (fa.Parameter(x.copy(), dtype=np.float64) for x in (U0, V0, b0))
    u, i, j = (fa.IndexInput([0]) for _ in range(3))
    w = fa.Input([1.0], dtype=np.float64)
    plain = fa.ranking_loss(U, u, V, i, j, item_bias=b, reduction="sum", loss="hinge", weights=w)
    sampler = fa.data.WarpSampler(likes, u, i, j, w, U, V, b, seed=4, kos_k=kos_k, kos_n=4)
    fa.train(plain, fa.optim.SGD([U, V, b], lr=0.1), sampler, epochs=2)

    model = fa.models.LightFM(no_components=6, loss="warp-kos" if kos else "warp", k=2, n=4, dtype=np.float64)
    model.fit(likes, epochs=0)                        # identity features
    for name, value in (("user_embeddings", U0), ("item_embeddings", V0), ("item_bias", b0)):
        model._parameters[name].value[:] = value
    loss, bags = model.example_graph()
    inner = fa.data.WarpSampler(likes, *bags.ids, bags.extra, model.user_embeddings, model.item_embeddings,
                                model.item_bias, seed=4, kos_k=kos_k, kos_n=4,
                                user_features=model.user_features, item_features=model.item_features)
    bagged = fa.data.FeatureSampler(inner, model.user_features, model.item_features,
                                    bags.user + (bags.user_weights,), bags.item + (bags.item_weights,), *bags.ids)
    fa.train(loss, fa.optim.SGD(list(model.parameters()), lr=0.1), bagged, epochs=2)
    assert inner.skipped == sampler.skipped
    np.testing.assert_allclose(model.user_embeddings.value, U.value, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.item_embeddings.value, V.value, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.item_bias.value, b.value, rtol=0, atol=1e-12)
    assert not np.allclose(V.value, V0)


def test_warp_sampler_scores_through_the_feature_bags():
    """With item features, WARP's violating negative is judged by the item's representation:
    a table whose features make one item outscore the positive by far is drawn first."""
    likes = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, 3))
    item_features = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    U = fa.Parameter(np.array([[1.0]]), dtype=np.float64)
    V = fa.Parameter(np.array([[0.0], [5.0]]), dtype=np.float64)     # items 1 and 2 score 5, item 0 scores 0
    u, i, j = (fa.IndexInput([0]) for _ in range(3))
    w = fa.Input([0.0], dtype=np.float64)
    sampler = fa.data.WarpSampler(likes, u, i, j, w, U, V, seed=0, max_sampled=50, item_features=item_features)
    users, pos, neg, weight = next(sampler.epoch())
    assert pos[0] == 0 and neg[0] in (1, 2)         # item 0 scores 0, items 1 and 2 score 5


def test_feature_sampler_writes_the_bags():
    likes = _likes()
    uf, itf = _features(N_USERS, 3, 1), _features(N_ITEMS, 4, 2)
    model = _fitted_tables("bpr", likes, uf, itf)
    assert len(model.epoch_sampler(model.example_graph(batch=2)[1], fa.data.Interactions(likes), 1, 9).leaves) == 6
    model.sample_weighted = True            # as a fit with sample_weight makes it: a weights leaf more
    _, bags = model.example_graph(batch=2)
    weighed = likes.copy()
    weighed.data = np.arange(1.0, 1 + likes.nnz)
    sampler = model.epoch_sampler(bags, fa.data.Interactions(weighed), 1, 9)
    users_ids, users_offsets, users_w, items_ids, items_offsets, items_w, weights = next(sampler.epoch())
    users, pos, neg = (leaf.value for leaf in bags.ids)
    np.testing.assert_array_equal(weights, [weighed[users[b], pos[b]] for b in range(2)])   # each like's weight
    for b in range(2):
        lo, hi = users_offsets[b], users_offsets[b + 1]
        row = uf[users[b]]
        np.testing.assert_array_equal(users_ids[lo:hi], row.indices)
        np.testing.assert_allclose(users_w[lo:hi], row.data)
        lo, hi = items_offsets[b], items_offsets[b + 1]
        np.testing.assert_array_equal(items_ids[lo:hi], np.concatenate([itf[pos[b]].indices, itf[neg[b]].indices]))
        np.testing.assert_allclose(items_w[lo:hi], np.concatenate([itf[pos[b]].data, -itf[neg[b]].data]))


def _tagged(seed=0, n_users=200, n_items=120, n_tags=6):
    """Users who each like the items of one tag; items described by their tag alone."""
    rng = np.random.default_rng(seed)
    item_tag = rng.integers(n_tags, size=n_items)
    user_tag = rng.integers(n_tags, size=n_users)
    likes = sp.csr_matrix((user_tag[:, None] == item_tag[None, :]) & (rng.random((n_users, n_items)) < 0.5),
                          dtype=np.float64)
    features = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), item_tag)), shape=(n_items, n_tags))
    return likes, features, user_tag, item_tag


@pytest.mark.parametrize("loss", ["warp", "bpr"])
def test_cold_start_items_rank_by_their_features(loss):
    likes, features, user_tag, item_tag = _tagged()
    seen = np.arange(100)                      # items 100.. are new: no interaction, not in the fit
    model = fa.models.LightFM(no_components=8, loss=loss, learning_rate=0.1, random_state=0)
    model.fit(likes[:, seen], item_features=features[seen], epochs=15, num_threads=2)
    new = features[100:]
    ids, scores = model.recommend(np.arange(200), k=3, item_features=new)
    hits = item_tag[100:][ids] == user_tag[:, None]
    assert hits.mean() > 0.9
    # the same scores as predict and the representations give
    predicted = model.predict(np.full(20, 7), np.arange(20), item_features=new)
    biases, embeddings = model.get_item_representations(new)
    np.testing.assert_allclose(biases, new @ model.item_bias.value, rtol=1e-6)
    user_bias, user_rows = model.get_user_representations()
    np.testing.assert_allclose(predicted, embeddings @ user_rows[7] + biases + user_bias[7], rtol=1e-5, atol=1e-6)
    top = np.argsort(-(embeddings @ user_rows[7] + biases), kind="stable")[:3]
    assert set(ids[7]) == set(top)
    same = int((item_tag[100:] == item_tag[100]).sum())      # items of one tag have one representation
    similar, _ = model.similar_items(0, N=same, item_features=new)
    assert (item_tag[100:][similar] == item_tag[100]).all()


def test_cold_start_users_by_their_features():
    likes, item_features, user_tag, item_tag = _tagged(1)
    user_features = sp.csr_matrix((np.ones(200), (np.arange(200), user_tag)), shape=(200, 6))
    model = fa.models.LightFM(no_components=8, loss="warp", learning_rate=0.1, random_state=0)
    model.fit(likes, user_features=user_features, item_features=item_features, epochs=10)
    newcomer = sp.csr_matrix(([1.0], ([0], [3])), shape=(1, 6))       # a new user of tag 3
    ids, _ = model.recommend(0, k=5, user_features=newcomer)
    assert (item_tag[ids] == 3).all()


@pytest.mark.parametrize("rank_estimate", ["sampled", "online"])
def test_warp_learns_and_ranks_held_out_items(rank_estimate):
    likes = fa.data.planted_interactions(300, 150, per_user=15, seed=0)
    train, test = fa.data.train_test_split(likes, 0.2, seed=0)
    model = fa.models.LightFM(no_components=16, loss="warp", random_state=0, rank_estimate=rank_estimate)
    model.fit(train, epochs=20)
    ranks = model.predict_rank(test, train)
    assert ranks.shape == test.shape and ranks.nnz == test.nnz
    assert ranks.data.mean() < 0.25 * 150
    untrained = fa.models.LightFM(no_components=16, loss="warp", random_state=0).fit(train, epochs=0)
    assert untrained.predict_rank(test, train).data.mean() > 0.4 * 150
    with pytest.raises(ValueError, match="check_intersections"):
        model.predict_rank(train, train)


def test_predict_rank_counts_higher_scores():
    likes = _likes()
    model = fa.models.LightFM(no_components=4, loss="bpr", random_state=0).fit(likes, epochs=2)
    test = sp.csr_matrix(([1.0, 1.0], ([2, 5], [3, 9])), shape=likes.shape)
    ranks = model.predict_rank(test).toarray()
    for user, item in ((2, 3), (5, 9)):
        scores = model.predict(user, np.arange(N_ITEMS))
        assert ranks[user, item] == (scores > scores[item]).sum()


def test_the_online_rank_estimate_reaches_the_sampler_and_the_checkpoint(tmp_path):
    """The same seed trains other factors with rank_estimate="online" (one candidate a
    positive), and save/load keeps the setting."""
    likes = _likes()
    trained = {}
    for estimate in ("sampled", "online"):
        model = fa.models.LightFM(no_components=4, loss="warp", random_state=0, rank_estimate=estimate)
        trained[estimate] = model.fit(likes, epochs=1).item_embeddings.value.copy()
    assert not np.allclose(trained["sampled"], trained["online"])
    model.save(tmp_path / "online.npz")
    assert fa.models.LightFM.load(tmp_path / "online.npz").rank_estimate == "online"


def test_sample_weight_weighs_each_interactions_warp_triples(monkeypatch):
    """Without sample_weight the interactions' stored values are ignored (as LightFM's are):
    values of 5 train what ones do, and the sampler does not read them. sample_weight trains
    otherwise, and weights of 1 as none."""
    likes = _likes()
    fives = likes * 5.0
    weights = likes.tocoo()
    weights.data = np.random.default_rng(0).uniform(0.5, 3.0, weights.nnz)
    made = []
    real = fa.models.recsys.lightfm.WarpSampler
    monkeypatch.setattr(fa.models.recsys.lightfm, "WarpSampler", lambda *args, **kw: made.append(real(*args, **kw))
                        or made[-1])

    def trained(interactions, sample_weight=None):
        model = fa.models.LightFM(no_components=4, loss="warp", random_state=0)
        values = model.fit(interactions, sample_weight=sample_weight, epochs=2).item_embeddings.value.copy()
        assert made[-1].weighted == (sample_weight is not None)
        return values

    plain = trained(likes)
    np.testing.assert_array_equal(trained(fives), plain)
    np.testing.assert_array_equal(trained(likes, likes.tocoo()), plain)
    assert not np.allclose(trained(likes, weights), plain)


def test_save_and_load(tmp_path):
    likes = _likes()
    itf = _features(N_ITEMS, 4, 2)
    model = fa.models.LightFM(no_components=6, loss="warp", random_state=3).fit(likes, item_features=itf, epochs=2)
    path = tmp_path / "lightfm.npz"
    model.save(path)
    loaded = fa.models.LightFM.load(path)
    assert loaded.settings() == model.settings()
    users, items = np.arange(N_USERS).repeat(2), np.tile([0, 7], N_USERS)
    np.testing.assert_array_equal(loaded.predict(users, items), model.predict(users, items))
    np.testing.assert_array_equal(loaded.item_features.matrix.toarray(), model.item_features.matrix.toarray())
    loaded.fit_partial(likes, item_features=itf, epochs=1)      # goes on training
    with pytest.raises(ValueError, match="no factors yet"):
        fa.models.LightFM().save(tmp_path / "empty.npz")


def test_fit_partial_goes_on_and_fit_starts_again():
    likes = _likes()
    model = fa.models.LightFM(no_components=4, loss="bpr", random_state=0).fit(likes, epochs=1)
    first = model.item_embeddings.value.copy()
    model.fit_partial(likes, epochs=1)
    assert not np.array_equal(model.item_embeddings.value, first)
    model.fit(likes, epochs=0)
    assert model.item_embeddings.value.shape == first.shape
    assert not np.array_equal(model.item_embeddings.value, first)      # drawn anew


@pytest.mark.parametrize("schedule", ["adagrad", "adadelta"])
def test_schedules_train(schedule):
    likes = _likes()
    model = fa.models.LightFM(no_components=4, loss="logistic", learning_schedule=schedule, random_state=0)
    model.fit(likes, epochs=3, num_threads=2)
    assert np.isfinite(model.history).all() and model.history[-1] < model.history[0]


def test_bad_input_names_the_argument_and_trains_nothing():
    likes = _likes()
    model = fa.models.LightFM(no_components=4, loss="warp", random_state=0).fit(likes, epochs=1)
    kept = model.item_embeddings.value.copy()
    with pytest.raises(ValueError, match=r"user_features has shape \(59, 60\), expected 60 rows"):
        model.fit_partial(likes, user_features=sp.identity(60, format="csr")[:59])
    with pytest.raises(ValueError, match="item_features has 41 features"):
        model.fit_partial(likes, item_features=sp.hstack([sp.identity(40), sp.identity(40, format="csr")[:, :1]]).tocsr())
    negative = sp.identity(40, format="csr") * -1.0
    with pytest.raises(ValueError, match="item_features must hold finite weights >= 0; it holds -1.0"):
        model.fit_partial(likes, item_features=negative)
    nan = sp.identity(40, format="csr")
    nan.data[3] = np.nan
    with pytest.raises(ValueError, match="item_features must hold finite weights >= 0; it holds nan at row 3"):
        model.fit_partial(likes, item_features=nan)
    with pytest.raises(TypeError, match="item_features must be a scipy sparse"):
        model.fit_partial(likes, item_features=np.eye(40))
    np.testing.assert_array_equal(model.item_embeddings.value, kept)
    with pytest.raises(ValueError, match="max_sampled"):
        fa.models.LightFM(max_sampled=0)
    with pytest.raises(ValueError, match="loss"):
        fa.models.LightFM(loss="hinge")
    with pytest.raises(ValueError, match="LightFM: rank_estimate must be one of"):
        fa.models.LightFM(loss="warp", rank_estimate="exact")
    with pytest.raises(ValueError, match="item_alpha .* and user_alpha .* differ"):
        fa.models.LightFM(item_alpha=0.1, user_alpha=0.2)
    ones = likes.tocoo()
    with pytest.raises(TypeError, match="LightFM.fit: sample_weight must be a scipy sparse matrix"):
        model.fit_partial(likes, sample_weight=likes.toarray())
    with pytest.raises(ValueError, match=r"sample_weight has shape \(60, 39\), expected the interactions' \(60, 40\)"):
        model.fit_partial(likes, sample_weight=likes[:, :39])
    with pytest.raises(ValueError, match="sample_weight must store one weight at each interaction and none elsewhere"):
        model.fit_partial(likes, sample_weight=likes + sp.identity(60, format="csr")[:, :40] * 3)
    for bad in (0.0, -1.0, np.nan):
        weights = ones.copy()
        weights.data[2] = bad
        with pytest.raises(ValueError, match="LightFM.fit: sample_weight must hold finite weights > 0"):
            model.fit_partial(likes, sample_weight=weights)
    with pytest.raises(NotImplementedError, match="sample_weight is not supported with loss='warp-kos'"):
        fa.models.LightFM(loss="warp-kos").fit(likes, sample_weight=ones)
    signed = likes.copy()
    signed.data[4] = -1.0
    for loss in ("bpr", "warp"):
        with pytest.raises(ValueError, match=f"interactions hold negative values .*: loss='logistic' trains on "
                                             f"them as negatives; loss='{loss}' reads positives only"):
            fa.models.LightFM(loss=loss).fit(signed)
    with pytest.raises(ValueError, match="LightFM.fit: interactions must hold finite values; it holds nan"):
        fa.models.LightFM(loss="logistic").fit(signed * np.nan)
    with pytest.raises(IndexError, match="item_ids"):
        model.predict(0, [0, 40])
    with pytest.raises(ValueError, match="item_features has 3 features"):
        model.predict(0, [0], item_features=sp.identity(3, format="csr"))
    with pytest.raises(ValueError, match="test_interactions has shape"):
        model.predict_rank(sp.identity(5, format="csr"))


def test_feature_sampler_checks_its_leaves():
    likes = _likes()
    u, i, j = (fa.IndexInput([0]) for _ in range(3))
    inner = fa.data.PairwiseSampler(likes, u, i, j, seed=0)
    ids, offsets, w = fa.IndexInput(np.zeros(1, np.int64)), fa.IndexInput([0, 0]), fa.Input(np.zeros(1))
    identity_u, identity_i = sp.identity(N_USERS, format="csr"), sp.identity(N_ITEMS, format="csr")
    with pytest.raises(ValueError, match=r"item_bags\[0\] \(ids\) holds 1 ids, fewer than the 2"):
        fa.data.FeatureSampler(inner, identity_u, identity_i, (ids, offsets, w), (ids, offsets, w), u, i, j)
    with pytest.raises(ValueError, match="user_features has shape"):
        fa.data.FeatureSampler(inner, identity_i, identity_i, (ids, offsets, w), (ids, offsets, w), u, i, j)
    with pytest.raises(ValueError, match="neg must be one of the sampler's leaves"):
        fa.data.FeatureSampler(inner, identity_u, identity_i, (ids, offsets, w), (ids, offsets, w), u, i,
                               fa.IndexInput([0]))


def test_alpha_decays_the_rows_an_example_touches():
    likes = _likes()
    norms = {}
    for alpha in (0.0, 0.05):
        model = fa.models.LightFM(no_components=4, loss="bpr", item_alpha=alpha, user_alpha=alpha, random_state=0)
        model.fit(likes, epochs=3)
        norms[alpha] = np.linalg.norm(model.item_embeddings.value)
    assert norms[0.05] < 0.9 * norms[0.0]


def test_recommend_without_features_filters_the_fit_likes_and_verbose_prints(capsys):
    likes = _likes()
    model = fa.models.LightFM(no_components=4, loss="warp", random_state=0).fit(likes, epochs=2, verbose=True)
    assert "Epoch 2: loss" in capsys.readouterr().out
    ids, _ = model.recommend(3, k=5)
    assert not set(ids) & set(likes[3].indices)
    np.testing.assert_allclose(model.scores([3])[0], model.predict(3, np.arange(N_ITEMS)) -
                               model.get_user_representations()[0][3], rtol=1e-5, atol=1e-6)


def test_hogwild_processes_train_the_feature_model():
    likes, features, user_tag, item_tag = _tagged(2)
    model = fa.models.LightFM(no_components=8, loss="warp", learning_rate=0.1, random_state=0)
    model.fit(likes, item_features=features, epochs=8, num_threads=2, start_method="fork")
    ids, _ = model.recommend(np.arange(200), k=3, filter_liked=False)
    assert (item_tag[ids] == user_tag[:, None]).mean() > 0.9


def test_feature_ids_past_a_table_are_an_index_error_before_training():
    likes = _likes()
    model = _fitted_tables("bpr", likes, None, None)
    loss, bags = model.example_graph()
    columns = np.append(np.arange(N_ITEMS - 1), N_ITEMS)          # the last item's feature is past the table
    wide = sp.csr_matrix((np.ones(N_ITEMS), (np.arange(N_ITEMS), columns)), shape=(N_ITEMS, N_ITEMS + 1))
    inner = fa.data.PairwiseSampler(likes, *bags.ids, seed=0)
    sampler = fa.data.FeatureSampler(inner, model.user_features, wide, bags.user + (bags.user_weights,),
                                     bags.item + (bags.item_weights,), *bags.ids)
    kept = model.item_embeddings.value.copy()
    with pytest.raises(IndexError, match="the sampler writes ids up to 40"):
        fa.train(loss, fa.optim.SGD(list(model.parameters()), lr=0.1), sampler)
    np.testing.assert_array_equal(model.item_embeddings.value, kept)


def test_feature_bags_pickle_and_check_their_matrix():
    import pickle
    features = _features(N_ITEMS, 3, 0)
    bags = fa.data.FeatureBags(features, N_ITEMS)
    back = pickle.loads(pickle.dumps(bags))
    assert (back.n_rows, back.n_features, back.longest) == (bags.n_rows, bags.n_features, bags.longest)
    np.testing.assert_array_equal(back.matrix.toarray(), features.toarray())
    with pytest.raises(ValueError, match="features has shape"):
        fa.data.FeatureBags(features, N_ITEMS + 1)


def test_feature_bags_know_the_identity():
    """The identity (LightFM's features when none are given) is known as such, whose bags
    WarpSampler scores as ids; a permutation, other weights or another shape are not it."""
    assert fa.data.FeatureBags(sp.identity(5, format="csr"), 5).identity
    for other in (sp.identity(5, format="csr")[[1, 0, 2, 3, 4]], sp.identity(5, format="csr") * 2.0,
                  sp.hstack([sp.identity(5), sp.csr_matrix((5, 1))]).tocsr(), _features(5, 2, 0)):
        assert not fa.data.FeatureBags(other, 5).identity
