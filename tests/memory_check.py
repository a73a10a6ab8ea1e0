"""Memory check (a script, not a test): replays and graph churn must not grow the process.

    python tests/memory_check.py [--replays 1000000] [--graphs 100000] [--cached 1000000]

1. Builds one small sparse graph (embedding gathers, dot, logsigmoid, a dense
   layer) and replays it `--replays` times: set_value, forward, backward,
   optimizer step, zero_grad. Then the same number of examples through
   `fa.train`. RSS must stay flat after a warm-up.
2. Builds and drops `--graphs` small graphs (eager build + backward) with the
   cyclic garbage collector disabled, so only reference counting frees them;
   then reports what `gc.collect()` finds (reference cycles) and the RSS.

3. Trains on `--cached` examples of random structure (tree-like sums of tanh chains)
   through a fa.GraphCache of 4 MB: the cache's bytes stay within it at every example
   and RSS stays flat once it is full (graphs evicted and built again, forever).

Prints the figures and exits 1 if any check fails.
"""
import argparse
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastad as fa  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
ALLOWED_GROWTH_MB = 2.0


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def live_variables():
    return sum(isinstance(o, fa.Variable) for o in gc.get_objects())


def small_graph(rng):
    users = fa.Parameter(rng.normal(size=(50, 8)), name="users")
    items = fa.Parameter(rng.normal(size=(80, 8)), name="items")
    dense = fa.Parameter(rng.normal(size=(8, 4)), name="dense")
    u, i = fa.IndexInput([0, 1]), fa.IndexInput([2, 3])
    x = fa.Input(np.zeros((2, 8)))
    score = fa.vector_dot(users[u], items[i])
    hidden = fa.tanh((users[u] * x) @ dense).sum()
    loss = -fa.logsigmoid(score).sum() + 0.01 * hidden
    return loss, (users, items, dense), u, i, x


def check_replay(n, rng):
    loss, params, u, i, x = small_graph(rng)
    opt = fa.optim.Adam(params, lr=1e-3)
    uids = rng.integers(0, 50, size=(1024, 2))
    iids = rng.integers(0, 80, size=(1024, 2))
    xs = rng.normal(size=(1024, 2, 8)).astype(np.float32)
    warmup = min(10_000, n)
    samples = []
    for k in range(n):
        j = k & 1023
        u.set_value(uids[j])
        i.set_value(iids[j])
        x.set_value(xs[j])
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if k + 1 == warmup or (k + 1) % (n // 10 or 1) == 0:
            samples.append(rss_mb())
    growth = samples[-1] - samples[0]
    print(f"replay x{n:,}: RSS after warm-up {samples[0]:.1f} MB, at end {samples[-1]:.1f} MB "
          f"(growth {growth:+.2f} MB; samples {', '.join(f'{s:.1f}' for s in samples)})")

    # The compiled loop over the same graph, 1 example per row.
    users_feed = rng.integers(0, 50, size=(n, 2))
    items_feed = rng.integers(0, 80, size=(n, 2))
    x_feed = np.zeros((n, 2, 8), dtype=np.float32)
    before = rss_mb()
    fa.train(loss, opt, {u: users_feed, i: items_feed, x: x_feed})
    fa.train(loss, opt, {u: users_feed, i: items_feed, x: x_feed})
    after_two = rss_mb()
    fa.train(loss, opt, {u: users_feed, i: items_feed, x: x_feed})
    after_three = rss_mb()
    print(f"fa.train x{n:,} three times: RSS {before:.1f} -> {after_two:.1f} -> {after_three:.1f} MB "
          f"(third run {after_three - after_two:+.2f} MB)")
    return growth <= ALLOWED_GROWTH_MB and after_three - after_two <= ALLOWED_GROWTH_MB


def build_and_drop(count, rng):
    for _ in range(count):
        loss, params, u, i, x = small_graph(rng)
        loss.backward()
        params[0].grad          # densify the sparse gradient too
        fa.optim.SGD(params, lr=0.1, momentum=0.9).step()


def check_churn(n, rng):
    build_and_drop(1000, rng)                # warm caches (numpy, module imports)
    gc.collect()
    start_rss, start_vars = rss_mb(), live_variables()
    gc.disable()
    try:
        build_and_drop(n, rng)
        mid_rss = rss_mb()
    finally:
        gc.enable()
    cycles = gc.collect()
    end_rss, end_vars = rss_mb(), live_variables()
    print(f"build+backward+drop x{n:,} (gc disabled): RSS {start_rss:.1f} -> {mid_rss:.1f} MB "
          f"({mid_rss - start_rss:+.2f} MB); gc.collect() then found {cycles} unreachable objects; "
          f"RSS after {end_rss:.1f} MB; live Variables {start_vars} -> {end_vars}")
    return (mid_rss - start_rss <= ALLOWED_GROWTH_MB and end_vars == start_vars
            and cycles == 0)


def cached_structures(params):
    """Graphs of a random structure each: a sum of tanh chains of random lengths over
    embedding rows, a cross-entropy on top; the structure is the lengths."""
    E, U, V = params

    def build(lengths, ids, label):
        emb = fa.embedding(E, ids)
        total = None
        for b, n in enumerate(lengths):
            h = emb[b]
            for _ in range(n):
                h = fa.tanh(h @ U + emb[b])
            total = h if total is None else total + h
        return fa.nn.cross_entropy((total @ V).reshape(1, 3), label)
    return build


def check_graph_cache(n, rng):
    params = (fa.Parameter(rng.normal(size=(20, 16))), fa.Parameter(rng.normal(size=(16, 16)) * 0.3),
              fa.Parameter(rng.normal(size=(16, 3))))
    bound = 4 << 20
    cache = fa.GraphCache(cached_structures(params), max_bytes=bound)
    opt = fa.optim.SGD(params, lr=0.01)
    warmup = min(20_000, n)
    samples, peak = [], 0
    for k in range(n):
        lengths = tuple(int(v) for v in rng.integers(1, 6, size=rng.integers(1, 5)))
        loss = cache(lengths, rng.integers(0, 20, size=len(lengths)), np.array([k % 3]))
        loss.backward()
        opt.step()
        opt.zero_grad()
        peak = max(peak, cache.nbytes)
        if k + 1 == warmup or (k + 1) % (n // 10 or 1) == 0:
            samples.append(rss_mb())
    growth = samples[-1] - samples[0]
    print(f"GraphCache x{n:,} ({len(cache)} graphs kept, {cache.hits:,} hits, {cache.misses:,} builds): "
          f"peak {peak / 2**20:.2f} MB of a {bound / 2**20:.0f} MB bound; RSS after warm-up "
          f"{samples[0]:.1f} MB, at end {samples[-1]:.1f} MB (growth {growth:+.2f} MB; samples "
          f"{', '.join(f'{s:.1f}' for s in samples)})")
    return peak <= bound and growth <= ALLOWED_GROWTH_MB


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=1_000_000)
    parser.add_argument("--graphs", type=int, default=100_000)
    parser.add_argument("--cached", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ok_replay = check_replay(args.replays, rng)
    ok_churn = check_churn(args.graphs, rng)
    ok_cache = check_graph_cache(args.cached, rng)
    ok = ok_replay and ok_churn and ok_cache
    print("OK" if ok else "FAILED: memory grew or graphs were not freed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
