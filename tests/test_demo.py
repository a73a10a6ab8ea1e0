"""The `python -m fastad` demo and bench's PyTorch BPR comparator (the progress bar: test_progress_protocol.py)."""
import importlib.util
import os

import pytest

import fastad as fa
from fastad.__main__ import main as demo_main


def test_demo_trains_and_reports(capsys):
    demo_main(["--workers", "2", "--examples", "600000"])
    out = capsys.readouterr().out
    assert "2 Hogwild worker(s)" in out and "examples/s" in out

    def before_and_after(label):
        return [float(x) for x in out.split(label)[1].split("(")[0].split("->")]

    auc_before, auc_after = before_and_after("test AUC")
    precision_before, precision_after = before_and_after("precision@10")
    assert auc_after > auc_before + 0.2
    assert precision_after > 5 * max(precision_before, 0.005)


def test_demo_help_names_only_what_runs_from_an_installed_package(capsys):
    with pytest.raises(SystemExit) as exit_:
        demo_main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--workers" in out and "--examples" in out
    assert "examples/" not in out and "bench/" not in out      # files of a clone, not of the package


def test_demo_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        demo_main(["--workers", "0"])


def test_torch_bpr_comparator_runs():
    pytest.importorskip("torch")
    train, _ = fa.data.planted_preferences(50, 40, n_train=300, n_test=1)
    path = os.path.join(os.path.dirname(__file__), "..", "bench", "torch_bpr.py")
    spec = importlib.util.spec_from_file_location("torch_bpr", path)
    torch_bpr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(torch_bpr)
    assert torch_bpr.torch_examples_per_second(train, 50, 40, dim=8, n=200) > 0
