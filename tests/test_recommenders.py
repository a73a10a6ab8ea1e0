"""fa.models.BPR and TwoTower: fit on a user x item matrix, ranking API, and refusal of bad input."""
import os

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa

USERS, ITEMS = 600, 300
LIKES = sp.csr_matrix(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))


@pytest.fixture(scope="module")
def split():
    likes = fa.data.planted_interactions(USERS, ITEMS, per_user=20, rank=4, noise=0.3, seed=0)
    return fa.data.train_test_split(likes, 0.25, seed=0)


@pytest.fixture(scope="module")
def fitted(split):
    train, _ = split
    model = fa.models.BPR(USERS, ITEMS, dim=16, seed=1, biases=True)
    model.fit(train, epochs=8, lr=0.05, seed=0)
    return model


def weights(model):
    return {name: value.copy() for name, value in model.state_dict().items()}


def test_fit_learns_the_planted_taste(split):
    train, test = split
    model = fa.models.BPR(USERS, ITEMS, dim=16, seed=1)
    before = fa.metrics.evaluate(model, test, train)
    seen = []
    fitted = model.fit(train, epochs=8, lr=0.05, seed=0, callback=lambda epoch, loss: seen.append(
        (epoch, loss, fa.metrics.evaluate(model, test, train)["auc"])))
    assert fitted is model                          # fit returns the model, as implicit's does
    losses = model.history
    after = fa.metrics.evaluate(model, test, train)
    assert [e for e, _, _ in seen] == list(range(1, 9)) and [l for _, l, _ in seen] == losses
    assert losses[-1] < losses[0] and seen[-1][2] > seen[0][2]
    chance = 5 / (ITEMS - 15)                       # 5 held out among the items not trained on
    assert after["auc"] > 0.8 and before["auc"] < 0.6
    assert after["precision@10"] > 5 * chance


def test_fit_is_seeded_and_reports_progress(split):
    train, _ = split
    runs, done = [], []
    for _ in range(2):
        model = fa.models.BPR(USERS, ITEMS, dim=8, seed=1)
        done.clear()
        model.fit(train, epochs=2, samples=25_000, seed=3, progress=lambda n, rate: done.append(n))
        runs.append(model.U.numpy())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert done == [10_000, 20_000, 25_000, 35_000, 45_000, 50_000]


@pytest.mark.parametrize("workers", [1, 2])
def test_batched_fit_ranks_as_well_as_the_per_example_fit(split, workers):
    # 16 triples a step (one replay, their gradients applied together), in this process
    # and in two Hogwild threads: the same ranking quality and per-triple loss.
    train, test = split
    one = fa.models.BPR(USERS, ITEMS, dim=16, seed=1, biases=True)
    one_losses = one.fit(train, epochs=8, lr=0.05, seed=0).history
    batched = fa.models.BPR(USERS, ITEMS, dim=16, seed=1, biases=True)
    done = []
    losses = batched.fit(train, epochs=8, lr=0.05, seed=0, batch_size=16, workers=workers,
                         start_method="threads", progress=lambda n, rate: done.append(n)).history
    auc = fa.metrics.evaluate(batched, test, train)["auc"]
    assert auc > fa.metrics.evaluate(one, test, train)["auc"] - 0.01 and auc > 0.7
    assert abs(losses[-1] - one_losses[-1]) < 0.05 * one_losses[0]     # a loss per triple
    steps = -(-train.nnz // workers // 16)         # each worker's share, in whole batches
    assert done[-1] == 8 * workers * steps * 16
    if workers == 1:
        again = fa.models.BPR(USERS, ITEMS, dim=16, seed=1, biases=True)
        again.fit(train, epochs=8, lr=0.05, seed=0, batch_size=16)
        np.testing.assert_array_equal(again.U.numpy(), batched.U.numpy())


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_a_threaded_fit_trains_the_models_own_arrays_with_no_shared_memory_segment(split, optimizer):
    train, _ = split
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=1, biases=True)
    arrays = {name: p.value for name, p in model.named_parameters()}
    before = {name: array.copy() for name, array in arrays.items()}
    seen = []

    def during(epoch, loss):             # the model holds each epoch's weights: its own arrays
        seen.append([name for name in os.listdir("/dev/shm") if name.startswith(f"fastad_{os.getpid()}_")])
        assert all(p.value is arrays[name] for name, p in model.named_parameters())

    model.fit(train, epochs=2, workers=2, start_method="threads", seed=0, optimizer=optimizer,
              callback=during)
    assert seen == [[], []]
    assert all(not np.array_equal(arrays[name], before[name]) for name in arrays)


