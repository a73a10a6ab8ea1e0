"""One progress and callback protocol for every trainer, and the bar that draws it.

`fa.train`, `fa.hogwild.run` and every model's `fit` call `progress(done, per_second)`
with the examples done so far in the run (never going back, counting on across epochs,
the last call at the run's total) and `callback(epoch, loss)` after each epoch (epochs
from 1, the epoch's finite mean loss). `fa.progress_bar` behaves like tqdm: redrawn in
place on a terminal, a plain line per update elsewhere, both throttled.

FITS lists every model's fit; a new model joins the parametrised fit tests with one entry.
"""
import io
import math

import numpy as np
import pytest

import fastad as fa
import fastad.progress as progress_module

USERS, ITEMS = 60, 40


@pytest.fixture(scope="module")
def likes():
    return fa.data.planted_interactions(USERS, ITEMS, per_user=6, rank=3, seed=0)


class Heard:
    """A progress and a callback that record what they hear."""

    def __init__(self):
        self.done, self.rates, self.epochs, self.losses = [], [], [], []

    def progress(self, done, per_second):
        self.done.append(done)
        self.rates.append(per_second)

    def callback(self, epoch, loss):
        self.epochs.append(epoch)
        self.losses.append(loss)

    def check_progress(self, total):
        """done never goes back and ends at `total`; every rate is a finite number >= 0."""
        assert self.done, "progress was never called"
        assert all(a <= b for a, b in zip(self.done, self.done[1:])), self.done
        assert self.done[-1] == total
        assert all(math.isfinite(r) and r >= 0 for r in self.rates), self.rates

    def check_callback(self, epochs):
        assert self.epochs == list(range(1, epochs + 1))
        assert all(math.isfinite(loss) for loss in self.losses), self.losses


def bpr_graph():
    rng = np.random.default_rng(0)
    U = fa.Parameter(rng.normal(0, 0.1, (USERS, 4)))
    V = fa.Parameter(rng.normal(0, 0.1, (ITEMS, 4)))
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    loss = fa.ranking_loss(U, u, V, i, j, reduction="sum")
    return loss, fa.optim.SGD([U, V], lr=0.05), (u, i, j)


# ------------------------------------------------------------------ fa.train

@pytest.mark.parametrize("epochs", [1, 3])
@pytest.mark.parametrize("form", ["feeds", "sampler"])
def test_train_counts_on_across_epochs_and_calls_back_after_each(likes, form, epochs):
    loss, opt, (u, i, j) = bpr_graph()
    n = 250
    if form == "feeds":
        triples = fa.data.sample_triples(likes, n, seed=0)
        data = {u: triples["users"], i: triples["pos"], j: triples["neg"]}
    else:
        data = fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=n)
    heard = Heard()
    means = fa.train(loss, opt, data, epochs=epochs, progress=heard.progress, callback=heard.callback,
                     report_every=100)
    heard.check_progress(epochs * n)
    # a report every 100 examples of the run (not of the epoch), and one at its end
    assert heard.done == sorted(set(range(100, epochs * n, 100)) | {epochs * n})
    heard.check_callback(epochs)
    assert heard.losses == means


def test_train_reports_an_empty_run_once_and_calls_back_for_no_epoch(likes):
    loss, opt, (u, i, j) = bpr_graph()
    heard = Heard()
    fa.train(loss, opt, fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=10), epochs=0,
             progress=heard.progress, callback=heard.callback)
    assert heard.done == [0] and heard.epochs == []


def test_train_rate_is_over_the_time_since_the_last_report(likes, monkeypatch):
    # The loop reads the clock only when a report is due: a fake clock advancing one second
    # a read gives each report's rate as the examples since the last one.
    loss, opt, (u, i, j) = bpr_graph()
    ticks = iter(range(1000))
    monkeypatch.setattr("time.monotonic", lambda: float(next(ticks)))
    heard = Heard()
    fa.train(loss, opt, fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=250), epochs=1,
             progress=heard.progress, report_every=100)
    assert heard.done == [100, 200, 250] and heard.rates == [100.0, 100.0, 50.0]
    assert next(ticks) == 4         # one read at the start, one per report: none per example


def test_a_callback_error_stops_train_after_that_epoch(likes):
    loss, opt, (u, i, j) = bpr_graph()
    epochs = []

    def stop(epoch, loss):
        epochs.append(epoch)
        raise RuntimeError("stopped by the callback")

    with pytest.raises(RuntimeError, match="stopped by the callback"):
        fa.train(loss, opt, fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=20), epochs=3,
                 callback=stop)
    assert epochs == [1]
    fa.train(loss, opt, fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=20))   # released


