"""The losses of tests/test_losses_more.py on the device against the CPU: the pointwise
ones run the pointwise-loss kernels, the composed ones the kernels of their parts."""
import numpy as np
import pytest

import fastad as fa
from device_check import check_against_cpu, host
from test_losses_more import BROADCASTS, CASES, IDS, X

DTYPES = [np.float64, np.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_on_the_device_matches_the_cpu(backend, name, reduction, dtype):
    ours, _, arrays = CASES[name]
    # replay moves every leaf a little: keep the probabilities of BCE inside (0, 1)
    replay = not name.startswith("binary_cross_entropy")
    check_against_cpu(lambda *leaves: ours(*leaves, reduction), *arrays, dtype=dtype, replay=replay)


def test_multi_margin_with_an_index_input_on_the_device(backend):
    ix = fa.IndexInput(IDS, device="cuda")
    w = fa.Parameter(X, device="cuda", dtype=np.float64)
    out = fa.nn.multi_margin(w, ix, p=2)
    out.backward()
    ref_w = fa.Parameter(X, dtype=np.float64)
    ref = fa.nn.multi_margin(ref_w, IDS, p=2)
    ref.backward()
    np.testing.assert_allclose(host(out.value), ref.value, rtol=1e-12)
    np.testing.assert_allclose(host(w.grad), ref_w.grad, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(BROADCASTS))
def test_broadcast_pointwise_losses_on_the_device(backend, name):
    ours, _, arrays = BROADCASTS[name]
    check_against_cpu(lambda *leaves: ours(*leaves, "none"), *arrays)
    check_against_cpu(lambda *leaves: ours(*leaves, "mean"), *arrays)