def test_two_tower_trains_in_batches_from_its_feeds(split):
    # TwoTower replays feeds (no compiled sampler): a batch reshapes them into rows of 16.
    users, items, (train, test) = planted_features()
    tower = fa.models.TwoTower(users, items, dim=8, seed=0)
    losses = tower.fit(train, epochs=10, lr=0.05, seed=0, batch_size=16).history
    assert losses[-1] < losses[0] and fa.metrics.evaluate(tower, test, train)["auc"] > 0.75


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("adagrad", 0.1), ("adam", 0.01)])
def test_two_hogwild_workers_learn_with_each_optimizer(split, optimizer, lr):
    train, test = split
    model = fa.models.BPR(USERS, ITEMS, dim=16, seed=1, biases=True)
    done = []
    losses = model.fit(train, epochs=6, workers=2, lr=lr, optimizer=optimizer, seed=0,
                       progress=lambda n, rate: done.append(n)).history
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert fa.metrics.evaluate(model, test, train)["auc"] > 0.75
    assert done[-1] == 6 * train.nnz
    assert np.abs(model.item_bias.numpy()).max() > 0


def test_item_biases_add_to_every_score(fitted):
    assert set(fitted.state_dict()) == {"U", "V", "item_bias"}
    U, V, b = fitted.U.numpy(), fitted.V.numpy(), fitted.item_bias.numpy()
    assert np.abs(b).max() > 0
    np.testing.assert_allclose(fitted.scores([3, 5]), U[[3, 5]] @ V.T + b[:, 0], rtol=1e-6)
    assert not fa.models.BPR(3, 4).biases and fitted.biases


def test_recommend_is_the_top_k_of_the_unliked_items(fitted, split):
    train, _ = split
    users = np.arange(0, USERS, 7)
    ids, scores = fitted.recommend(users, k=10, batch_size=16)
    assert ids.shape == scores.shape == (len(users), 10)
    full = fitted.scores(users)
    liked = train[users].toarray() > 0
    for row, user in enumerate(users):
        allowed = np.flatnonzero(~liked[row])
        expected = allowed[np.argsort(-full[row, allowed], kind="stable")[:10]]
        np.testing.assert_array_equal(ids[row], expected)
        np.testing.assert_allclose(scores[row], full[row, expected], rtol=1e-6)
    one_ids, one_scores = fitted.recommend(int(users[1]), k=10)
    np.testing.assert_array_equal(one_ids, ids[1])
    assert np.diff(one_scores).max() <= 0


def test_recommend_with_liked_items_and_a_candidate_list(fitted, split):
    train, _ = split
    everything, _ = fitted.recommend(0, k=ITEMS, filter_liked=False)
    assert sorted(everything.tolist()) == list(range(ITEMS))
    candidates = np.array([5, 9, 11, 200, 201])
    liked = sp.csr_matrix((np.ones(2), ([0, 0], [9, 200])), shape=(USERS, ITEMS))
    ids, scores = fitted.recommend(0, k=4, items=candidates, liked=liked)
    kept = np.array([5, 11, 201])
    expected = kept[np.argsort(-fitted.scores(0)[kept], kind="stable")]
    np.testing.assert_array_equal(ids, np.append(expected, -1))      # 3 candidates for 4 slots
    assert np.isneginf(scores[-1])
    assert fitted.recommend(0, k=50, items=candidates, filter_liked=False)[0].shape == (5,)


