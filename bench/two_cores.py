"""What a second core gives on this machine, beside what fastad's threads get from it.

Two Hogwild threads of `BPR.fit` can gain at most what the machine gives two
copies of the same loop that share nothing. This measures both, alternated in
rounds, each fit in a fresh child process (the same data, k=32, 10 epochs, the
settings of bench/implicit_bpr.py):

- alone: one fit in one process, one thread;
- ceiling: two such fits at once in two processes (no GIL, no shared weights,
  nothing in common but the machine), started together; the ceiling is
  2 x alone / (the time until both are done);
- a model each: two one-thread fits at once in two threads of one process, each on
  a model of its own (nothing shared but the process and its allocator);
- threads: one fit with `workers=2, start_method="threads"` (one model, its
  weights shared lock-free by two threads), against one fit with one thread.

implicit's BPR (when installed) is measured the same way (`num_threads=1` and 2),
for reading beside fastad's figures.

A "model each" figure close to the ceiling says the engine costs nothing of its
own when it runs in two threads (no lock, no GIL, no engine global written by
both); the threads figure below it is what sharing one model's rows costs (a row
that both threads update moves between the cores); what is left below 2x in the
ceiling is the machine's (two vCPUs that slow each other down: a shared memory
system, a lower clock with both busy, other tenants).

Skip-gram (`fa.models.Word2Vec` beside gensim's when installed, the settings of
bench/peers.py) is timed in this process, training alone: each library's `train()`
after `build_vocab()` (both read and encode the corpus as they train), with one thread
and with two on one model, alternated in rounds. The vocabulary pass that both run
first holds the GIL, so it is left out.

Run: python bench/two_cores.py [--quick]
"""
import multiprocessing
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402

import fastad as fa  # noqa: E402

BATCHES = (1, 16)       # triples a step, as bench/implicit_bpr.py runs BPR.fit


def _fit(train, workers, epochs, seed, batch):
    """One fit: fastad's BPR.fit at `batch` triples a step, or implicit's (batch None)."""
    import implicit_bpr
    if batch is None:
        return implicit_bpr.fit_implicit(train, workers, epochs, seed)
    return implicit_bpr.fit_fastad(train, workers, epochs, seed, batch_size=batch)


def _fit_seconds(train, epochs, batch, workers, models, barrier, results):
    """In a child: wait for the others, then time one fit with `workers` threads, or
    (models 2) two one-thread fits at once in two threads, a model each."""
    from blas_threads import pin_blas_to_one_thread
    pin_blas_to_one_thread()
    _fit(train, workers, 1, 1, batch)           # first-call costs
    barrier.wait()
    start = time.perf_counter()
    if models == 1:
        _fit(train, workers, epochs, 0, batch)
    else:
        fits = [threading.Thread(target=_fit, args=(train, 1, epochs, seed, batch)) for seed in range(models)]
        for fit in fits:
            fit.start()
        for fit in fits:
            fit.join()
    results.put(time.perf_counter() - start)


def _at_once(train, epochs, batch, workers, copies, models=1):
    """Seconds until `copies` child processes, started together, have each done one fit with
    `workers` threads (or `models` one-thread fits in threads at once)."""
    # spawn, not fork: a child forked after this process ran implicit's OpenMP threads
    # (bench/run.py runs peers.py first) would hang in its first parallel region.
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(copies), context.Queue()
    children = [context.Process(target=_fit_seconds,
                                args=(train, epochs, batch, workers, models, barrier, results))
                for _ in range(copies)]
    for child in children:
        child.start()
    seconds = max(results.get() for _ in children)
    for child in children:
        child.join()
        if child.exitcode:
            raise RuntimeError(f"a benchmark child exited with code {child.exitcode}")
    return seconds


def measure(quick=False, rounds=None):
    """{batch: median seconds of one fit "alone", of "two_processes" at once, of two fits in
    threads at once "a_model_each", and of one fit with "one_thread" and "two_threads", and
    the fit's "samples"}, the five alternated; batch None is implicit's fit, when implicit is
    installed."""
    import implicit_bpr
    users, items, per_user, epochs = implicit_bpr.sizes()
    train, _ = implicit_bpr.training_likes(users, items, per_user)
    rounds = rounds or (2 if quick else 5)
    out = {}
    for batch in BATCHES + ((None,) if implicit_bpr.skip_reason() is None else ()):
        runs = {"alone": (1, 1, 1), "two_processes": (1, 2, 1), "a_model_each": (1, 1, 2),
                "one_thread": (1, 1, 1), "two_threads": (2, 1, 1)}     # (workers, copies, models)
        times = {name: [] for name in runs}
        for _ in range(rounds):
            for name, (workers, copies, models) in runs.items():
                times[name].append(_at_once(train, epochs, batch, workers, copies, models))
        out[batch] = {name: statistics.median(t) for name, t in times.items()}
        out[batch]["samples"] = epochs * train.nnz
    return out


