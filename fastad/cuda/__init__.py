"""GPU queries. This release has no GPU path, so there is never a usable device.

fastad's CUDA back end (CuPy kernels, device transfer, CUDA-graph replay) is
not built yet; these functions let portable code ask, as with PyTorch:

>>> device = "cuda" if fa.cuda.is_available() else "cpu"      # "cpu"
"""

__all__ = ["is_available", "device_count"]


def is_available():
    """False: this release of fastad computes on the CPU only."""
    return False


def device_count():
    """0: this release of fastad uses no GPU."""
    return 0