def test_similar_items_and_users_by_cosine(fitted):
    V = fitted.V.numpy()
    unit = V / np.linalg.norm(V, axis=1, keepdims=True)
    ids, sims = fitted.similar_items(7, k=5)
    cosine = unit @ unit[7]
    cosine[7] = -np.inf
    np.testing.assert_array_equal(ids, np.argsort(-cosine, kind="stable")[:5])
    np.testing.assert_allclose(sims, cosine[ids], rtol=1e-5)
    both, _ = fitted.similar_items([7, 8], k=5)
    np.testing.assert_array_equal(both[0], ids)
    U = fitted.U.numpy()
    user_ids, user_sims = fitted.similar_users([2], k=3)
    assert 2 not in user_ids[0] and user_ids.shape == (1, 3)
    expected = U[user_ids[0]] @ U[2] / np.linalg.norm(U[user_ids[0]], axis=1) / np.linalg.norm(U[2])
    np.testing.assert_allclose(user_sims[0], expected, rtol=1e-5)
    assert fa.models.BPR(3, 1).similar_items(0, k=3)[0].shape == (0,)


def test_ranking_refuses_bad_ids_and_k(fitted):
    with pytest.raises(IndexError, match=f"recommend: user_ids holds {USERS} at position 1, "
                                         f"outside the {USERS} users of the model"):
        fitted.recommend([0, USERS])
    with pytest.raises(IndexError, match="recommend: items holds -1 at position 0"):
        fitted.recommend(0, items=[-1, 3])
    with pytest.raises(ValueError, match="recommend: k must be >= 1, got 0"):
        fitted.recommend(0, k=0)
    with pytest.raises(ValueError, match="user_ids must be one id or a 1-D sequence"):
        fitted.recommend([[0, 1]])
    with pytest.raises(TypeError, match="recommend: user_ids must be integer ids, got dtype float64"):
        fitted.recommend([0.5])
    with pytest.raises(IndexError, match=f"similar_items: item_ids holds {ITEMS} at position 0"):
        fitted.similar_items([ITEMS])
    with pytest.raises(ValueError, match="similar_users: k must be >= 1, got -2"):
        fitted.similar_users(0, k=-2)
    with pytest.raises(IndexError, match="scores: user_ids holds -3"):
        fitted.scores([-3])
    with pytest.raises(ValueError, match="filter_liked=True needs the items each user liked"):
        fa.models.BPR(4, 5).recommend(0)
    with pytest.raises(ValueError, match=rf"liked has shape \(2, 3\), expected \({USERS}, {ITEMS}\)"):
        fitted.recommend(0, liked=LIKES)
    with pytest.raises(ValueError, match=r"items must be a non-empty 1-D sequence .* shape \(1, 2\)"):
        fitted.recommend(0, items=[[1, 2]])


@pytest.fixture(scope="module")
def small_fitted():
    model = fa.models.BPR(2, 3, dim=2, seed=0)
    model.fit(LIKES, epochs=1)
    return model


@pytest.mark.parametrize("method,name,what,count", [
    ("recommend", "user_ids", "users", 2),
    ("similar_items", "item_ids", "items", 3),
    ("similar_users", "user_ids", "users", 2),
])
@pytest.mark.parametrize("bad", ["negative", "too large"])
@pytest.mark.parametrize("form", ["scalar", "list"])
def test_out_of_range_ids_are_named_in_scalar_and_list_form(small_fitted, method, name, what, count,
                                                            bad, form):
    # a scalar id once failed inside the message builder with "tuple index out of range"
    wrong = -1 if bad == "negative" else count
    ids, found = (wrong, f"is {wrong}") if form == "scalar" else ([0, wrong], f"holds {wrong} at position 1")
    with pytest.raises(IndexError, match=rf"BPR.{method}: {name} {found}, outside the {count} "
                                         rf"{what} of the model \(ids 0..{count - 1}\)"):
        getattr(small_fitted, method)(ids)


