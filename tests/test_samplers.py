"""The samplers of fastad.train's compiled loop: what they draw, their streams and
shards, their bad input, and training with them (schedules included)."""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa
from fastad.data import AliasTable, FeedSampler, PairwiseSampler, SkipGramSampler


def ids(n=1):
    return fa.IndexInput(np.zeros(n, dtype=np.int64))


def liked_sets(matrix):
    matrix = sp.csr_matrix(matrix)
    return [set(matrix.indices[matrix.indptr[u]:matrix.indptr[u + 1]].tolist())
            for u in range(matrix.shape[0])]


def random_interactions(n_users=30, n_items=40, density=0.2, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < density).astype(np.float64)
    dense[:, 0] = 1.0           # every user has an interaction
    dense[:, -1] = 0.0          # and a negative
    return sp.csr_matrix(dense)


# ---------------------------------------------------------------- FeedSampler

def test_feed_sampler_visits_every_row_once_per_epoch_shuffled_or_not():
    x, ix = fa.Input(np.zeros(2)), ids()
    rows = np.arange(10)
    sampler = FeedSampler({ix: rows, x: np.stack([rows, -rows], axis=1).astype(float)},
                          shuffle=True, seed=3)
    orders = []
    for epoch in range(3):
        drawn = [(int(i[0]), tuple(v)) for i, v in sampler.epoch(epoch)]    # leaves in feed order
        assert sorted(i for i, _ in drawn) == rows.tolist()
        assert all(v == (i, -i) for i, v in drawn)             # rows stay whole
        orders.append([i for i, _ in drawn])
    assert orders[0] != orders[1] and orders[0] != rows.tolist()
    assert [int(a[0]) for (a, _) in FeedSampler({ix: rows, x: np.zeros((10, 2))}).epoch()] == rows.tolist()


def test_feed_shards_split_the_rows_without_overlap():
    ix = ids()
    seen = []
    for rank in range(3):
        sampler = FeedSampler({ix: np.arange(10)}, shuffle=rank == 1, seed=0, rank=rank, workers=3)
        drawn = [int(a[0]) for (a,) in sampler.epoch()]
        assert sorted(drawn) == list(range(rank, 10, 3)) and sampler.examples_per_epoch == len(drawn)
        seen += drawn
    assert sorted(seen) == list(range(10))


def test_train_with_shuffle_applies_every_example_each_epoch():
    E = fa.Parameter(np.zeros((6, 1)), dtype=np.float64)
    ix = ids()
    fa.train(fa.sum(E[ix]), fa.optim.SGD([E], lr=1.0), {ix: np.arange(6)}, epochs=3, shuffle=True, seed=1)
    assert E.value.ravel().tolist() == [-3.0] * 6


# ---------------------------------------------------------------- AliasTable

def test_alias_table_draws_the_weights():
    weights = np.array([0.0, 1.0, 3.0, 0.0, 6.0])
    table = AliasTable(weights)
    assert np.allclose(table.probabilities(), weights / weights.sum())
    for bad in ([], [1.0, -1.0], [np.nan, 1.0], [0.0, 0.0], [[1.0]]):
        with pytest.raises(ValueError, match="AliasTable"):
            AliasTable(bad)


# ---------------------------------------------------------------- PairwiseSampler

@pytest.mark.parametrize("negatives", ["uniform", "popularity"])
def test_pairwise_triples_hold_a_liked_item_and_an_unliked_one(negatives):
    matrix = random_interactions()
    liked = liked_sets(matrix)
    u, i, j = ids(4), ids(4), ids(4)
    sampler = PairwiseSampler(matrix, u, i, j, seed=0, negatives=negatives)
    assert sampler.examples_per_epoch == matrix.nnz // 4
    count = 0
    for users, pos, neg in sampler.epoch():
        for a, b, c in zip(users, pos, neg):
            assert b in liked[a] and c not in liked[a]
            count += 1
    assert count == 4 * sampler.examples_per_epoch and sampler.epoch_examples == sampler.examples_per_epoch


