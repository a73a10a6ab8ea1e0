"""Regressions for memory errors found by running the suite and probes under AddressSanitizer.

Each test used to read freed or NULL memory (or silently corrupt state); the
state arrays are large enough (> numpy's small-buffer cache) that an ASan build
reports a use-after-free if the bug returns.
"""
import numpy as np
import pytest

import fastad as fa


def _loss_of(*params):
    loss = params[0].sum()
    for p in params[1:]:
        loss = loss + (p * p).sum()
    return loss


def _assert_step_raises(optimizer_class, exception, match):
    """optimizer_class([w]) with a gradient on w: step() raises `exception` matching `match`."""
    w = fa.Parameter(np.ones(3))
    opt = optimizer_class([w])
    (w * w).sum().backward()
    with pytest.raises(exception, match=match):
        opt.step()


@pytest.mark.parametrize("make", [
    lambda ps: fa.optim.Adam(ps),
    lambda ps: fa.optim.Adagrad(ps),
    lambda ps: fa.optim.RMSprop(ps, momentum=0.9),
    lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.9),
])
def test_base_init_again_drops_state_pointers(make):
    # Optimizer.__init__ a second time used to drop the state arrays but keep the raw
    # pointers into them: step() then read and wrote freed memory.
    w = fa.Parameter(np.ones(2000))
    v = fa.Parameter(np.ones(2000))
    opt = make([w])
    fa.optim.Optimizer.__init__(opt, [w, v])
    _loss_of(w, v).backward()
    before = w.value.copy()
    with pytest.raises(RuntimeError, match="state was never set up"):
        opt.step()
    np.testing.assert_array_equal(w.value, before)


def test_subclass_that_skips_the_built_in_init_raises_instead_of_crashing():
    # Adam.update used to dereference a NULL state pointer (a segfault).
    class MyAdam(fa.optim.Adam):
        def __init__(self, params):
            fa.optim.Optimizer.__init__(self, params)

    _assert_step_raises(MyAdam, RuntimeError, "MyAdam.step\\(\\).*super\\(\\).__init__")


def test_full_reinit_still_works():
    w = fa.Parameter(np.ones(2000))
    v = fa.Parameter(np.ones(2000))
    opt = fa.optim.Adam([w], lr=0.1)
    opt.__init__([w, v], lr=0.1)
    _loss_of(w, v).backward()
    opt.step()
    assert np.all(w.value < 1) and np.all(v.value < 1)
    assert sorted(k for k in opt.state_dict() if k.startswith("state.")) == [
        "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step",
        "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step"]


def test_bare_optimizer_subclass_still_reports_missing_step():
    class NoStep(fa.optim.Optimizer):
        pass

    _assert_step_raises(NoStep, NotImplementedError, "NoStep does not implement step")


def test_train_refuses_a_parameter_as_feed_key():
    # A Parameter used to be accepted and overwritten with the feed on every example.
    w = fa.Parameter(np.ones((5, 3)))
    x = fa.Input(np.zeros(3))
    loss = (w.sum(axis=0) * x).sum()
    with pytest.raises(TypeError, match="feeds must be keyed by Input or IndexInput leaves, got 'parameter'"):
        fa.train(loss, fa.optim.SGD([w], lr=0.1), {w: np.zeros((2, 5, 3)), x: np.ones((2, 3))})
    np.testing.assert_array_equal(w.value, 1)


@pytest.mark.parametrize("leaf", [lambda: fa.Input(1.0), lambda: fa.IndexInput(0)])
def test_train_refuses_a_scalar_feed(leaf):
    # A scalar used to be taken silently as one example.
    w = fa.Parameter(np.ones(4))
    x = leaf()
    y = w[x] if isinstance(x, fa.IndexInput) else w.sum() * x
    with pytest.raises(ValueError, match=r"is a scalar; expected an array of shape \(N,\) \+ \(\)"):
        fa.train(y.sum(), fa.optim.SGD([w], lr=0.1), {x: 3})


def test_train_0d_leaf_takes_one_value_per_example():
    w = fa.Parameter(np.ones(4), dtype=np.float64)
    x = fa.Input(1.0, dtype=np.float64)
    means = fa.train(w.sum() * x, fa.optim.SGD([w], lr=0.0), {x: np.arange(3.0)})
    assert means == [pytest.approx(4.0)]


def test_long_chain_plan_grows_its_stack():
    # _build_plan grows its position stack past 64 levels with realloc.
    x = fa.Parameter(np.ones(2), dtype=np.float64)
    y = x
    for _ in range(300):
        y = y * 1.0
    loss = y.sum()
    loss.backward()
    loss.forward()
    loss.backward()
    np.testing.assert_array_equal(x.grad, 2.0)