@pytest.mark.parametrize("interactions,kwargs,error,message", [
    (sp.csr_matrix(np.array([[1.0, 0.0, -2.0], [0.0, 1.0, 0.0]])), {}, ValueError,
     "BPR.fit: interactions must hold non-negative finite values; it holds -2.0 at user 0, item 2"),
    (sp.csr_matrix(np.array([[1.0, 0.0, np.inf], [0.0, 1.0, 0.0]])), {}, ValueError, "holds inf"),
    (sp.csr_matrix((2, 3)), {}, ValueError, r"interactions is empty: shape \(2, 3\)"),
    (sp.csr_matrix(np.ones((2, 4))), {}, ValueError,
     r"interactions has shape \(2, 4\), expected \(2, 3\) \(users x items of the model\)"),
    (LIKES.toarray(), {}, TypeError, "interactions must be a scipy sparse"),
    (sp.csr_matrix(np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])), {}, ValueError,
     r"users who liked every item, so no negative item exists for them: users \[0\]"),
    (LIKES, {"epochs": 0}, ValueError, "epochs must be >= 1, got 0"),
    (LIKES, {"workers": 0}, ValueError, "workers must be >= 1, got 0"),
    (LIKES, {"samples": 2.5}, TypeError, "samples must be an int"),
    (LIKES, {"lr": -0.1}, ValueError, "lr must be a finite number > 0"),
    (LIKES, {"optimizer": "lbfgs"}, ValueError, r"optimizer must be one of \['adadelta', 'adagrad', 'adam', 'ftrl', 'sgd'\]"),
    (LIKES, {"callback": 3}, TypeError, r"callback must be callable or None, got 3 \(int\)"),
    (LIKES, {"samples": 2, "workers": 3}, ValueError, r"samples \(2\) must be >= workers \(3\)"),
    (LIKES, {"seed": -1}, ValueError, "seed must be >= 0, got -1"),
    (LIKES, {"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
    (LIKES, {"negatives": "popular"}, ValueError,
     r"negatives must be one of \('uniform', 'popularity'\), got 'popular'"),
    # item 2 has no interaction, so popularity never draws it: user 0 has no negative
    (sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])), {"negatives": "popularity"}, ValueError,
     r"users who liked every item that has an interaction \(negatives='popularity' draws only those\), "
     r"so no negative item exists for them: users \[0\]"),
])
def test_fit_refuses_bad_input_before_training(interactions, kwargs, error, message):
    model = fa.models.BPR(2, 3, dim=4, biases=True)
    before = weights(model)
    with pytest.raises(error, match=message):
        model.fit(interactions, **kwargs)
    after = weights(model)
    assert all(np.array_equal(before[name], after[name]) for name in before)
    assert model.liked is None


@pytest.mark.parametrize("model_class", ["BPR", "TwoTower"])
@pytest.mark.parametrize("workers,start_method", [(1, None), (2, "threads"), (2, "fork")])
def test_popularity_negatives_draw_only_items_with_interactions(model_class, workers, start_method):
    # items 40..59 have no interaction: drawn as negatives (so their rows move) only when
    # negatives are uniform over the items
    rng = np.random.default_rng(0)
    likes = sp.csr_matrix((np.ones(400), (rng.integers(0, 50, 400), rng.integers(0, 40, 400))),
                          shape=(50, 60))
    likes.data[:] = 1.0
    moved = {}
    for negatives in ("uniform", "popularity"):
        model = (fa.models.BPR(50, 60, dim=4, seed=0) if model_class == "BPR" else
                 fa.models.TwoTower({"id": np.arange(50)}, {"id": np.arange(60)}, dim=4, seed=0))
        items = model.V if model_class == "BPR" else model.item_id
        before = items.numpy().copy()
        model.fit(likes, epochs=2, workers=workers, start_method=start_method, seed=0, negatives=negatives)
        moved[negatives] = np.any(items.numpy() != before, axis=1)
    assert moved["uniform"][40:].all() and moved["uniform"][:40].all()
    assert not moved["popularity"][40:].any() and moved["popularity"][:40].all()


