"""Pin the BLAS libraries loaded in this process to one thread, and say what they are.

fastad calls scipy's OpenBLAS (scipy.linalg.cython_blas); numpy carries its
own. On a shared 2-core machine a multi-threaded BLAS spins against other
processes and its timings mean little, and PyTorch is pinned to one thread
too (common.torch_or_none), so both sides get one core. threadpoolctl does
the pinning when installed; otherwise the OpenBLAS libraries mapped into this
process are called directly through their exported set_num_threads.
"""
import ctypes

import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's OpenBLAS, the one fastad calls)

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


def _loaded_openblas():
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    return sorted(paths)


def _first(lib, names):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def pin_blas_to_one_thread():
    """Limit every BLAS in this process to one thread; returns a line describing them."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        threadpool_limits(limits=1, user_api="blas")      # stays in force until changed
        infos = [i for i in threadpool_info() if i["user_api"] == "blas"]
        return "; ".join(f"{i['internal_api']} {i['version']} {i.get('architecture', '')} "
                         f"({i['filepath'].rsplit('/', 1)[-1]}): {i['num_threads']} thread(s)"
                         for i in infos) + " [threadpoolctl]"
    found = []
    try:
        paths = _loaded_openblas()
    except OSError:
        paths = []
    for path in paths:
        lib = ctypes.CDLL(path)
        setter, getter = _first(lib, _SETTERS), _first(lib, _GETTERS)
        if setter is None:
            found.append(f"{path.rsplit('/', 1)[-1]}: no set_num_threads, left as it is")
            continue
        setter(ctypes.c_int(1))
        threads = getter() if getter is not None else "?"
        found.append(f"{path.rsplit('/', 1)[-1]}: {threads} thread(s)")
    return "; ".join(found) + " [set through ctypes]" if found else "no OpenBLAS found in this process"