def test_pairwise_draws_interactions_or_users_uniformly():
    # user 0 liked 8 items, user 1 liked 1 item, of 20
    dense = np.zeros((2, 20))
    dense[0, :8] = 1
    dense[1, 3] = 1
    u, i, j = ids(), ids(), ids()
    by_interaction = PairwiseSampler(sp.csr_matrix(dense), u, i, j, examples=9000, seed=1)
    users = np.array([a[0] for a, _, _ in by_interaction.epoch()])
    assert abs(np.mean(users == 0) - 8 / 9) < 0.02
    by_user = PairwiseSampler(sp.csr_matrix(dense), u, i, j, sample="user", examples=9000, seed=1)
    drawn = [(a[0], b[0], c[0]) for a, b, c in by_user.epoch()]
    assert abs(np.mean([a == 0 for a, _, _ in drawn]) - 0.5) < 0.03
    negatives_of_0 = np.bincount([c for a, _, c in drawn if a == 0], minlength=20)
    assert negatives_of_0[:8].sum() == 0 and negatives_of_0[8:].min() > 0.5 * negatives_of_0[8:].mean()


def test_a_dense_user_gets_redrawn_negatives_and_every_one_is_unliked():
    dense = np.zeros((1, 50))
    dense[0, :49] = 1          # one negative exists: item 49
    u, i, j = ids(), ids(), ids()
    sampler = PairwiseSampler(sp.csr_matrix(dense), u, i, j, examples=200, seed=0)
    assert {int(c[0]) for _, _, c in sampler.epoch()} == {49}
    assert sampler.redraws > 200
    pop = PairwiseSampler((np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2])), u, i, j,
                          negatives="popularity", n_items=4, examples=500, seed=0)
    # item 3 has no interactions, so popularity never draws it: user 0's negative is 2, user 1's is 0
    for a, _, c in pop.epoch():
        assert int(c[0]) == (2 if a[0] == 0 else 0)


def test_popularity_negatives_follow_the_item_counts():
    # item 0 is liked by users 0..99, item 1 by users 0..49: twice as popular
    users = np.concatenate([np.arange(100), np.arange(50), [100]])
    items = np.concatenate([np.zeros(100, dtype=int), np.ones(50, dtype=int), [2]])   # user 100: item 2
    u, i, j = ids(), ids(), ids()
    sampler = PairwiseSampler((users, items), u, i, j, negatives="popularity", sample="user",
                              examples=100_000, seed=4)
    negs = [int(c[0]) for a, _, c in sampler.epoch() if a[0] == 100]
    counts = np.bincount(negs, minlength=3)
    assert counts[2] == 0 and abs(counts[0] / counts[1] - 2.0) < 0.4


def test_streams_are_reproducible_and_independent_per_rank():
    matrix = random_interactions()
    def draw(seed, rank):
        u, i, j = ids(), ids(), ids()
        s = PairwiseSampler(matrix, u, i, j, seed=seed, rank=rank, workers=2, examples=50)
        return [tuple(int(x[0]) for x in t) for t in s.epoch()]
    assert draw(7, 0) == draw(7, 0)
    assert draw(7, 0) != draw(7, 1) and draw(7, 0) != draw(8, 0)