def test_popularity_negatives_follow_the_interaction_counts():
    counts = np.array([1, 2, 4, 8, 16, 32, 64, 128])        # item k is liked by counts[k] users
    dense = np.zeros((192, 20))
    for item, count in enumerate(counts):
        start = 0 if item == 7 else 128                     # no user likes all eight
        dense[start:start + count, item] = 1.0
    likes = sp.csr_matrix(dense)
    drawn = fa.data.sample_triples(likes, n=200_000, seed=0, negatives="popularity")
    # P(negative k | user u) = counts[k] / (the counts of the items u did not like), u by its likes
    degree = dense.sum(axis=1)
    expected = np.zeros(20)
    for user in range(192):
        weights = counts * (dense[user, :8] == 0)
        expected[:8] += degree[user] / degree.sum() * weights / weights.sum()
    observed = np.bincount(drawn["neg"], minlength=20) / drawn["neg"].size
    np.testing.assert_allclose(observed, expected, atol=0.005)
    assert np.all(dense[drawn["users"], drawn["neg"]] == 0)
    uniform = fa.data.sample_triples(likes, n=20_000, seed=0)["neg"]
    assert np.any(uniform >= 8)
    with pytest.raises(ValueError, match="sample_triples: negatives must be one of"):
        fa.data.sample_triples(likes, negatives="zipf")


def test_an_error_after_an_epoch_leaves_that_epoch_trained():
    model = fa.models.BPR(2, 3, dim=4)
    model.fit(LIKES, epochs=1)
    trained = weights(model)

    def stop(epoch, loss):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        model.fit(LIKES, epochs=3, workers=2, callback=stop)
    assert not np.array_equal(model.U.numpy(), trained["U"])     # epoch 1 of the second fit landed


def planted_features(seed=1):
    rng = np.random.default_rng(0)
    groups, genres = rng.integers(0, 8, USERS), rng.integers(0, 8, ITEMS)
    likes = fa.data.planted_interactions(USERS, ITEMS, per_user=8, rank=4, noise=0.3, seed=seed,
                                         user_groups=groups, item_groups=genres)
    users = {"id": np.arange(USERS), "group": groups}
    items = {"id": np.arange(ITEMS), "genre": genres}
    return users, items, fa.data.train_test_split(likes, 0.25, seed=0)


def test_two_tower_learns_taste_that_features_explain_where_ids_alone_do_not():
    users, items, (train, test) = planted_features()
    tower = fa.models.TwoTower(users, items, dim=8, seed=0)
    losses = tower.fit(train, epochs=10, lr=0.05, seed=0).history
    bpr = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    bpr.fit(train, epochs=10, lr=0.05, seed=0)
    learned = fa.metrics.evaluate(tower, test, train)
    assert losses[-1] < losses[0]
    assert learned["auc"] > 0.75 and learned["auc"] > fa.metrics.evaluate(bpr, test, train)["auc"] + 0.15
    assert learned["precision@10"] > 3 * 2 / (ITEMS - 6)         # 2 held out per user