@pytest.mark.parametrize("name, value", [("progress", 5), ("callback", "epoch")])
def test_train_refuses_a_progress_or_callback_that_cannot_be_called(likes, name, value):
    loss, opt, (u, i, j) = bpr_graph()
    with pytest.raises(TypeError, match=rf"train: {name} must be callable or None, got {value!r} "):
        fa.train(loss, opt, fa.data.PairwiseSampler(likes, u, i, j, seed=0, examples=5), **{name: value})


# ------------------------------------------------------------- fa.hogwild.run

def _bpr_worker(rank, shared, likes, epochs):
    U, V = fa.Parameter(shared["U"]), fa.Parameter(shared["V"])
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    loss = fa.ranking_loss(U, u, V, i, j, reduction="sum")
    sampler = fa.data.PairwiseSampler(likes, u, i, j, seed=0, rank=rank, workers=2, examples=300)
    fa.train(loss, fa.optim.SGD([U, V], lr=0.05), sampler, epochs=epochs,
             progress=fa.hogwild.train_progress(), report_every=50)
    return rank


@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_hogwild_run_counts_every_workers_examples_to_the_total(likes, start_method):
    rng = np.random.default_rng(0)
    arrays = {"U": rng.normal(0, 0.1, (USERS, 4)), "V": rng.normal(0, 0.1, (ITEMS, 4))}
    heard = Heard()
    with fa.hogwild.share(arrays) as shared:
        fa.hogwild.run(_bpr_worker, workers=2, args=(shared, likes, 3), start_method=start_method,
                       progress=heard.progress, progress_interval=0.001)
    heard.check_progress(2 * 3 * 300)            # each worker's sampler: 300 examples an epoch


# ------------------------------------------------------------ every model's fit

def fit_bpr(likes, heard, **settings):
    model = fa.models.BPR(USERS, ITEMS, dim=4, seed=1)
    return model, model.fit(likes, epochs=3, seed=0, progress=heard.progress, **settings)


def fit_two_tower(likes, heard, **settings):
    model = fa.models.TwoTower({"id": np.arange(USERS)}, {"id": np.arange(ITEMS), "kind": np.arange(ITEMS) % 3},
                               dim=4, seed=0)
    return model, model.fit(likes, epochs=3, seed=0, progress=heard.progress, **settings)


# (name, fit(likes, heard, **settings) -> (model, what fit returned), the examples of the fit)
def fit_word2vec(likes, heard, workers=1, **settings):
    """CBOW without subsampling, one centre a step: an epoch is every token of a sentence
    of two or more words, whatever the workers."""
    model = fa.models.Word2Vec(dim=4, window=2, negative=2, min_count=1, sample=0, epochs=3, sg=False,
                               workers=workers)
    return model, model.fit(WORD2VEC_CORPUS, progress=heard.progress, batch_size=1, **settings)


WORD2VEC_CORPUS = [[f"w{(7 * k + j) % 23}" for j in range(k % 6 + 2)] for k in range(300)]

FITS = [
    ("BPR", fit_bpr, lambda likes: 3 * likes.nnz),
    ("TwoTower", fit_two_tower, lambda likes: 3 * likes.nnz),
    ("Word2Vec", fit_word2vec, lambda likes: 3 * sum(map(len, WORD2VEC_CORPUS))),
]

RUNS = [
    pytest.param({}, id="one worker"),
    pytest.param({"workers": 2, "start_method": "threads"}, id="two threads"),
    pytest.param({"workers": 2, "start_method": "fork"}, id="two processes"),
]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("per_epoch", [False, True], ids=["epochs together", "a run per epoch"])
@pytest.mark.parametrize("name, fit, total", FITS, ids=[f[0] for f in FITS])
def test_every_fit_follows_the_protocol_and_returns_the_model(likes, name, fit, total, per_epoch, run):
    # Without a callback a fit trains its epochs in one run; with one, a run per epoch: the
    # count goes on across runs either way.
    heard = Heard()
    settings = dict(run, callback=heard.callback) if per_epoch else run
    model, returned = fit(likes, heard, **settings)
    assert returned is model
    heard.check_progress(total(likes))
    if per_epoch:
        heard.check_callback(3)
        assert heard.losses == model.history
    assert len(model.history) == 3 and all(math.isfinite(loss) for loss in model.history)