@pytest.mark.parametrize("sample", ["interaction", "user"])
def test_each_rank_draws_its_own_share_and_the_shares_draw_as_one_worker(sample):
    """Worker r's positives come from its contiguous 1/workers of the interactions (of the
    users with sample="user"), so two Hogwild workers never update one user's row; all
    ranks together draw each interaction (or user) as often as one worker would; negatives
    still come from every item; one worker draws from everything."""
    matrix = random_interactions(n_users=30, n_items=40, density=0.3, seed=2)
    pairs = list(zip(*matrix.nonzero()))          # CSR order: by user
    counts = np.zeros(len(pairs)) if sample == "interaction" else np.zeros(30)
    negatives = set()
    index = {pair: k for k, pair in enumerate(pairs)}
    for rank in range(3):
        u, i, j = ids(), ids(), ids()
        sampler = PairwiseSampler(matrix, u, i, j, sample=sample, seed=5, rank=rank, workers=3,
                                  examples=30_000)
        users = set()
        for a, b, c in sampler.epoch():
            pair = (int(a[0]), int(b[0]))
            assert pair in index
            users.add(pair[0])
            counts[index[pair] if sample == "interaction" else pair[0]] += 1
            negatives.add(int(c[0]))
        if sample == "interaction":
            share = {user for user, _ in pairs[rank * len(pairs) // 3:(rank + 1) * len(pairs) // 3]}
        else:
            share = set(range(rank * 10, rank * 10 + 10))
        assert users == share
    assert abs(counts / counts.mean() - 1).max() < 0.4       # uniform over the whole
    assert len(negatives) > 30
    u, i, j = ids(), ids(), ids()
    alone = PairwiseSampler(matrix, u, i, j, sample=sample, seed=5, examples=3000)
    assert len({int(a[0]) for a, _, _ in alone.epoch()}) == 30


def test_more_workers_than_interactions_draw_from_all_of_them():
    u, i, j = ids(), ids(), ids()
    sampler = PairwiseSampler((np.array([0, 1]), np.array([0, 1])), u, i, j, n_items=3, seed=0,
                              rank=2, workers=4, examples=200)
    assert {int(a[0]) for a, _, _ in sampler.epoch()} == {0, 1}


def test_pairwise_bad_input_is_named():
    u, i, j = ids(), ids(), ids()
    good = random_interactions()
    with pytest.raises(ValueError, match="negative"):
        PairwiseSampler(sp.csr_matrix(np.array([[1.0, -1.0, 0.0]])), u, i, j)
    with pytest.raises(ValueError, match="not finite"):
        PairwiseSampler(sp.csr_matrix(np.array([[1.0, np.nan, 0.0]])), u, i, j)
    with pytest.raises(ValueError, match="no interaction"):
        PairwiseSampler(sp.csr_matrix((3, 4)), u, i, j)
    with pytest.raises(ValueError, match=r"users 1 liked every item"):
        PairwiseSampler(sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]])), u, i, j)
    with pytest.raises(ValueError, match=r"users 1 have none"):
        PairwiseSampler(sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]])), u, i, j, sample="user")
    with pytest.raises(ValueError, match="item id 5 is out of range for 3 items"):
        PairwiseSampler((np.array([0]), np.array([5])), u, i, j, n_items=3)
    with pytest.raises(IndexError, match="negative id"):
        PairwiseSampler((np.array([-1]), np.array([0])), u, i, j)
    with pytest.raises(TypeError, match="must hold integers"):
        PairwiseSampler((np.array([0.5]), np.array([0])), u, i, j)
    with pytest.raises(ValueError, match="neg holds 3 ids, expected K >= 1 negatives for each of the 2"):
        PairwiseSampler(good, ids(2), ids(2), ids(3))
    with pytest.raises(TypeError, match="pos must be an IndexInput"):
        PairwiseSampler(good, u, fa.Input(np.zeros(1)), j)
    with pytest.raises(ValueError, match="rank must be below workers"):
        PairwiseSampler(good, u, i, j, rank=2, workers=2)
    with pytest.raises(ValueError, match="sample must be"):
        PairwiseSampler(good, u, i, j, sample="items")
    with pytest.raises(ValueError, match="examples must be >= 1"):
        PairwiseSampler(good, u, i, j, examples=0)



def test_samplers_made_from_one_interactions_share_its_arrays():
    import pickle
    import tracemalloc
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 2_000, 400_000), rng.integers(0, 3_000, 400_000)
    data = fa.data.Interactions((users, items))
    assert (data.n_users, data.n_items) == (2_000, 3_000) and data.nnz == data.matrix.nnz > 300_000
    assert "2000 users x 3000 items" in repr(data)

    def draw(source, **kw):
        u, i, j = ids(3), ids(3), ids(3)
        s = PairwiseSampler(source, u, i, j, seed=5, examples=40, **kw)
        return s, [tuple(map(tuple, t)) for t in s.epoch()]
    shared, triples = draw(data)
    assert shared.data is data
    assert triples == draw((users, items))[1]             # the same stream as from the arrays
    assert draw(pickle.loads(pickle.dumps(data)))[1] == triples
    assert draw(data, negatives="popularity")[1] == draw((users, items), negatives="popularity")[1]
    tracemalloc.start()
    draw(data)
    draw(data, negatives="popularity")                    # the alias table is made once, then kept
    made_from_data = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    draw((users, items))
    made_from_arrays = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert made_from_data < 200_000 < 3_000_000 < made_from_arrays     # no copy of 12 bytes a pair
    with pytest.raises(ValueError, match="assignment destination is read-only"):
        data.matrix.indices[0] = 1
    with pytest.raises(ValueError, match="n_users and n_items are the Interactions' own"):
        PairwiseSampler(data, ids(), ids(), ids(), n_items=5)
    with pytest.raises(ValueError, match="Interactions: interactions hold no interaction"):
        fa.data.Interactions(sp.csr_matrix((3, 4)))
    everything = fa.data.Interactions(sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]])))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"PairwiseSampler: users 1 liked every item"):
            PairwiseSampler(everything, ids(), ids(), ids(), negatives="popularity")