def test_two_tower_vectors_are_sums_of_field_rows_and_rank_like_bpr():
    users, items, (train, _) = planted_features()
    tower = fa.models.TwoTower(users, items, dim=4, seed=0)
    names = [name for name, _ in tower.named_parameters()]
    assert names == ["user_id", "user_group", "item_id", "item_genre"]
    assert tower.user_group.shape == (int(users["group"].max()) + 1, 4)
    user = tower.user_id.numpy()[5] + tower.user_group.numpy()[users["group"][5]]
    item_vectors = tower.item_id.numpy() + tower.item_genre.numpy()[items["genre"]]
    np.testing.assert_allclose(tower.scores(5), item_vectors @ user, rtol=1e-5)
    tower.fit(train, epochs=1, workers=2, seed=0, start_method="spawn")
    ids, _ = tower.recommend([5], k=3)
    assert not (train[5].toarray()[0, ids[0]] > 0).any()
    assert tower.similar_items(0, k=2)[0].shape == (2,)
    loss, feeds = tower.example_graph()
    fed = feeds({"users": np.array([5]), "pos": np.array([1]), "neg": np.array([2])})
    assert sorted(int(ids[0]) for ids in fed.values()) == sorted(
        [5, users["group"][5], 1, items["genre"][1], 2, items["genre"][2]])


@pytest.mark.parametrize("user_features,message", [
    ({}, "user_features must be a non-empty dict"),
    ({"id": np.arange(3.0)}, r"user_features\['id'\] must be a non-empty 1-D int array"),
    ({"id": np.array([0, -1])}, r"user_features\['id'\] holds a negative id \(-1\)"),
    ({"id": np.arange(3), "age": np.arange(4)}, "the fields of user_features differ in length"),
    ({"not a name": np.arange(3)}, "field names must be identifiers"),
])
def test_two_tower_refuses_bad_features(user_features, message):
    with pytest.raises((TypeError, ValueError), match=message):
        fa.models.TwoTower(user_features, {"id": np.arange(4)})


def test_triple_auc_counts_item_biases_and_checks_ids(fitted):
    triples = fa.data.sample_triples(fitted.liked, n=2_000, seed=5)
    U, V, b = fitted.U.numpy(), fitted.V.numpy(), fitted.item_bias.numpy()[:, 0]
    u, p, n = triples["users"], triples["pos"], triples["neg"]
    margin = np.einsum("nk,nk->n", U[u], V[p] - V[n]) + b[p] - b[n]
    assert fitted.auc(triples) == pytest.approx(np.mean(margin > 0))
    plain = fa.models.BPR(USERS, ITEMS, dim=4, seed=2)
    assert plain.auc(triples) == fa.data.pairwise_auc(plain.U, plain.V, triples)
    with pytest.raises(IndexError, match=rf"auc: triples\['neg'\] holds {ITEMS} at position 0"):
        fitted.auc({"users": [0], "pos": [1], "neg": [ITEMS]})


def test_the_models_decide_the_default_start_method_alike(monkeypatch):
    """"fork" where Hogwild's shared memory is (Linux), else "spawn": one rule for every model."""
    from fastad.models import runner
    starts = []
    monkeypatch.setattr(fa.hogwild, "run", lambda *args, start_method, **kwargs: starts.append(start_method))
    monkeypatch.setattr(runner, "_mean_loss", lambda *args: 0.0)
    for platform in ("linux", "darwin", "win32"):
        monkeypatch.setattr(runner.sys, "platform", platform)
        fa.models.BPR(2, 3, dim=4).fit(LIKES, workers=2)
        fa.models.Word2Vec(dim=4, min_count=1, epochs=1, workers=2).fit([["a", "b", "c"]] * 4)
    assert starts == ["fork", "fork", "spawn", "spawn", "spawn", "spawn"]


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_save_and_load_keep_the_model_and_its_filter(split, tmp_path, suffix):
    train, test = split
    rng = np.random.default_rng(0)
    models = [fa.models.BPR(USERS, ITEMS, dim=8, seed=0, biases=True),
              fa.models.TwoTower({"id": np.arange(USERS), "age": rng.integers(0, 4, USERS)},
                                 {"id": np.arange(ITEMS)}, dim=8)]
    for model in models:
        model.fit(train, epochs=2, lr=0.05, seed=0)
        path = tmp_path / f"{type(model).__name__}{suffix}"
        model.save(path)
        back = type(model).load(path)
        for name, value in model.state_dict().items():
            np.testing.assert_array_equal(back.state_dict()[name], value)
        for got, expected in zip(back.recommend([0, 1], k=5), model.recommend([0, 1], k=5)):
            np.testing.assert_array_equal(got, expected)            # liked items still filtered
        np.testing.assert_array_equal(back.user_factors, model.user_factors)
        np.testing.assert_array_equal(back.item_factors, model.item_factors)
    with pytest.raises(ValueError, match="BPR.load: .* is not a saved BPR \\(it holds a TwoTower\\)"):
        fa.models.BPR.load(path)
    fa.save({"weights": {}}, tmp_path / "other.npz")
    with pytest.raises(ValueError, match="is not a saved TwoTower"):
        fa.models.TwoTower.load(tmp_path / "other.npz")


