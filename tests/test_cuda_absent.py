"""Without a usable GPU (and without the emulator), fastad imports, works on the
CPU, and every GPU request fails with an error that says what is missing."""
import subprocess
import sys

import numpy as np
import pytest
from skip_policy import HAS_GPU

import fastad as fa
from fastad.cuda import backend


@pytest.fixture
def real_devices_only():
    backend.set_emulation(False)
    if backend.get(required=False) is not None:
        pytest.skip(f"{HAS_GPU}: these check the errors raised without one")
    yield
    backend.set_emulation(None)


def test_import_touches_no_gpu():
    code = ("import sys, fastad, fastad.cuda; "
            "assert 'cupy' not in sys.modules, 'cupy imported at package import'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_queries_say_no_gpu(real_devices_only):
    assert fa.cuda.is_available() is False
    assert fa.cuda.device_count() == 0


@pytest.mark.parametrize("make", [
    lambda: fa.Parameter(np.ones(2), device="cuda"),
    lambda: fa.Input(np.ones(2), device="cuda:0"),
    lambda: fa.IndexInput([1], device="cuda"),
    lambda: fa.Parameter(np.ones(2)).to("cuda"),
    lambda: fa.cuda.capture(lambda: None),
    lambda: fa.models.BPR(2, 3).fit(fa.data.planted_interactions(2, 3, per_user=1), device="cuda"),
    lambda: fa.models.Word2Vec(min_count=1).fit([["a", "b"]], device="cuda"),
])
def test_gpu_requests_raise_saying_what_is_missing(real_devices_only, make):
    with pytest.raises(RuntimeError, match="needs CuPy|no usable CUDA device|no CUDA device"):
        make()


def test_cpu_work_is_unaffected(real_devices_only):
    w = fa.Parameter(np.ones(3), device="cpu")
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad, [2.0, 2.0, 2.0])


def test_the_installed_package_ships_every_kernel_source():
    from fastad.cuda import kernels
    folder = kernels.source_dir()
    for family in kernels.FAMILIES:
        assert (folder / f"{family}.cu").is_file(), f"{family}.cu missing from {folder}"
    assert (folder / "common.cuh").is_file() and (folder / "emulation.h").is_file()