def test_a_popularity_sampler_makes_no_array_of_the_interactions_size():
    """Which users have no popularity negative is found from the Interactions' count of liked
    items: every epoch's sampler in every thread asks, and a transient array per
    interaction each time was most of BPR's peak memory beyond implicit's."""
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 500, 300_000), rng.integers(0, 2_000, 300_000)
    data = fa.data.Interactions((users, items), n_users=500, n_items=2_000)
    tracemalloc.start()
    PairwiseSampler(data, ids(), ids(), ids(), negatives="popularity")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < data.nnz            # bytes: below one byte an interaction
    lonely = fa.data.Interactions(sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])))
    with pytest.raises(ValueError, match="PairwiseSampler: users 0 liked every item"):
        PairwiseSampler(lonely, ids(), ids(), ids(), negatives="popularity")
    PairwiseSampler(lonely, ids(), ids(), ids(), negatives="uniform")     # item 2 is drawable


def test_ids_beyond_int32_are_refused_naming_the_argument():
    # the sampler holds ids as int32: a count above 2**31 - 1 must fail when it is made
    u, i, j = ids(), ids(), ids()
    one = (np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match=r"n_items is 2147483648, above 2\*\*31 - 1"):
        PairwiseSampler(one, u, i, j, n_items=2**31)
    with pytest.raises(ValueError, match=r"n_users is 2147483648, above 2\*\*31 - 1"):
        PairwiseSampler(one, u, i, j, n_users=2**31)
    with pytest.raises(ValueError, match=r"n_items \(the matrix's columns\) is 2147483648"):
        PairwiseSampler(sp.csr_matrix(([1.0], ([0], [0])), shape=(1, 2**31)), u, i, j)
    # the largest count that fits works, and its ids come back whole in the int64 leaves
    top = PairwiseSampler((np.array([0]), np.array([2**31 - 2])), u, i, j, n_items=2**31 - 1,
                          examples=200, seed=0)
    assert top.largest_ids() == (0, 2**31 - 2, 2**31 - 2)
    triples = list(top.epoch())
    assert all(int(b[0]) == 2**31 - 2 for _, b, _ in triples)
    negs = np.array([int(c[0]) for _, _, c in triples])
    assert negs.min() >= 0 and negs.max() < 2**31 - 2 and negs.max() > 2**30


@pytest.mark.parametrize("sample", ["interaction", "user"])
@pytest.mark.parametrize("batch", [1, 3])
def test_every_epoch_draws_exactly_its_examples_the_same_for_the_same_seed(sample, batch):
    # the sampler reads interactions ahead of the example it fills: an epoch must still
    # end after `examples` examples, an abandoned epoch must not leak into the next, and
    # the same seed must give the same triples
    matrix = random_interactions()
    liked = liked_sets(matrix)
    for examples in (1, 2, 3, 7):
        def run():
            u, i, j = ids(batch), ids(batch), ids(batch)
            s = PairwiseSampler(matrix, u, i, j, sample=sample, examples=examples, seed=3)
            def triples(it):
                return [tuple(tuple(int(x) for x in leaf) for leaf in t) for t in it]
            epochs = []
            for epoch in range(3):
                epochs.append(triples(s.epoch(epoch)))
                assert len(epochs[-1]) == examples and s.epoch_examples == examples
            it = s.epoch(3)
            epochs.append(triples([next(it)]))          # abandoned after one example
            epochs.append(triples(s.epoch(4)))
            assert len(epochs[-1]) == examples
            return epochs
        first = run()
        assert first == run()
        if examples == 1:       # each epoch draws afresh, not the last epoch's leftovers
            u, i, j = ids(batch), ids(batch), ids(batch)
            s = PairwiseSampler(matrix, u, i, j, sample=sample, examples=1, seed=3)
            assert len({tuple(int(x) for x in next(s.epoch(e))[1]) for e in range(20)}) > 10
        for epoch in first:
            for users, pos, neg in epoch:
                for a, b, c in zip(users, pos, neg):
                    assert b in liked[a] and c not in liked[a]


# ---------------------------------------------------------------- SkipGramSampler

def skipgram_pairs(sampler, epoch=0):
    return [(int(c[0]), [int(x) for x in ctx]) for c, ctx in sampler.epoch(epoch)]


def test_window_one_gives_the_neighbours_within_each_sentence():
    tokens = np.array([0, 1, 2, 3, 4, 5, 6])
    ends = [3, 3, 7]                                     # [0 1 2] [] [3 4 5 6]
    sampler = SkipGramSampler(tokens, ids(), ids(3), sentence_ends=ends, window=1, seed=0)
    pairs = skipgram_pairs(sampler)
    expected = [(0, 1), (1, 0), (1, 2), (2, 1), (3, 4), (4, 3), (4, 5), (5, 4), (5, 6), (6, 5)]
    assert [(c, ctx[0]) for c, ctx in pairs] == expected


