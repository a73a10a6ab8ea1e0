"""fa.GraphCache: a graph kept per structure and replayed gives the values and gradients of a
graph built anew; it is never used for other data shapes or dtypes; what it keeps stays
within max_bytes over many examples of varying structure; the cyclic collector never sees it."""
import gc
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from fastad._engine.graph import GradientArena
from random_graph_helpers import build, fa_ops, leaf_values, recipes


def _chain(lengths, ids, x, params):
    """A graph whose structure is `lengths` (a tuple): one branch per entry, of that many
    tanh(· @ U + emb) steps, the branches summed into a cross-entropy over the Input x."""
    E, U, V = params
    emb = fa.embedding(E, ids)                 # one row per id
    total = None
    for b, n in enumerate(lengths):
        h = emb[b % emb.shape[0]]
        for _ in range(n):
            h = fa.tanh(h @ U + emb[(b + n) % emb.shape[0]])
        total = h if total is None else total + h
    logits = (total @ V).reshape(1, 3) + x
    return fa.nn.cross_entropy(logits, fa.IndexInput([1]))


def _params(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (fa.Parameter(rng.normal(size=(10, 4)), dtype=dtype),
            fa.Parameter(rng.normal(size=(4, 4)) * 0.5, dtype=dtype),
            fa.Parameter(rng.normal(size=(4, 3)), dtype=dtype))


def _examples(count, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        lengths = tuple(int(n) for n in rng.integers(0, 4, size=rng.integers(1, 4)))
        ids = rng.integers(0, 10, size=rng.integers(2, 5))
        yield lengths, ids, rng.normal(size=(1, 3))


def test_replayed_graphs_give_the_values_and_gradients_of_graphs_built_anew():
    cached_params, fresh_params = _params(), _params()
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, cached_params))
    for lengths, ids, x in _examples(300):
        kept = cache(lengths, ids, x)
        fresh = _chain(lengths, fa.IndexInput(ids), fa.Input(x, dtype=np.float64), fresh_params)
        assert kept.item() == fresh.item()
        kept.backward()
        fresh.backward()
        for a, b in zip(cached_params, fresh_params):
            if b.grad is None:                  # U takes none when every branch is empty
                assert a.grad is None
                continue
            np.testing.assert_array_equal(a.grad, b.grad)
            a.set_value(a.value - 0.1 * a.grad)  # a step: the next replay must read new values
            b.set_value(b.value - 0.1 * b.grad)
            a.zero_grad(), b.zero_grad()
    assert cache.hits > 100 and cache.misses == len(cache)


def test_other_data_shapes_or_dtypes_build_their_own_graph():
    params = _params()
    built = []

    def record_build(lengths, ids, x):
        built.append((lengths, ids.shape))
        return _chain(lengths, ids, x, params)

    cache = fa.GraphCache(record_build)
    cache((1, 2), np.array([1, 2, 3]), np.zeros((1, 3)))
    cache((1, 2), np.array([4, 5, 6]), np.ones((1, 3)))                 # same: replayed
    cache((1, 2), np.array([1, 2]), np.zeros((1, 3)))                   # ids of another length
    cache((1, 3), np.array([1, 2]), np.zeros((1, 3)))                   # another structure
    cache((1, 3), np.array([1, 2], dtype=np.int32), np.zeros((1, 3)))  # ids of another dtype
    assert built == [((1, 2), (3,)), ((1, 2), (2,)), ((1, 3), (2,)), ((1, 3), (2,))]
    assert (cache.hits, cache.misses, len(cache)) == (1, 4, 4)


def test_the_least_recently_used_graph_goes_first_and_the_bytes_stay_within_the_bound():
    params = _params()
    one = fa.graph_nbytes(_chain((2,), fa.IndexInput([1, 2]), fa.Input(np.zeros((1, 3)), dtype=np.float64), params))
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=int(2.5 * one))
    ids, x = np.array([1, 2]), np.zeros((1, 3))
    cache((2,), ids, x)
    cache((0, 2), ids, x)
    cache((2,), ids, x)                  # (2,) is now the most recent
    cache((2, 0), ids, x)                # evicts (0, 2)
    assert cache.nbytes <= cache.max_bytes and len(cache) == 2
    misses = cache.misses
    cache((2,), ids, x)
    assert cache.misses == misses        # kept
    cache((0, 2), ids, x)
    assert cache.misses == misses + 1    # was evicted: built again


def test_a_graph_larger_than_the_whole_cache_is_used_once_and_not_kept():
    params = _params()
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=100)
    loss = cache((3, 3), np.array([1, 2]), np.zeros((1, 3)))
    loss.backward()
    assert params[1].grad is not None and len(cache) == 0 and cache.nbytes == 0