def test_a_batched_fit_counts_whole_batches_of_examples(likes):
    heard = Heard()
    fa.models.BPR(USERS, ITEMS, dim=4, seed=1).fit(likes, epochs=2, seed=0, batch_size=16,
                                                    samples=100, progress=heard.progress)
    heard.check_progress(2 * 7 * 16)          # 100 triples an epoch in 7 batches of 16


# ------------------------------------------------------------------ the bar

class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    """time.monotonic for fastad.progress, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress_module, "time", fake)
    return fake


def test_the_bar_redraws_one_line_on_a_terminal_ten_times_a_second_at_most(clock):
    out = Terminal()
    bar = fa.progress_bar(100, desc="BPR", stream=out, width=10)
    bar(10, 500.0)                       # the first update is drawn
    clock.now += 0.05
    bar(20, 600.0)                       # within 0.1 s: held back
    clock.now += 0.06
    bar(50, 1234.0)
    assert out.getvalue().count("\r") == 2 and "\n" not in out.getvalue()
    assert "BPR: [#####.....]" in out.getvalue() and "1,234 examples/s" in out.getvalue()
    clock.now += 0.01
    bar(100, 2000.0)                     # reaching the total always draws, and ends the line
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and "[##########]" in text


def test_a_terminal_line_is_padded_over_a_longer_one_and_ended_by_close(clock):
    out = Terminal()
    bar = fa.progress_bar(stream=out, min_interval=0)
    bar(5, 123_456_789.0)
    bar(6, 1.0)
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) == len(first) and "6 examples" in second and "[" not in second
    bar.close()
    assert out.getvalue().endswith("\n")


def test_elsewhere_the_bar_writes_a_plain_line_every_few_seconds(clock):
    out = io.StringIO()                  # not a terminal
    bar = fa.progress_bar(1000, stream=out, width=10)
    for done in range(100, 1000, 100):   # nine updates a second apart
        bar(done, 100.0)
        clock.now += 1
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 2 and "100/1,000" in lines[0] and "600/1,000" in lines[1]
    bar.close()                          # the update held back (900) gets its line
    bar.close()
    held = out.getvalue().splitlines()[2:]
    assert len(held) == 1 and held[0].startswith("  [#########.]         900/1,000 examples")
    bar(1000, 100.0)
    assert out.getvalue().splitlines()[-1].startswith("  [##########]  ")


def test_rare_updates_each_get_their_line(clock):
    out = io.StringIO()
    bar = fa.progress_bar(stream=out)
    for done in (10, 20, 30):
        bar(done, 5.0)
        clock.now += progress_module.LOG_INTERVAL
    assert [line.split()[0] for line in out.getvalue().splitlines()] == ["10", "20", "30"]


def test_the_bar_is_the_hogwild_one_and_adapts_to_a_tqdm_style_bar():
    assert fa.hogwild.progress_bar is fa.progress_bar

    class TqdmLike:                      # tqdm's n and update(k), as the docs' one line uses them
        def __init__(self):
            self.n = 0

        def update(self, k):
            self.n += k

    bar, heard = TqdmLike(), Heard()
    heard.progress = lambda done, per_second: bar.update(done - bar.n)
    fa.models.BPR(USERS, ITEMS, dim=4).fit(fa.data.planted_interactions(USERS, ITEMS, per_user=6),
                                           epochs=2, workers=2, start_method="threads",
                                           progress=heard.progress)
    assert bar.n == 2 * USERS * 6


@pytest.mark.parametrize("settings, error, message", [
    ({"total": 0}, ValueError, r"progress_bar: total must be >= 1, got 0"),
    ({"total": 2.5}, TypeError, r"progress_bar: total must be an int, got 2.5"),
    ({"desc": 3}, TypeError, r"progress_bar: desc must be a str or None, got 3 \(int\)"),
    ({"stream": object()}, TypeError, r"progress_bar: stream must be a text stream .* got object"),
    ({"width": 0}, ValueError, r"progress_bar: width must be >= 1, got 0"),
    ({"min_interval": -1}, ValueError, r"progress_bar: min_interval must be a finite number >= 0, got -1"),
])
def test_the_bar_names_a_bad_argument(settings, error, message):
    with pytest.raises(error, match=message):
        fa.progress_bar(**settings)