def test_reduced_windows_weigh_distances_as_word2vec():
    tokens = np.arange(4000) % 50
    window = 4
    sampler = SkipGramSampler(tokens, ids(), ids(2), window=window, seed=2)
    distance = []
    position = {}
    for c, ctx in skipgram_pairs(sampler):
        d = (ctx[0] - c) % 50
        distance.append(min(d, 50 - d))
    counts = np.bincount(distance, minlength=window + 1)[1:]
    expected = np.arange(window, 0, -1) / np.arange(window, 0, -1).sum()   # P(d) ~ window - d + 1
    assert counts.sum() == len(distance) and np.allclose(counts / counts.sum(), expected, atol=0.02)


def test_negatives_follow_the_unigram_power_the_context_word_included():
    # the objective's noise distribution: a draw equal to the context word is kept (not
    # redrawn as fastText does, which would leave word 0 out of its own negatives)
    tokens = np.array([0] * 800 + [1] * 100 + [2] * 100)
    np.random.default_rng(0).shuffle(tokens)
    sampler = SkipGramSampler(tokens, ids(), ids(6), window=2, seed=0)
    negatives = np.concatenate([ctx[1:] for _, ctx in skipgram_pairs(sampler) if ctx[0] == 0])
    weights = np.array([800, 100, 100]) ** 0.75
    counts = np.bincount(negatives, minlength=3)
    assert np.allclose(counts / counts.sum(), weights / weights.sum(), atol=0.03)


def test_subsampling_drops_frequent_words_at_word2vecs_rate():
    tokens = np.array(([0] * 9 + [1]) * 2000)
    sample = 1e-2
    sampler = SkipGramSampler(tokens, ids(), ids(2), window=1, sample=sample, seed=5)
    total = tokens.size
    keep = lambda c: min(1.0, (np.sqrt(c / (sample * total)) + 1) * sample * total / c)
    centres = np.array([c for c, _ in skipgram_pairs(sampler)])
    # with window 1 a kept word is a centre of 1 or 2 pairs: compare the shares of the two words
    ratio = np.mean(centres == 0) / np.mean(centres == 1)
    assert abs(ratio - 9 * keep(18000) / keep(2000)) < 0.5


def test_skipgram_shards_cover_each_sentence_once():
    tokens = np.arange(100) % 7
    ends = np.arange(5, 101, 5)
    full = skipgram_pairs(SkipGramSampler(tokens, ids(), ids(2), sentence_ends=ends, window=1, seed=0))
    parts = [skipgram_pairs(SkipGramSampler(tokens, ids(), ids(2), sentence_ends=ends, window=1,
                                            seed=0, rank=r, workers=3)) for r in range(3)]
    assert sorted((c, x[0]) for p in parts for c, x in p) == sorted((c, x[0]) for c, x in full)
    assert all(parts)


def test_skipgram_bad_input_is_named():
    tokens = np.array([0, 1, 2, 1])
    with pytest.raises(ValueError, match="window must be >= 1"):
        SkipGramSampler(tokens, ids(), ids(2), window=0)
    with pytest.raises(ValueError, match="at least one negative"):
        SkipGramSampler(tokens, ids(), ids(1))
    with pytest.raises(TypeError, match="tokens must hold integers"):
        SkipGramSampler(np.array([0.5, 1.0]), ids(), ids(2))
    with pytest.raises(ValueError, match="token id 2 .* out of range for vocab_size 2"):
        SkipGramSampler(tokens, ids(), ids(2), vocab_size=2)
    with pytest.raises(ValueError, match="sentence_ends"):
        SkipGramSampler(tokens, ids(), ids(2), sentence_ends=[3, 2, 4])
    with pytest.raises(ValueError, match="tokens is empty"):
        SkipGramSampler(np.zeros(0, dtype=np.int64), ids(), ids(2))
    with pytest.raises(ValueError, match="fewer than 2 distinct"):
        SkipGramSampler(np.zeros(5, dtype=np.int64), ids(), ids(2))
    with pytest.raises(ValueError, match="center holds no ids"):
        SkipGramSampler(tokens, ids(0), ids(2))
    with pytest.raises(ValueError, match=r"\(1 \+ k\) ids for each of the 2 centre ids, got 5"):
        SkipGramSampler(tokens, ids(2), ids(5))
    with pytest.raises(ValueError, match="at least one negative .* got 2 for 2"):
        SkipGramSampler(tokens, ids(2), ids(2))
    with pytest.raises(ValueError, match="with 2 pairs an example, give mask"):
        SkipGramSampler(tokens, ids(2), ids(4))
    with pytest.raises(ValueError, match="mask must be a CPU Input of 2 values"):
        SkipGramSampler(tokens, ids(2), ids(4), mask=fa.Input(np.ones(3)))