def test_twenty_thousand_examples_of_varying_structure_keep_the_cache_within_its_bound():
    params = _params(np.float32)
    bound = 400_000
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=bound)
    opt = fa.optim.SGD(list(params), lr=0.01)
    peak = 0
    for lengths, ids, x in _examples(20_000, seed=3):
        loss = cache(lengths, ids, x.astype(np.float32))
        loss.backward()
        opt.step()
        opt.zero_grad()
        peak = max(peak, cache.nbytes)
        assert cache.nbytes == sum(nbytes for _, _, nbytes in cache._graphs.values()) + cache._arena.nbytes
    assert peak <= bound and len(cache) > 10 and cache.hits > 5_000


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from Linux's /proc")
def test_resident_memory_stays_flat_while_the_cache_evicts_and_builds_over_many_examples():
    """(tests/memory_check.py runs the same for a million examples.)"""
    params = _params(np.float32)
    bound = 300_000
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=bound)
    opt = fa.optim.SGD(list(params), lr=0.01)

    def train(count, seed):
        for lengths, ids, x in _examples(count, seed=seed):
            loss = cache(lengths, ids, x.astype(np.float32))
            loss.backward()
            opt.step()
            opt.zero_grad()
            assert cache.nbytes <= bound

    train(3_000, seed=11)                       # the cache fills and starts evicting
    before, built_before = _resident_bytes(), cache.misses
    train(30_000, seed=12)
    built = cache.misses - built_before
    churned = built * cache.nbytes // len(cache)            # the graphs built and dropped since
    assert built > 10_000 and churned > 100 << 20
    assert _resident_bytes() - before < 4 << 20


def test_graph_nbytes_counts_every_node_value_and_gradient():
    w = fa.Parameter(np.ones(1000), dtype=np.float64)
    one = fa.graph_nbytes(fa.tanh(w))
    assert one >= 2 * 8000                                   # the value and its gradient
    two = fa.graph_nbytes(fa.tanh(fa.tanh(w)))
    assert two >= 2 * one - 100                              # a second node as large
    with fa.no_grad():
        assert fa.graph_nbytes(fa.tanh(w)) < one - 7000      # no gradient to hold


def test_kept_graphs_are_invisible_to_the_cyclic_collector():
    params = _params()
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=1 << 30)
    gc.collect()
    before = len(gc.get_objects())
    for lengths, ids, x in _examples(2000, seed=5):
        cache(lengths, ids, x).backward()
    gc.collect()
    gc.collect()       # a key's nested tuples leave the collector one level a collection
    assert len(cache) > 100
    assert len(gc.get_objects()) - before < len(cache)   # no node, list or plan: a few keys


def test_a_new_node_gives_the_cyclic_collector_no_tuple_to_visit():
    gc.disable()         # a collection would untrack the tuples itself
    try:
        w = fa.Parameter(np.ones((3, 4)))
        y = fa.tanh(w @ w.T + 1.0)[0]
        for node in (y, y.parents[0], y.parents[0].parents[0], y.parents[0].parents[0].parents[0]):
            assert not gc.is_tracked(node.parents) and not gc.is_tracked(node.shape), node
    finally:
        gc.enable()


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(TypeError, match="GraphCache: build must be callable"):
        fa.GraphCache(3)
    with pytest.raises(ValueError, match="GraphCache: max_bytes must be an integer >= 0"):
        fa.GraphCache(lambda s: None, max_bytes=-1)
    cache = fa.GraphCache(lambda s, ids: fa.embedding(fa.Parameter(np.ones((3, 2))), ids).sum())
    with pytest.raises(TypeError, match="GraphCache: structure must be hashable, got list"):
        cache([1, 2], np.array([0]))
    with pytest.raises(TypeError, match=r"GraphCache: data\[0\] must be an array of integers or floats"):
        cache((1,), np.array(["a"]))


def test_check_mode_catches_a_build_that_the_structure_does_not_determine():
    """The property the cache rests on: a kept graph serves only examples whose graph it is.
    A build that reads state outside its structure and data (here, which row it picks, a
    getitem of the same op, shape and dtype) is caught by check=True on its first replay."""
    w = fa.Parameter(np.arange(12.0).reshape(3, 4), dtype=np.float64)
    picked = {"row": 0}
    cache = fa.GraphCache(lambda n, x: (w[picked["row"]] * x).sum(), check=True)
    x = np.ones(4)
    assert cache("s", x).item() == 6.0
    assert cache("s", x * 2).item() == 12.0          # same structure: replayed, and checked
    picked["row"] = 1
    with pytest.raises(RuntimeError, match=r"GraphCache\(check=True\): the graph kept for structure 's'"):
        cache("s", x)


@pytest.mark.parametrize("seed", range(5))
def test_check_mode_passes_every_replay_of_random_honest_builds(seed):
    params = _params(seed=seed)
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), check=True)
    for lengths, ids, x in _examples(200, seed=seed):
        cache(lengths, ids, x).backward()
        for p in params:
            if p.grad is not None:
                p.set_value(p.value - 0.05 * p.grad)
            p.zero_grad()
    assert cache.hits > 50


@settings(max_examples=40, deadline=None)
@given(st.lists(recipes, min_size=1, max_size=3), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2**16)),
                                                           min_size=1, max_size=10))
