"""Gradient checks by central finite differences (use float64)."""
import warnings

import numpy as np

from fastad._engine.graph import Parameter, Variable, get_default_dtype, set_default_dtype

__all__ = ["finite_difference", "gradcheck"]


def finite_difference(leaf, output, eps=1e-6):
    """Numerical and analytic gradients of a one-element `output` with respect to `leaf`.

    Returns `(numerical, analytic)`, two arrays of `leaf`'s shape. The
    numerical one perturbs each element of `leaf` by +-eps and replays the
    graph (`output.forward()`); the analytic one comes from
    `output.backward()`. The leaf's accumulated gradient is cleared first and
    its value is restored afterwards; the backward pass also adds into the
    gradients of the other leaves below `output` (clear them if that matters).
    Use float64: in float32, eps = 1e-6 is below the rounding error and the
    numerical gradient is noise (a warning says so).

    >>> w = fa.Parameter(np.random.randn(3), dtype=np.float64)
    >>> num, ana = fa.finite_difference(w, (w * w).sum())
    """
    if output.size != 1:
        raise ValueError(f"finite_difference: the output must have one element, got shape {output.shape}")
    if not isinstance(leaf, Variable) or not leaf.requires_grad:
        raise TypeError("finite_difference: `leaf` must be a Parameter (or an Input made with requires_grad=True)")
    if leaf.dtype != np.float64:
        warnings.warn(f"finite_difference: the leaf is {leaf.dtype}; central differences with "
                      f"eps={eps} need float64 to mean anything", RuntimeWarning, stacklevel=2)
    values = leaf.value
    flat = values.reshape(-1)
    numerical = np.zeros(flat.shape, dtype=np.float64)
    for i in range(flat.size):
        saved = flat[i].item()          # a number: a GPU array's flat[i] is a view
        flat[i] = saved + eps
        up = output.forward().item()
        flat[i] = saved - eps
        down = output.forward().item()
        flat[i] = saved
        numerical[i] = (up - down) / (2 * eps)
    output.forward()
    leaf.zero_grad()
    output.backward()
    grad = leaf.grad
    if grad is None:            # the backward did not reach the leaf
        analytic = np.zeros(values.shape)
    else:
        if leaf.device != "cpu":
            from fastad.cuda.ops import to_host
            grad = to_host(grad)
        analytic = np.array(grad, dtype=np.float64)
    leaf.zero_grad()
    return numerical.reshape(values.shape), analytic


def gradcheck(fn, *arrays, eps=1e-6, atol=1e-5, rtol=1e-4):
    """Check `fn`'s gradients against finite differences.

    `fn(*params)` is called on float64 Parameters made from `arrays` (with
    float64 as the default dtype meanwhile, so constants and layers that `fn`
    makes match) and must return a one-element Variable. Returns True, or raises AssertionError
    naming the input and its worst element.

    >>> fa.gradcheck(lambda a, b: (fa.tanh(a) * b).sum(), np.random.randn(3), np.random.randn(3))
    True
    """
    params = [Parameter(np.asarray(a, dtype=np.float64), dtype=np.float64) for a in arrays]
    previous = get_default_dtype()
    set_default_dtype(np.float64)
    try:
        output = fn(*params)
    finally:
        set_default_dtype(previous)
    if not isinstance(output, Variable):
        raise TypeError(f"gradcheck: fn must return a fastad Variable, got {type(output).__name__}")
    if output.size != 1:
        raise ValueError(f"gradcheck: fn must return a one-element Variable, got shape {output.shape}")
    for k, p in enumerate(params):
        numerical, analytic = finite_difference(p, output, eps)
        err = np.abs(numerical - analytic)
        bad = err > atol + rtol * np.abs(numerical)
        if bad.any():
            worst = np.unravel_index(np.argmax(err - rtol * np.abs(numerical)), err.shape) if err.ndim else ()
            raise AssertionError(
                f"gradcheck: input {k} (shape {p.shape}) element {tuple(int(i) for i in worst)}: "
                f"analytic {analytic[worst]:.8g} vs numerical {numerical[worst]:.8g} "
                f"({int(bad.sum())} of {bad.size} elements differ)")
    return True
