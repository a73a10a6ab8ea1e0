"""bench/run.py's report: the table, the speed-up targets and the PNG chart, on fake rows.

No benchmark runs here: the rows are made up.
"""
import importlib.util
import os
import sys

import pytest

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "run.py")


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("bench_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROWS = [
    {"workload": "scalar graph replay, 10000 nodes (fwd+bwd)", "unit": "node", "fastad": 2e-8,
     "torch": 4e-6, "target": "<= 100 ns/node, >= 50x torch eager"},
    {"workload": "MLP 784-128-10 train step, batch 32", "unit": "step", "fastad": 2e-4,
     "torch": 1.6e-4, "target": "no slower than PyTorch (speed-up >= 1)"},
    {"workload": "BPR Hogwild, 2 workers", "unit": "example", "fastad": 5e-7, "torch": 2e-5,
     "scaling": 1.9, "target": ">= 1.8x one worker"},
    {"workload": "BPR k=32 per-example sparse SGD, fa.train (compiled loop)", "unit": "example",
     "fastad": 6e-7, "torch": None, "target": ">= 1,000,000 examples/s on one core"},
    {"workload": "BPR k=32, 1 thread(s), vs implicit", "unit": "sample", "fastad": 4e-7, "peer": 3e-7,
     "peer_name": "implicit", "target": ">= 1.0x implicit, AUC no worse"},
]


def test_table_has_a_row_per_workload_with_its_speedup(run):
    lines = run.table(ROWS).splitlines()
    assert len(lines) == 2 + len(ROWS)
    assert "| 200.0x |" in lines[2] and "| 0.80x |" in lines[3] and "| 40.0x |" in lines[4]
    assert "(1.90x one worker)" in lines[4]
    assert "| - | - |" in lines[5]                      # no PyTorch figure, no speed-up
    assert "| implicit: 300.0 ns/sample" in lines[6] and "| 0.75x |" in lines[6]   # a peer row


@pytest.mark.parametrize("target, ratio", [
    ("<= 100 ns/node, >= 50x torch eager", 50.0),
    (">= 4x torch eager", 4.0),
    (">= 10x faster than PyTorch LSTMCell loop", 10.0),
    (">= 5x faster than PyTorch", 5.0),
    (">= 0.8x PyTorch CUDA throughput", 0.8),
    (">= 5x faster than PyTorch CUDA eager", 5.0),
    ("no slower than PyTorch (speed-up >= 1)", 1.0),
    (">= 1.8x one worker", None),
    (">= 1,000,000 examples/s on one core", None),
    ("same model quality as Hogwild", None),
    ("-", None),
])
def test_speedup_target_reads_only_ratios_over_pytorch(run, target, ratio):
    assert run.speedup_target(target) == ratio


def test_chart_is_a_png_with_one_bar_per_row_with_a_comparator(run, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    drawn = []
    save = Figure.savefig

    def keep(fig, *args, **kwargs):
        drawn.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    path = tmp_path / "speedups.png"
    assert run.write_chart(ROWS, str(path)) == f"Chart: {path}"
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    ax = drawn[0].axes[0]
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_yticklabels()] == [r["workload"] for r in ROWS[:3] + ROWS[4:]]
    bar_ends = sorted(round(p.get_x() + p.get_width(), 6) for p in ax.patches)
    assert bar_ends == [0.75, 0.8, 40.0, 200.0]
    targets = ax.collections[0].get_offsets()           # the Hogwild scaling target is not a ratio
    assert [tuple(map(float, t)) for t in targets] == [(50.0, 0.0), (1.0, 1.0)]


def test_chart_says_why_when_there_is_nothing_to_draw(run, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "speedups.png"
    message = run.write_chart(ROWS[3:4], str(path))
    assert message.startswith("No chart: no workload has a PyTorch or peer figure")
    assert not path.exists()


def test_chart_without_matplotlib_says_so_and_writes_nothing(run, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)         # makes `import matplotlib` fail
    path = tmp_path / "speedups.png"
    message = run.write_chart(ROWS, str(path))
    assert message.startswith("No chart: matplotlib is not installed")
    assert not path.exists()


def test_the_gpu_benchmark_says_why_it_skips_and_runs_on_the_emulator():
    """Without a GPU, bench/run.py skips bench/gpu.py with its reason; the benchmark's
    code paths (fastad replay, capture, rows) still run on the kernel emulator."""
    import subprocess
    bench = os.path.dirname(RUN_PY)
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(bench, "gpu.py"))
    gpu = importlib.util.module_from_spec(spec)
    sys.path.insert(0, bench)
    try:
        spec.loader.exec_module(gpu)
    finally:
        sys.path.remove(bench)
    from fastad.cuda import backend
    if backend.get(required=False) is None:
        assert "no GPU" in gpu.skip_reason()
    import fastad
    same_fastad = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(fastad.__file__))}
    out = subprocess.run([sys.executable, os.path.join(bench, "gpu.py"), "--emulate", "--width", "16",
                          "--batch", "2", "--quick"], capture_output=True, text=True, check=True,
                         env=same_fastad)
    assert out.stdout.count("ns/step") == 3, out.stdout


def test_a_timed_epoch_runs_the_cyclic_collector_before_its_clock_starts(monkeypatch):
    from bench_modules import bench_module
    common = bench_module("common")
    events = []
    monkeypatch.setattr(common.gc, "collect", lambda: events.append("collect"))
    real_clock = common.time.perf_counter
    monkeypatch.setattr(common.time, "perf_counter", lambda: events.append("clock") or real_clock())
    rate, mean = common.timed_epoch(lambda example: example * 2.0, [1.0, 2.0, 3.0])
    assert events == ["collect", "clock", "clock"] and mean == 4.0 and rate > 0