def run(quick=False):
    import implicit_bpr
    reason = implicit_bpr.skip_reason()
    if reason:
        print(f"implicit's side skipped: {reason}")
    rows = []
    for batch, m in measure(quick).items():
        ceiling = 2 * m["alone"] / m["two_processes"]
        model_each = 2 * m["alone"] / m["a_model_each"]
        threads = m["one_thread"] / m["two_threads"]
        fit = f"BPR.fit, {batch} triple(s) a step" if batch else "implicit's BPR"
        print(f"{fit}: two processes at once {ceiling:.2f}x one (the machine's ceiling), two "
              f"threads with a model each {model_each:.2f}x, two threads on one model {threads:.2f}x "
              f"one thread ({threads / ceiling:.0%} of the ceiling)")
        if batch is None:       # the peer's figures are for reading beside fastad's, not rows
            continue
        rows += [
            {"workload": f"BPR.fit k=32, {batch} triple(s) a step: two fits at once in two processes "
                         f"(nothing shared), the machine's two-core ceiling",
             "unit": "sample", "fastad": m["two_processes"] / (2 * m["samples"]), "scaling": ceiling,
             "target": "- (what the machine gives)"},
            {"workload": f"BPR.fit k=32, {batch} triple(s) a step: two fits at once in two threads "
                         f"of one process, a model each (what the engine costs in threads)",
             "unit": "sample", "fastad": m["a_model_each"] / (2 * m["samples"]), "scaling": model_each,
             "target": "- (the ceiling, if the engine costs nothing)"},
            {"workload": f"BPR.fit k=32, {batch} triple(s) a step: two Hogwild threads on one model "
                         f"({threads / ceiling:.0%} of the two-core ceiling)",
             "unit": "sample", "fastad": m["two_threads"] / m["samples"], "scaling": threads,
             "target": ">= 1.9x one thread"}]
    return rows + sgns_rows(quick)


def _sgns_training_seconds(sentences, threads, gensim=False):
    """Seconds of one skip-gram epoch's training (bench/peers.py's settings; the vocabulary
    pass before it left out) with `threads` threads on one model: fastad's Word2Vec.train
    after build_vocab(), as gensim's."""
    import peers
    if gensim:
        model = peers.gensim_sgns(threads)
        model.build_vocab(sentences)
        start = time.perf_counter()
        model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
        return time.perf_counter() - start
    model = peers.fastad_sgns(threads)
    model.build_vocab(sentences)
    start = time.perf_counter()
    model.train(sentences, total_words=model.corpus_total_words, start_method="threads", batch_size=1)
    return time.perf_counter() - start


def sgns_rows(quick):
    """What a second thread gives skip-gram training on one model, fastad's and (when
    installed) gensim's, alternated in rounds in this process; the full text even when
    quick, as for BPR."""
    import peers
    try:
        import gensim  # noqa: F401
        libraries = (False, True)
    except ImportError as e:
        print(f"gensim's skip-gram side skipped: gensim is not installed ({e})")
        libraries = (False,)
    sentences, _ = peers.split_text(peers.stdlib_text(1_000_000))
    vocabulary = fa.models.Word2Vec(min_count=peers.SGNS["min_count"]).build_vocab(sentences)
    pairs = peers.pairs_per_epoch(*peers.encode(sentences, vocabulary.index))
    times = {(library, threads): [] for library in libraries for threads in (1, 2)}
    for _ in range(2 if quick else 5):
        for library, threads in times:
            times[(library, threads)].append(_sgns_training_seconds(sentences, threads, library))
    m = {key: statistics.median(t) for key, t in times.items()}
    scaling = {library: m[(library, 1)] / m[(library, 2)] for library in libraries}
    print(f"skip-gram training, two threads on one model: fastad {scaling[False]:.2f}x one thread"
          + (f", gensim {scaling[True]:.2f}x" if True in scaling else ""))
    return [{"workload": "Word2Vec skip-gram dim 64, 1 pair a step, training alone: two Hogwild threads "
                         "on one model" + (f" (gensim's two threads: {scaling[True]:.2f}x its one)"
                                           if True in scaling else ""),
             "unit": "pair", "fastad": m[(False, 2)] / pairs, "scaling": scaling[False],
             "target": ">= 1.9x one thread"}]


if __name__ == "__main__":
    cli(run, __doc__)