@pytest.mark.parametrize("pairs", [3, 7])
def test_batched_skipgram_draws_the_one_pair_stream_and_weighs_the_last_example(pairs):
    # B pairs an example are the B = 1 stream cut into pieces (the same draws of the
    # same generator); the epoch's last, partial example repeats its last pair at weight 0.
    tokens = np.arange(203) % 11
    ends = np.array([50, 51, 120, 203])
    k = 3
    one = skipgram_pairs(SkipGramSampler(tokens, ids(), ids(1 + k), sentence_ends=ends,
                                         window=3, sample=0.05, seed=4))
    mask = fa.Input(np.zeros((pairs, 1), dtype=np.float32))
    sampler = SkipGramSampler(tokens, ids(pairs), ids(pairs * (1 + k)), mask=mask,
                              sentence_ends=ends, window=3, sample=0.05, seed=4)
    drawn = []
    examples = list(sampler.epoch())
    for n, (centres, contexts, w) in enumerate(examples):
        contexts = contexts.reshape(pairs, 1 + k)
        real = int(w.sum())
        assert np.array_equal(w.ravel(), [1.0] * real + [0.0] * (pairs - real))
        assert real == pairs or n == len(examples) - 1          # only the last one is partial
        assert np.all(centres[real:] == centres[real - 1])
        assert np.all(contexts[real:] == contexts[real - 1])
        drawn += [(int(c), x.tolist()) for c, x in zip(centres[:real], contexts[:real])]
    assert drawn == [(c, list(x)) for c, x in one]
    assert sampler.epoch_pairs == len(one) and sampler.epoch_examples == len(examples)
    assert len(one) % pairs, "the corpus should end mid-example for this test to bite"


# ---------------------------------------------------------------- training with samplers

def bpr_graph(n_users, n_items, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    U = fa.Parameter(rng.normal(0, 0.1, (n_users, dim)))
    V = fa.Parameter(rng.normal(0, 0.1, (n_items, dim)))
    u, i, j = ids(), ids(), ids()
    loss = -fa.sum(fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])))
    return U, V, (u, i, j), loss


def test_bpr_learns_from_the_pairwise_sampler():
    rng = np.random.default_rng(0)
    P, Q = rng.normal(size=(200, 4)), rng.normal(size=(100, 4))
    scores = P @ Q.T
    liked = scores > np.quantile(scores, 0.8, axis=1, keepdims=True)
    U, V, (u, i, j), loss = bpr_graph(200, 100)
    opt = fa.optim.SGD([U, V], lr=0.1)
    sampler = PairwiseSampler(sp.csr_matrix(liked.astype(float)), u, i, j, seed=0)
    means = fa.train(loss, opt, sampler, epochs=8, lr_schedule=fa.optim.LinearDecay(opt, min_lr=0.01))
    assert means[-1] < means[0] * 0.6
    predicted = U.value @ V.value.T
    auc = np.mean([np.mean(predicted[k, liked[k]][:, None] > predicted[k, ~liked[k]][None, :])
                   for k in range(200)])
    assert auc > 0.85
    assert opt.lr == pytest.approx(0.01, rel=0.05)


def test_ids_out_of_range_fail_before_any_parameter_changes():
    U, V, (u, i, j), loss = bpr_graph(5, 10)
    before = U.value.copy(), V.value.copy()
    sampler = PairwiseSampler(random_interactions(5, 12), u, i, j, seed=0)     # 12 items > 10 rows
    with pytest.raises(IndexError, match=r"ids up to 11 into leaf 1 of PairwiseSampler.*nothing was trained"):
        fa.train(loss, fa.optim.SGD([U, V], lr=0.1), sampler)
    assert np.array_equal(U.value, before[0]) and np.array_equal(V.value, before[1])
    with pytest.raises(ValueError, match="shuffle and seed are the sampler's"):
        fa.train(loss, fa.optim.SGD([U, V], lr=0.1), sampler, shuffle=True)