def test_random_graphs_replayed_from_the_cache_equal_graphs_built_anew(kinds, examples):
    """Random structures (random ops, shapes, dtypes, shared subexpressions; some differing
    from another in one thing only), examples of them in random order with new data: the kept
    graph's value and gradients are those of a graph built anew, bit for bit."""
    params = {}

    def leaves_for(recipe, x):
        key = (recipe["shapes"], recipe["f64"])
        if key not in params:
            dtype = np.float64 if recipe["f64"] else np.float32
            values = leaf_values(recipe)
            params[key] = [fa.Parameter(values[0], dtype=dtype), fa.Parameter(values[1], dtype=dtype),
                           fa.Parameter(values[3], dtype=dtype)]
        a, b, w = params[key]
        return [a, b, x, w]

    def structure_of(recipe):
        return (tuple(recipe["steps"]), recipe["shapes"], recipe["f64"])

    by_structure = {structure_of(r): r for r in kinds}
    cache = fa.GraphCache(lambda s, x: build(by_structure[s], leaves_for(by_structure[s], x), fa_ops())[1])
    for which, seed in examples:
        recipe = kinds[which % len(kinds)]
        dtype = np.float64 if recipe["f64"] else np.float32
        x = np.random.default_rng(seed).normal(size=3).astype(dtype)
        kept = cache(structure_of(recipe), x)
        kept.backward()
        kept_grads = [None if p.grad is None else p.grad.copy() for p in params[recipe["shapes"], recipe["f64"]]]
        for p in params[recipe["shapes"], recipe["f64"]]:
            p.zero_grad()
        fresh = build(recipe, leaves_for(recipe, fa.Input(x, dtype=dtype)), fa_ops())[1]
        fresh.backward()
        np.testing.assert_array_equal(kept.value, fresh.value)
        for g, p in zip(kept_grads, params[recipe["shapes"], recipe["f64"]]):
            assert (g is None) == (p.grad is None)
            if g is not None:
                np.testing.assert_array_equal(g, p.grad)
            p.zero_grad()


def _tanh_chain(x, w, n):
    h = x
    for _ in range(n):
        h = fa.tanh(h * w)
    return h.sum()


def test_graphs_in_one_gradient_arena_share_its_memory_and_keep_their_own_gradients():
    w = fa.Parameter(np.full(8, 0.5), dtype=np.float64)
    arena = GradientArena()
    short, long = _tanh_chain(fa.Input(np.ones(8), dtype=np.float64), w, 2), _tanh_chain(fa.Input(np.arange(8.0), dtype=np.float64), w, 5)
    assert arena.place(short) is True and arena.nbytes > 0          # the first block
    assert arena.place(long) is True                                 # a larger one
    assert arena.place(short) is False                               # moved into it
    assert arena.nbytes < 12 * 8 * 8 * 2                             # the longer graph's room, not both
    fresh_short, fresh_long = _tanh_chain(fa.Input(np.ones(8), dtype=np.float64), w, 2), _tanh_chain(fa.Input(np.arange(8.0), dtype=np.float64), w, 5)
    for kept, fresh in ((short, fresh_short), (long, fresh_long), (short, fresh_short)):
        w.zero_grad()
        kept.backward()
        got = w.grad.copy()
        w.zero_grad()
        fresh.backward()
        np.testing.assert_array_equal(got, w.grad)
    inner = long.parents[0]
    assert inner.grad is None          # of the long graph's pass: the short one ran since
    long.backward()
    assert inner.grad is not None


def test_a_gradient_arena_refuses_graphs_whose_buffers_it_cannot_own():
    w = fa.Parameter(np.full(4, 0.5), dtype=np.float64)
    arena = GradientArena()
    done = _tanh_chain(fa.Input(np.ones(4), dtype=np.float64), w, 2)
    done.backward()
    assert arena.place(done) is None                                 # has buffers of its own
    shared = fa.tanh(w * 2.0)
    first = (shared * 3.0).sum()
    assert arena.place(first) is True
    assert arena.place((shared * 4.0).sum()) is None                 # would overlap `first`'s
    assert arena.place(first) is None                                # already in the current block


def test_kept_graphs_count_their_shared_gradients_once():
    params = _params()
    cache = fa.GraphCache(lambda lengths, ids, x: _chain(lengths, ids, x, params), max_bytes=1 << 30)
    needs = []
    for lengths, ids, x in _examples(300, seed=7):
        cache(lengths, ids, x).backward()
        alone = GradientArena()                 # the room this example's gradients take
        alone.place(_chain(lengths, fa.IndexInput(ids), fa.Input(x, dtype=np.float64), params))
        needs.append(alone.nbytes)
    roots = [root for root, _, _ in cache._graphs.values()]
    with_gradients = sum(fa.graph_nbytes(root) for root in roots)
    without = sum(fa.graph_nbytes(root, gradients=False) for root in roots)
    assert cache.nbytes == without + cache._arena.nbytes
    assert max(needs) <= cache._arena.nbytes <= 2 * max(needs)     # grown by doubling
    assert len(roots) > 50 and cache.nbytes < without + (with_gradients - without) / 10
