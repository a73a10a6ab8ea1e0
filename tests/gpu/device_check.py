"""Helpers of the device tests: `host`, `tolerance`, and `check_against_cpu`, which
builds one graph on the CPU and on the device from the same arrays and requires
the same values and gradients, also after a replay."""
import numpy as np

import fastad as fa
from fastad.cuda import backend as cuda_backend


def host(x):
    """A device or host array, or a Variable's value, as a numpy array."""
    value = getattr(x, "value", x)
    return value if isinstance(value, np.ndarray) else cuda_backend.get().to_host(value)


def tolerance(dtype):
    return dict(rtol=1e-10, atol=1e-12) if np.dtype(dtype) == np.float64 else dict(rtol=2e-5, atol=2e-6)


def check_against_cpu(build, *arrays, dtype=np.float64, replay=True, rng=None):
    """`build(*leaves)` returns a Variable; each array becomes a Parameter on the CPU
    and on "cuda". Compares the values and every leaf's gradient for a random
    seed gradient, then (with `replay`) new leaf values, forward() and a second
    backward, which accumulates. Returns the device output."""
    rng = rng or np.random.default_rng(0)
    cpu = [fa.Parameter(a, dtype=dtype) for a in arrays]
    dev = [fa.Parameter(a, dtype=dtype, device="cuda") for a in arrays]
    y_cpu, y_dev = build(*cpu), build(*dev)
    assert y_dev.device == "cuda:0"
    assert y_dev.shape == y_cpu.shape and y_dev.dtype == y_cpu.dtype
    tol = tolerance(dtype)
    np.testing.assert_allclose(host(y_dev), y_cpu.value, **tol, err_msg="forward")
    passes = 2 if replay else 1
    for k in range(passes):
        if k:
            for c, d, a in zip(cpu, dev, arrays):
                new = np.asarray(a) + rng.standard_normal(np.shape(a)) * 0.1
                c.set_value(new)
                d.set_value(new)
            y_cpu.forward()
            y_dev.forward()
            np.testing.assert_allclose(host(y_dev), y_cpu.value, **tol, err_msg="replayed forward")
        seed = rng.standard_normal(y_cpu.shape)
        if y_cpu.requires_grad:
            y_cpu.backward(seed)
            y_dev.backward(seed)
            for i, (c, d) in enumerate(zip(cpu, dev)):
                if c.grad is None:          # no gradient reached the leaf
                    assert d.grad is None, f"gradient of leaf {i}, pass {k}"
                    continue
                np.testing.assert_allclose(host(d.grad), c.grad, **tol,
                                           err_msg=f"gradient of leaf {i}, pass {k}")
    return y_dev