def test_schedules_in_the_loop_equal_a_python_loop_that_sets_lr():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(12, 3)), rng.normal(size=12)
    def graph():
        w = fa.Parameter(np.zeros(3), dtype=np.float64)
        x, y = fa.Input(np.zeros(3), dtype=np.float64), fa.Input(np.zeros(1), dtype=np.float64)
        return w, x, y, fa.sum(fa.square(fa.sum(w * x) - y))
    for make in (lambda o: fa.optim.StepLR(o, step_size=2, gamma=0.5),
                 lambda o: fa.optim.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
                 lambda o: fa.optim.LinearWarmup(o, warmup_steps=4),
                 lambda o: fa.optim.LinearDecay(o, min_lr=0.01, total_steps=9)):
        w, x, y, loss = graph()
        opt = fa.optim.SGD([w], lr=0.1)
        sched = make(opt)
        fa.train(loss, opt, {x: X, y: Y}, epochs=2, lr_schedule=sched, schedule_every=3)
        w2, x2, y2, loss2 = graph()
        opt2 = fa.optim.SGD([w2], lr=0.1)
        sched2 = make(opt2)
        for e in range(24):
            if e % 3 == 0:
                opt2.lr = sched2.lr_at(e // 3)
            x2.set_value(X[e % 12]); y2.set_value(Y[e % 12:e % 12 + 1])
            loss2.forward(); loss2.backward(); opt2.step(); opt2.zero_grad()
        assert np.allclose(w.value, w2.value, rtol=1e-12), type(sched).__name__
        assert sched.last_epoch == 8 and opt.lr == opt2.lr


def test_linear_decay_over_the_run_ends_at_min_lr_and_bad_schedules_are_named():
    w = fa.Parameter(np.zeros(1))
    x = fa.Input(np.zeros(1))
    loss = fa.sum(w * x)
    opt = fa.optim.SGD([w], lr=0.5)
    decay = fa.optim.LinearDecay(opt, min_lr=0.1)
    fa.train(loss, opt, {x: np.ones((100, 1))}, epochs=2, lr_schedule=decay)
    assert opt.lr == pytest.approx(0.1 + 0.4 / 200, rel=1e-6)     # the last example's lr
    with pytest.raises(ValueError, match="min_lr .* is above the optimizer's lr"):
        fa.optim.LinearDecay(opt, min_lr=1.0)
    with pytest.raises(ValueError, match="total_steps must be"):
        fa.optim.LinearDecay(opt, min_lr=0.0, total_steps=0)
    other = fa.optim.SGD([w], lr=0.5)
    with pytest.raises(ValueError, match="must schedule the optimizer given to train"):
        fa.train(loss, opt, {x: np.ones((3, 1))}, lr_schedule=fa.optim.LinearDecay(other))
    with pytest.raises(TypeError, match="lr_schedule must be a fastad scheduler"):
        fa.train(loss, opt, {x: np.ones((3, 1))}, lr_schedule=object())
    with pytest.raises(ValueError, match="schedule_every"):
        fa.train(loss, opt, {x: np.ones((3, 1))}, lr_schedule=decay, schedule_every=0)


# ---------------------------------------------------------------- rows loaded ahead

def table(param):
    """A table as rows_loaded_ahead names it, without its leaf: (address, row bytes)."""
    return param.value.ctypes.data, param.value[0].nbytes


def rows_loaded_ahead(loss, opt, sampler):
    """The (leaf index, table address, row bytes) of the tables whose rows the sampler loads
    ahead while fa.train runs it (read by a progress callback), and those after the run."""
    during = []
    fa.train(loss, opt, sampler, report_every=1,
             progress=lambda done, per_second: during.append(sampler._row_prefetch_targets()))
    return set(during[0]), sampler._row_prefetch_targets()


def test_the_loop_loads_ahead_the_rows_each_leaf_selects_and_lets_them_go_after():
    rng = np.random.default_rng(0)
    U, V = (fa.Parameter(rng.normal(size=(n, 8)), dtype=np.float32) for n in (30, 40))
    b = fa.Parameter(np.zeros((40, 1)), dtype=np.float32)
    u, i, j = ids(), ids(), ids()
    loss = fa.ranking_loss(U, u, V, i, j, item_bias=b)
    sampler = PairwiseSampler(random_interactions(), u, i, j, seed=0, examples=3)
    during, after = rows_loaded_ahead(loss, fa.optim.SGD([U, V, b], lr=0.1), sampler)
    assert table(U)[1] == 32 and table(b)[1] == 4
    assert during == {(0, *table(U)), (1, *table(V)), (2, *table(V)), (1, *table(b)), (2, *table(b))}
    assert after == []
    # The composed model: three gathers.
    U, V, (u, i, j), loss = bpr_graph(30, 40)
    sampler = PairwiseSampler(random_interactions(), u, i, j, seed=0, examples=3)
    during, after = rows_loaded_ahead(loss, fa.optim.SGD([U, V], lr=0.1), sampler)
    assert during == {(0, *table(U)), (1, *table(V)), (2, *table(V))} and after == []
    # Feeds: only an IndexInput that a gather reads by; an Input selects no rows.
    W = fa.Parameter(np.ones((6, 3)))
    x, ix = fa.Input(np.ones(1)), ids(2)
    sampler = FeedSampler({x: np.ones(4), ix: np.array([[0, 5], [1, 2], [5, 5], [3, 4]])})
    during, after = rows_loaded_ahead(fa.sum(W[ix]) * fa.sum(x), fa.optim.SGD([W], lr=0.1), sampler)
    assert during == {(1, *table(W))} and after == []


def test_a_stateful_row_step_loads_its_state_rows_ahead_beside_the_table():
    """Under Adagrad (a rule with state, stepped inside backward) the sums' rows of the next
    example's ids load ahead with the table's; under plain SGD there is no state to load."""
    W = fa.Parameter(np.ones((6, 3)))
    x, ix = fa.Input(np.ones(1)), ids(2)
    feeds = {x: np.ones(4), ix: np.array([[0, 5], [1, 2], [5, 5], [3, 4]])}
    loss = fa.sum(W[ix]) * fa.sum(x)
    adagrad = fa.optim.Adagrad([W], lr=0.1)
    during, after = rows_loaded_ahead(loss, adagrad, FeedSampler(feeds))
    sums = adagrad.state_dict()["state.0.sum"]
    assert sums.shape == W.shape
    state_address = [address for leaf, address, width in during if address != table(W)[0]]
    assert during - {(1, *table(W))} and len(state_address) == 1 and after == []
    assert {(leaf, width) for leaf, _, width in during} == {(1, table(W)[1])}
    during, _ = rows_loaded_ahead(loss, fa.optim.SGD([W], lr=0.1), FeedSampler(feeds))
    assert during == {(1, *table(W))}


def test_rows_loaded_ahead_are_let_go_when_the_loop_fails():
    U, V, (u, i, j), loss = bpr_graph(30, 40)
    sampler = PairwiseSampler(random_interactions(), u, i, j, seed=0, examples=3)

    def fail(done, per_second):
        raise RuntimeError("stopped by progress")

    with pytest.raises(RuntimeError, match="stopped by progress"):
        fa.train(loss, fa.optim.SGD([U, V], lr=0.1), sampler, progress=fail, report_every=1)
    assert sampler._row_prefetch_targets() == []


@pytest.mark.parametrize("rows,width,ids_per_example", [(0, 3, 0), (4, 0, 1)])
def test_empty_tables_train_with_nothing_to_load_ahead(rows, width, ids_per_example):
    W = fa.Parameter(np.zeros((rows, width)))
    ix = ids(ids_per_example)
    sampler = FeedSampler({ix: np.zeros((2, ids_per_example), dtype=np.int64)})
    during, after = rows_loaded_ahead(fa.sum(W[ix]), fa.optim.SGD([W], lr=0.1), sampler)
    assert during == set() and after == []


def test_ids_made_by_an_op_are_not_fed():
    """A reshape of an IndexInput is an IndexInput the op writes, not a leaf a sampler may:
    a FeedSampler and PairwiseSampler refuse it, naming the op."""
    ids = fa.IndexInput(np.zeros(4, np.int64))
    view = fa.reshape(ids, (2, 2))
    with pytest.raises(TypeError, match="feeds must be keyed by Input or IndexInput leaves, got 'reshape'"):
        fa.data.FeedSampler({view: np.zeros((3, 2, 2), np.int64)})
    likes = fa.data.planted_interactions(10, 8, per_user=2, seed=0)
    u, i = fa.IndexInput([0]), fa.IndexInput([0])
    with pytest.raises(TypeError, match="neg must be an IndexInput leaf of the graph, got 'reshape'"):
        fa.data.PairwiseSampler(likes, u, i, fa.reshape(fa.IndexInput([0]), (1,)), seed=0)
