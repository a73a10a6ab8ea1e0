"""fa.hogwild.run(mode="synchronized") and sync_step: lockstep steps on the workers'
summed or averaged gradients, deterministic and equal to one process on the combined
minibatches; a failing or straying worker stops the run, nobody hangs."""
import time

import numpy as np
import pytest

import fastad as fa
from fastad import hogwild
from hogwild_workers import (optimizer_on_a_device, step_two_optimizers, sync_bpr_train,
                             sync_linear_fit, sync_regression)

WORKERS, BATCH, STEPS = 2, 8, 12


def problem(seed=0, rows=20, dim=3, dtype=np.float64):
    r = np.random.default_rng(seed)
    n = WORKERS * BATCH * STEPS
    ids = r.integers(0, rows, n)
    ids[:BATCH] = 5                              # a row repeated inside one minibatch
    X = r.normal(size=(n, dim))
    Y = r.normal(size=n)
    start = {"E": (r.normal(size=(rows, dim)) * 0.1).astype(dtype), "w": r.normal(size=dim).astype(dtype)}
    return ids, X, Y, start


def synchronized(start, ids, X, Y, optimizer="adam", lr=0.05, reduce="mean", start_method="fork",
                 fail_at=None, skip_last=False):
    """Train with 2 synchronized workers; return the final shared (E, w)."""
    with hogwild.share(start) as shared:
        results = hogwild.run(sync_regression, workers=WORKERS,
                              args=(shared, ids, X, Y, WORKERS, BATCH, STEPS, optimizer, lr,
                                    fail_at, skip_last),
                              start_method=start_method, mode="synchronized", reduce=reduce)
        final = shared["E"].numpy().copy(), shared["w"].numpy().copy()
    for E, w in results:                         # every worker ended on the same Parameters
        np.testing.assert_array_equal(E, final[0])
        np.testing.assert_array_equal(w, final[1])
    return final


def one_process(start, ids, X, Y, optimizer="adam", lr=0.05):
    """The same training in this process (sync_step is a plain step here), on the
    combined minibatches."""
    return sync_regression(0, {k: v.copy() for k, v in start.items()}, ids, X, Y, 1,
                           WORKERS * BATCH, STEPS, optimizer, lr)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_synchronized_equals_one_process_on_combined_minibatches(optimizer):
    ids, X, Y, start = problem()
    E, w = synchronized(start, ids, X, Y, optimizer)
    E_ref, w_ref = one_process(start, ids, X, Y, optimizer)
    np.testing.assert_allclose(E, E_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-12)
    assert not np.allclose(E, start["E"])        # it trained
    untouched = np.setdiff1d(np.arange(20), ids)
    np.testing.assert_array_equal(E[untouched], start["E"][untouched])   # sparse rows only


def test_reduce_sum_adds_the_workers_gradients():
    """With plain SGD, summing two workers' mean gradients is the combined mean at twice the lr."""
    ids, X, Y, start = problem(1)
    E, w = synchronized(start, ids, X, Y, "plain_sgd", lr=0.02, reduce="sum")
    E_ref, w_ref = one_process(start, ids, X, Y, "plain_sgd", lr=0.04)
    np.testing.assert_allclose(E, E_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-12)
    E_mean, _ = synchronized(start, ids, X, Y, "plain_sgd", lr=0.02)
    assert not np.allclose(E_mean, E)


def test_same_seed_same_parameters_run_after_run():
    ids, X, Y, start = problem(2, dtype=np.float32)
    first = synchronized(start, ids, X, Y, start_method="spawn")
    second = synchronized(start, ids, X, Y)
    np.testing.assert_array_equal(first[0], second[0])          # bit for bit
    np.testing.assert_array_equal(first[1], second[1])


def test_a_crashed_worker_ends_the_run_and_nobody_waits_at_the_barrier():
    ids, X, Y, start = problem(3)
    began = time.monotonic()
    with pytest.raises(hogwild.WorkerError) as info:
        synchronized(start, ids, X, Y, fail_at=2)
    assert info.value.rank == 1 and info.value.exitcode == 3
    assert time.monotonic() - began < 60         # worker 0, at the barrier, was stopped


def test_workers_taking_different_numbers_of_steps_fail_clearly():
    ids, X, Y, start = problem(4)
    with pytest.raises(hogwild.WorkerError, match=r"fell out of step .*worker 1 finished after 11 steps"):
        synchronized(start, ids, X, Y, skip_last=True)


