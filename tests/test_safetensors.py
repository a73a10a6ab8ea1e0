"""fa.save / fa.load in the safetensors format: round trips, other tools reading our
files and us reading theirs, and damaged or foreign files."""
import numpy as np
import pytest

import fastad as fa

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def state():
    model = fa.nn.Sequential(fa.nn.Linear(3, 4), fa.nn.Linear(4, 2))
    opt = fa.optim.Adam(model.parameters(), lr=1e-3)
    return model, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
                   "note": "after warm-up", "best": 0.25, "done": False,
                   "counts": np.arange(5, dtype=np.int32), "mask": np.array([True, False])}


def assert_same(a, b):
    assert type(a) is type(b) or isinstance(a, np.ndarray)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def test_round_trip_restores_the_nested_dict(tmp_path):
    model, saved = state()
    fa.save(saved, tmp_path / "ckpt.safetensors")
    loaded = fa.load(tmp_path / "ckpt.safetensors")
    assert_same(saved, loaded)
    model.load_state_dict(loaded["model"])


def test_other_tools_read_the_arrays_under_dotted_names(tmp_path):
    model, saved = state()
    fa.save({"model": saved["model"]}, tmp_path / "m.safetensors")
    theirs = safetensors_numpy.load_file(str(tmp_path / "m.safetensors"))
    assert set(theirs) == {f"model.{k}" for k in saved["model"]}
    for k, v in saved["model"].items():
        assert np.array_equal(theirs[f"model.{k}"], v)
    torch_file = pytest.importorskip("safetensors.torch")
    tensors = torch_file.load_file(str(tmp_path / "m.safetensors"))
    assert all(np.array_equal(tensors[f"model.{k}"].numpy(), v) for k, v in saved["model"].items())


def test_files_written_elsewhere_load_as_flat_dicts(tmp_path):
    arrays = {"encoder.weight": np.ones((2, 3), dtype=np.float32), "step": np.array(7, dtype=np.int64),
              "empty": np.zeros((0, 4), dtype=np.float64)}
    safetensors_numpy.save_file(arrays, str(tmp_path / "x.safetensors"), metadata={"by": "someone"})
    loaded = fa.load(tmp_path / "x.safetensors")
    assert loaded.keys() == arrays.keys()
    for k in arrays:
        assert loaded[k].dtype == arrays[k].dtype and np.array_equal(loaded[k], arrays[k])


def test_damaged_foreign_and_unsupported_files_are_value_errors_naming_the_path(tmp_path):
    _, saved = state()
    path = tmp_path / "c.safetensors"
    fa.save(saved, path)
    raw = path.read_bytes()
    for cut in (4, 20, len(raw) - 3):
        (tmp_path / "cut.safetensors").write_bytes(raw[:cut])
        with pytest.raises(ValueError, match="cut.safetensors"):
            fa.load(tmp_path / "cut.safetensors")
    fa.save(saved, tmp_path / "other.npz")
    (tmp_path / "npz.safetensors").write_bytes((tmp_path / "other.npz").read_bytes())
    with pytest.raises(ValueError, match="npz.safetensors is not a readable safetensors file"):
        fa.load(tmp_path / "npz.safetensors")
    torch = pytest.importorskip("torch")
    torch_file = pytest.importorskip("safetensors.torch")
    torch_file.save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(tmp_path / "bf16.safetensors"))
    with pytest.raises(ValueError, match="tensor 'w' has dtype BF16, which fastad cannot hold"):
        fa.load(tmp_path / "bf16.safetensors")


def test_names_that_collide_once_dotted_are_refused_before_writing(tmp_path):
    with pytest.raises(TypeError, match="both named 'a.b'"):
        fa.save({"a.b": np.zeros(1), "a": {"b": np.ones(1)}}, tmp_path / "x.safetensors")
    assert not list(tmp_path.iterdir())
