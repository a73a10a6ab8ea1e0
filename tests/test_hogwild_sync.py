"""fa.hogwild.run(mode="synchronized") and sync_step: lockstep steps on the workers'
summed or averaged gradients, deterministic and equal to one process on the combined
minibatches; a failing or straying worker stops the run, nobody hangs."""
import time

import numpy as np
import pytest

import fastad as fa
from fastad import hogwild
from hogwild_workers import sync_regression

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