FORK_IF_ANY = "fork" if "fork" in hogwild.start_methods() else "spawn"


def linear_problem(rows=4_000, seed=5):
    """A noisy linear regression: X (rows, 3), Y = X @ [1, -2, 0.5] + noise."""
    r = np.random.default_rng(seed)
    X = r.normal(size=(rows, 3))
    return X, X @ np.array([1.0, -2.0, 0.5]) + r.normal(scale=0.5, size=rows)


def linear_one_process(X, Y, lr):
    """Plain SGD in one process on the combined minibatches: at step k, the mean gradient
    of the workers' k-th examples (rows k * WORKERS ... + WORKERS)."""
    w = np.zeros(3)
    for k in range(0, len(X), WORKERS):
        x, y = X[k:k + WORKERS], Y[k:k + WORKERS]
        w = w - lr * (2 * (x @ w - y) @ x) / WORKERS
    return w


@pytest.mark.parametrize("loop", ["train", "step"])
def test_every_step_of_a_synchronized_worker_is_a_lockstep_step(loop):
    """Not only sync_step: fa.train's steps and a bare opt.step() in a synchronized worker
    step in lockstep. Six runs give one result, bit for bit, the one-process result on the
    combined minibatches (as Hogwild, they gave several results, none of them that one)."""
    X, Y = linear_problem()
    finals = set()
    for _ in range(6):
        with hogwild.share({"w": np.zeros(3)}) as shared:
            results = hogwild.run(sync_linear_fit, workers=WORKERS,
                                  args=(shared, X, Y, WORKERS, 0.01, loop),
                                  start_method=FORK_IF_ANY, mode="synchronized")
            final = shared["w"].numpy().copy()
        for w in results:                        # every worker ended on the same Parameters
            np.testing.assert_array_equal(w, final)
        finals.add(final.tobytes())
    assert len(finals) == 1
    np.testing.assert_allclose(final, linear_one_process(X, Y, 0.01), rtol=1e-9, atol=1e-12)


def bpr_one_process(start, triples, lr):
    """BPR by plain SGD in one process, on the combined minibatches: at step k, the summed
    loss of the workers' k-th triples (triples k * WORKERS ... + WORKERS)."""
    model = fa.models.BPR(1, 1, U=start["U"], V=start["V"], dtype=np.float64, copy=True)
    loss, feeds = model.example_graph(batch=WORKERS)
    opt = fa.optim.SGD(model.parameters(), lr=lr)
    for k in range(0, len(triples["users"]), WORKERS):
        for leaf, ids in feeds({key: ids[k:k + WORKERS] for key, ids in triples.items()}).items():
            leaf.set_value(ids)
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model.U.value, model.V.value


