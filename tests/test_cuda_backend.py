"""The CuPy backend's glue, against a stand-in for CuPy (no GPU here): which
kernel it compiles and launches with which grid, how GEMM maps to cuBLAS, how
capture and replay use the stream, and how the backend is chosen."""
import sys
import types

import numpy as np
import pytest

from fastad.cuda import backend, kernels


class FakeFunction:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __call__(self, grid, block, args):
        self.log.append(("launch", self.name, grid, block, args))


class FakeModule:
    def __init__(self, log, code, options, name_expressions):
        log.append(("compile", code, options, tuple(name_expressions)))
        self.log = log

    def get_function(self, name):
        return FakeFunction(self.log, name)


class FakeStream:
    def __init__(self, log, non_blocking=False):
        self.log = log
        log.append(("stream", non_blocking))

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")

    def synchronize(self):
        self.log.append("synchronize")

    def begin_capture(self):
        self.log.append("begin_capture")

    def end_capture(self):
        self.log.append("end_capture")
        log = self.log

        class Graph:
            def launch(self, stream):
                log.append("graph.launch")
        return Graph()

    def wait_event(self, event):
        self.log.append(("wait_event", event))

    def record(self):
        return "event"


def fake_cupy(log, device_count=1):
    cupy = types.ModuleType("cupy")
    cupy.RawModule = lambda code, options, name_expressions: FakeModule(log, code, options,
                                                                        name_expressions)
    cuda = types.SimpleNamespace()
    cuda.Device = lambda: types.SimpleNamespace(id=0, attributes={"MultiProcessorCount": 2})
    cuda.Stream = lambda non_blocking=False: FakeStream(log, non_blocking)
    cuda.get_current_stream = lambda: FakeStream(log)

    def count():
        if isinstance(device_count, Exception):
            raise device_count
        return device_count
    cuda.runtime = types.SimpleNamespace(getDeviceCount=count)
    cupy.cuda = cuda
    cublas = types.ModuleType("cupy.cublas")
    cublas.gemm = lambda ta, tb, a, b, out, alpha, beta: log.append(("gemm", ta, tb, alpha, beta))
    cupy.cublas = cublas
    return cupy


@pytest.fixture
def log(monkeypatch):
    entries = []
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(entries))
    monkeypatch.setitem(sys.modules, "cupy.cublas", sys.modules["cupy"].cublas)
    yield entries
    backend.set_emulation(None)


def test_a_launch_compiles_the_family_once_and_grid_strides(log):
    b = backend.CupyBackend(sys.modules["cupy"])
    x = np.zeros(3, np.float32)
    b.launch("fill", np.float32, 1000, x, np.int64(3), np.float32(1))
    b.launch("fill", np.float64, 10 ** 9, x, np.int64(3), np.float64(1))
    b.launch("fill", np.float32, 0, x)                          # nothing to do: no launch
    compiles = [e for e in log if e[0] == "compile"]
    assert len(compiles) == 1
    _, code, options, names = compiles[0]
    assert code == kernels.program_source("elementwise")
    assert options == kernels.RAWMODULE_OPTIONS
    assert names == tuple(kernels.name_expressions("elementwise"))
    launches = [e for e in log if e[0] == "launch"]
    assert launches[0][1:4] == ("fill<float>", (4,), (256,))
    assert launches[1][1:4] == ("fill<double>", (64,), (256,))    # capped at 32 blocks per SM
    assert len(launches) == 2


def test_gemm_maps_transposes_and_beta_to_cublas(log):
    b = backend.CupyBackend(sys.modules["cupy"])
    a = np.zeros((2, 2), np.float32)
    b.gemm(a, a, a)
    b.gemm(a, a, a, trans_a=True, beta=1.0)
    b.gemm(a, a, a, trans_b=True)
    assert [e[1:] for e in log if e[0] == "gemm"] == [
        ("N", "N", 1.0, 0.0), ("T", "N", 1.0, 1.0), ("N", "T", 1.0, 0.0)]


def test_capture_warms_up_records_then_replays_after_the_callers_work(log):
    b = backend.CupyBackend(sys.modules["cupy"])
    calls = []
    replay = b.capture(lambda: calls.append(len(log)))
    assert len(calls) == 2
    start = log.index("begin_capture")
    assert calls[0] <= start < calls[1] <= log.index("end_capture")   # (log lengths at the calls)
    assert ("stream", True) in log                        # a non-blocking capture stream
    del log[:]
    replay()
    assert [e for e in log if e != ("stream", False)] == [
        ("wait_event", "event"), "graph.launch", "synchronize"]


@pytest.mark.parametrize("count,message", [(0, "no CUDA device"),
                                           (RuntimeError("driver too old"), "driver too old")])
def test_the_backend_says_why_cupy_cannot_be_used(monkeypatch, count, message):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy([], device_count=count))
    backend.set_emulation(False)
    try:
        assert backend.get(required=False) is None
        with pytest.raises(RuntimeError, match=message):
            backend.get(required=True)
    finally:
        backend.set_emulation(None)


def test_cupy_with_a_device_is_chosen(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy([]))
    backend.set_emulation(False)
    try:
        assert backend.get().name == "cupy"
    finally:
        backend.set_emulation(None)


def test_a_device_backend_must_offer_the_whole_interface():
    from fastad.ops.backend import Backend
    with pytest.raises(TypeError, match=r"Partial: a device backend needs canonical_device, .*unary, "):
        type("Partial", (Backend,), {"from_host": None})


def test_fastad_cuda_registers_one_backend_that_composes_the_fused_nodes():
    import fastad.cuda
    from fastad.ops.backend import Backend
    assert isinstance(fastad.cuda._CudaBackend(), Backend)
    for name in ("lstm_cell", "lstm_sequence", "gru_cell", "ranking", "gather_dot",
                 "broadcast_vector_dot"):
        assert getattr(fastad.cuda._CudaBackend, name) is getattr(Backend, name)
