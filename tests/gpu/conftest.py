"""Device tests run twice where they can: on the CPU emulator of the kernels
(always, given g++), and on a real GPU through CuPy (skipped, with the reason,
where CuPy sees no GPU). Ask for the `backend` fixture, then build leaves with
device="cuda". FASTAD_DEVICE_TESTS=gpu (or =emulator) runs one of the two only
(bench/gpu_check.sh runs the GPU ones)."""
import os
import shutil

import pytest
from skip_policy import NO_GPU

from fastad.cuda import backend as cuda_backend


def _gpu_skip_reason():
    cuda_backend.set_emulation(False)
    try:
        cuda_backend.get(required=True)
    except RuntimeError as e:
        return str(e)
    finally:
        cuda_backend.set_emulation(None)
    return None


BACKENDS = os.environ.get("FASTAD_DEVICE_TESTS", "emulator,gpu").split(",")


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The device backend under test; restores the environment's choice afterwards."""
    if request.param == "emulator":
        if shutil.which("g++") is None:
            pytest.skip("the kernel emulator needs g++")
        cuda_backend.set_emulation(True)
    else:
        reason = _gpu_skip_reason()
        if reason is not None:
            pytest.skip(f"{NO_GPU}: {reason}")
        cuda_backend.set_emulation(False)
    try:
        yield cuda_backend.get()
    finally:
        cuda_backend.set_emulation(None)