def test_a_synchronized_fa_train_keeps_its_gradients():
    """fa.train with plain SGD updates the rows of a graph's row gathers inside backward,
    keeping no gradient; in a synchronized worker it keeps them for the exchange: run after
    run the same factors, those of one process on the combined minibatches (reduce="sum":
    the workers' triples of a step, their losses summed)."""
    triples, _ = fa.data.planted_preferences(30, 20, n_train=2_000, n_test=10, rank=4, seed=1)
    r = np.random.default_rng(2)
    start = {"U": r.normal(scale=0.1, size=(30, 4)), "V": r.normal(scale=0.1, size=(20, 4))}
    finals = []
    for _ in range(3):
        with hogwild.share(start) as shared:
            hogwild.run(sync_bpr_train, workers=WORKERS, args=(shared, triples, WORKERS, 0.1),
                        start_method=FORK_IF_ANY, mode="synchronized", reduce="sum")
            finals.append((shared["U"].numpy().copy(), shared["V"].numpy().copy()))
    for U, V in finals[1:]:
        np.testing.assert_array_equal(U, finals[0][0])
        np.testing.assert_array_equal(V, finals[0][1])
    U_ref, V_ref = bpr_one_process(start, triples, 0.1)
    assert not np.allclose(U_ref, start["U"])    # it trained
    np.testing.assert_allclose(finals[0][0], U_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(finals[0][1], V_ref, rtol=1e-9, atol=1e-12)


def test_a_second_optimizer_stepping_in_a_synchronized_worker_fails_clearly():
    with hogwild.share({"w": np.ones(2)}) as shared:
        with pytest.raises(hogwild.WorkerError, match="steps one optimizer; this is another one"):
            hogwild.run(step_two_optimizers, workers=WORKERS, args=(shared,),
                        start_method=FORK_IF_ANY, mode="synchronized")


def test_a_synchronized_worker_refuses_an_optimizer_on_a_device():
    """Its steps would not go through the exchange: the optimizer is refused when made."""
    with pytest.raises(hogwild.WorkerError, match="this works on CPU Parameters"):
        hogwild.run(optimizer_on_a_device, workers=WORKERS, start_method=FORK_IF_ANY,
                    mode="synchronized")


def test_sync_step_outside_a_synchronized_worker_is_a_plain_step():
    w = fa.Parameter(np.ones(2), dtype=np.float64)
    opt = fa.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    hogwild.sync_step(opt)
    np.testing.assert_array_equal(w.value, [0.0, 0.0])
    assert w.grad is None or not w.grad.any()


def test_run_checks_mode_and_reduce():
    with pytest.raises(ValueError, match=r"mode must be one of \['hogwild', 'synchronized'\]"):
        hogwild.run(print, mode="lockstep")
    with pytest.raises(ValueError, match=r"reduce must be one of \['mean', 'sum'\]"):
        hogwild.run(print, mode="synchronized", reduce="max")


def test_gradient_exchange_helpers_check_their_input():
    from fastad.parallel.lockstep import _grad_mode
    p = fa.Parameter(np.zeros((3, 2)), dtype=np.float64)
    assert _grad_mode(p) == "none"
    p._accumulate_grad(np.ones((2, 2)), np.array([2, 2]))
    assert _grad_mode(p) == "sparse"
    p._scale_grad(0.5)
    assert _grad_mode(p) == "sparse"
    np.testing.assert_array_equal(p.grad, [[0, 0], [0, 0], [1, 1]])
    p._accumulate_grad(np.ones((3, 2)))
    assert _grad_mode(p) == "dense"
    np.testing.assert_array_equal(p.grad, [[1, 1], [1, 1], [2, 2]])
    p._scale_grad(0.5)
    np.testing.assert_array_equal(p.grad, [[0.5, 0.5], [0.5, 0.5], [1, 1]])
    p._accumulate_grad(np.ones((1, 2)), np.array([0]))       # rows into a dense gradient
    np.testing.assert_array_equal(p.grad, [[1.5, 1.5], [0.5, 0.5], [1, 1]])
    with pytest.raises(IndexError, match=r"rows must be in \[0, 3\), got 3..3"):
        p._accumulate_grad(np.ones((1, 2)), np.array([3]))
    with pytest.raises(IndexError, match=r"rows must be in \[0, 3\), got -1..-1"):
        p._accumulate_grad(np.ones((1, 2)), np.array([-1]))
    with pytest.raises(ValueError, match=r"rows of shape \(2,\) and values of shape \(1, 2\)"):
        p._accumulate_grad(np.ones((1, 2)), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"values have shape \(2, 2\), expected .*\(3, 2\)"):
        p._accumulate_grad(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"values have shape \(1, 2\), expected .*\(3, 2\)"):
        p._accumulate_grad(np.ones((1, 2)))          # no broadcasting into a dense gradient
    with pytest.raises(TypeError, match="values must be a C-contiguous float64 array, got ndarray float32"):
        p._accumulate_grad(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="C-contiguous"):
        p._accumulate_grad(np.ones((2, 3)).T)
    with pytest.raises(TypeError, match="got list"):
        p._accumulate_grad([[1.0, 1.0]] * 3)
    np.testing.assert_array_equal(p.grad, [[1.5, 1.5], [0.5, 0.5], [1, 1]])   # refused: unchanged
    with pytest.raises(TypeError, match="expected a Parameter"):
        _grad_mode(fa.Input(np.zeros(2)))
    bias = fa.Parameter(np.zeros(3))                     # 1-D: rows of one value
    bias._accumulate_grad(np.ones((2, 1), np.float32), np.array([0, 2]))
    np.testing.assert_array_equal(bias.sparse_rows(), [0, 2])
    np.testing.assert_array_equal(bias.grad, [1, 0, 1])
    bias._scale_grad(3.0)
    np.testing.assert_array_equal(bias.grad, [3, 0, 3])
    fresh = fa.Parameter(np.zeros(2))
    fresh._scale_grad(2.0)                               # no gradient: nothing to scale
    assert _grad_mode(fresh) == "none"