def test_factors_have_implicits_names_and_shapes():
    model = fa.models.BPR(30, 20, dim=4, seed=0)
    assert model.user_factors.shape == (30, 4) and model.item_factors.shape == (20, 4)
    np.testing.assert_array_equal(model.user_factors, model.U.value)
    np.testing.assert_array_equal(model.item_factors, model.V.value)


class LikedPairs(fa.models.Recommender):
    """A recommender that trains on (user, liked item) pairs alone, drawn by its own rule: the
    base's fit names no sampler and no triple, the model chooses both."""

    drawn = []      # the examples each call of sample_examples drew, in every worker's copy

    def __init__(self, n_users, n_items, dim=4, seed=0):
        super().__init__()
        self.dim, self.seed = dim, seed
        rng = np.random.default_rng(seed)
        self.U = fa.Parameter(rng.normal(0, 0.1, (n_users, dim)))
        self.V = fa.Parameter(rng.normal(0, 0.1, (n_items, dim)))

    n_users = property(lambda self: self.U.shape[0])
    n_items = property(lambda self: self.V.shape[0])

    def settings(self):
        return {"n_users": self.n_users, "n_items": self.n_items, "dim": self.dim, "seed": self.seed}

    def example_graph(self, batch=1, device="cpu"):
        users, items = (fa.IndexInput(np.zeros(batch, dtype=np.int64)) for _ in range(2))
        loss = fa.models.margin_loss(fa.vector_dot(fa.take(self.U, users), fa.take(self.V, items)))
        return loss, lambda pairs: {users: pairs["user"], items: pairs["item"]}

    def sample_examples(self, interactions, n, seed, negatives="uniform"):
        self.drawn.append(n)
        matrix = interactions.matrix.tocoo()
        k = np.random.default_rng(seed).integers(0, matrix.nnz, n)
        return {"user": matrix.row[k].astype(np.int64), "item": matrix.col[k].astype(np.int64)}

    def user_vectors(self, user_ids):
        return self.U.value[user_ids]

    def item_vectors(self):
        return self.V.value

    def item_biases(self):
        return None


def test_fit_trains_on_the_examples_the_models_own_sampler_draws(split, tmp_path, monkeypatch):
    train, _ = split
    monkeypatch.setattr(LikedPairs, "drawn", [])
    model = LikedPairs(USERS, ITEMS).fit(train, epochs=3, lr=0.1, batch_size=8, samples=800)
    assert model.drawn == [800] * 3                         # 100 batches of 8 each epoch
    assert model.history[-1] < model.history[0]
    scores = model.scores(np.arange(USERS))
    assert scores[train.nonzero()].mean() > scores.mean() + 0.03    # liked items score higher
    model.save(tmp_path / "pairs.npz")
    back = LikedPairs.load(tmp_path / "pairs.npz")
    np.testing.assert_array_equal(back.scores([0, 1]), model.scores([0, 1]))
