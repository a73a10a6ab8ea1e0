"""Checkpoints (fastad.io.save / load): round trips, atomic writes, damaged files."""
import os
import pathlib
import re

import numpy as np
import pytest

import fastad as fa
from fastad import io, nn, optim


def sample_tree():
    return {
        "model": {"0.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
                  "0.bias": np.zeros(0, dtype=np.float64),
                  "scalar": np.array(2.5)},
        "optimizer": {"lr": 0.01, "nesterov": True, "state.0.step": 7,
                      "state.0.momentum_buffer": np.ones((2, 3))},
        "epoch": np.int64(3),
        "loss": np.float32(0.25),
        "note": "run 1 / ünïcode",
        "flags": np.array([True, False]),
        "ids": np.array([[1, 2], [3, 4]], dtype=np.int32),
        "empty": {},
    }


def assert_same_tree(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            assert_same_tree(a[key], b[key])
        elif isinstance(a[key], np.ndarray):
            assert isinstance(b[key], np.ndarray)
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape
            np.testing.assert_array_equal(a[key], b[key])
        else:
            assert b[key] == a[key]


def test_round_trip(tmp_path):
    path = tmp_path / "ckpt.npz"
    io.save(sample_tree(), path)
    loaded = io.load(path)
    assert_same_tree(sample_tree(), loaded)
    assert type(loaded["epoch"]) is int and loaded["epoch"] == 3
    assert type(loaded["loss"]) is float and loaded["loss"] == 0.25
    assert type(loaded["optimizer"]["nesterov"]) is bool
    assert type(loaded["note"]) is str


def test_file_is_a_plain_npz_with_flattened_keys(tmp_path):
    path = tmp_path / "ckpt.npz"
    io.save(sample_tree(), str(path))
    with np.load(path, allow_pickle=False) as npz:
        assert "model/0.weight" in npz.files and "optimizer/state.0.step" in npz.files
        np.testing.assert_array_equal(npz["model/0.weight"], sample_tree()["model"]["0.weight"])


def test_path_is_used_as_given(tmp_path):
    path = tmp_path / "checkpoint.bin"
    io.save({"a": 1}, path)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.bin"]
    assert io.load(str(path)) == {"a": 1}


def test_overwrite_replaces_the_old_checkpoint(tmp_path):
    path = tmp_path / "ckpt.npz"
    io.save({"step": 1}, path)
    io.save({"step": 2, "w": np.ones(3)}, path)
    assert io.load(path)["step"] == 2
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]


@pytest.mark.parametrize("failing", ["savez", "fsync", "replace"])
def test_interrupted_save_leaves_the_old_checkpoint(tmp_path, monkeypatch, failing):
    path = tmp_path / "ckpt.npz"
    io.save({"step": 1, "w": np.arange(4.0)}, path)

    def half_written_then_crash(f, **arrays):
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    def crash(*args, **kwargs):
        raise OSError("disk full")

    if failing == "savez":
        monkeypatch.setattr(io.np, "savez", half_written_then_crash)
    else:
        monkeypatch.setattr(io.os, failing, crash)
    with pytest.raises(OSError, match="disk full"):
        io.save({"step": 2, "w": np.zeros(1000)}, path)
    monkeypatch.undo()
    old = io.load(path)
    assert old["step"] == 1
    np.testing.assert_array_equal(old["w"], np.arange(4.0))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]      # no temporary file left


def test_unsupported_values_fail_before_writing(tmp_path):
    path = tmp_path / "ckpt.npz"
    io.save({"step": 1}, path)
    bad = [
        ({"a": None}, TypeError, "'a' is a NoneType"),
        ({"a": [1, 2]}, TypeError, "'a' is a list"),
        ({"m": {"w": np.array([object()])}}, TypeError, "'m/w'.*object"),
        ({"m": {"x/y": 1}}, TypeError, "without '/'"),
        ({3: 1}, TypeError, "strings"),
        ({"__fastad__": 1}, ValueError, "reserved"),
    ]
    for obj, error, message in bad:
        with pytest.raises(error, match=message):
            io.save(obj, path)
    with pytest.raises(TypeError, match="expected a dict"):
        io.save([1, 2], path)
    assert io.load(path) == {"step": 1}
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]


def test_truncated_file_raises_value_error_naming_the_path(tmp_path):
    path = tmp_path / "ckpt.npz"
    io.save(sample_tree(), path)
    data = path.read_bytes()
    for cut in (len(data) // 2, 30, 0):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=str(path)):
            io.load(path)


def test_foreign_files_raise_value_error(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(os.urandom(200))
    with pytest.raises(ValueError, match="junk.npz"):
        io.load(junk)
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.ones(2))
    with pytest.raises(ValueError, match="not a fastad checkpoint"):
        io.load(plain)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(2))
    with pytest.raises(ValueError, match="single.npy"):
        io.load(single)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickled.npz"):
        io.load(pickled)
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "missing.npz")


def test_a_text_file_is_not_a_checkpoint_and_no_word_of_pickles(tmp_path):
    # numpy reads a file that is neither .npz nor .npy as a pickle, and its refusal spoke of
    # "pickled (object) data" and allow_pickle
    text = tmp_path / "notes.npz"
    text.write_text("epoch 3, loss 0.25\n")
    with pytest.raises(ValueError, match=r"load: .*notes.npz is not a fastad checkpoint \(.npz, a zip "
                                         r"archive beginning with b'PK\\x03\\x04'\): it begins with "
                                         r"b'epoc'") as caught:
        io.load(text)
    assert "pickle" not in str(caught.value)
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.npz is not a fastad checkpoint .*: it is empty"):
        io.load(empty)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_npz_says_so_and_names_the_path(tmp_path, damage):
    path = tmp_path / "ckpt.npz"
    io.save({"w": np.arange(100.0)}, path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        start = data.index(b"\x93NUMPY")        # the first array's bytes: its CRC no longer holds
        data[start + 200:start + 220] = b"x" * 20
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"load: {re.escape(str(path))} is a damaged .npz file or "
                                         rf"not a fastad checkpoint: "):
        io.load(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        io.load(tmp_path / "missing.npz")


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_saving_into_a_missing_folder_names_the_path_and_the_folder(tmp_path, suffix):
    # the error once named the temporary file beside the target instead
    path = tmp_path / "no" / "such" / f"ckpt{suffix}"
    with pytest.raises(FileNotFoundError) as caught:
        io.save({"w": np.ones(2)}, path)
    message = str(caught.value)
    assert f"save: cannot write {path}: the folder {path.parent} does not exist" in message
    assert ".tmp" not in message
    assert not (tmp_path / "no").exists()


def test_saving_over_a_file_as_folder_names_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match=rf"save: cannot write .*ckpt.npz: .*file is not a folder"):
        io.save({"w": np.ones(2)}, tmp_path / "file" / "ckpt.npz")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = fa.Parameter(np.linspace(-1, 1, 6).reshape(3, 2), dtype=np.float64)
        self.b = fa.Parameter(np.zeros(2), dtype=np.float64)


def train_steps(model, opt, sched, grads):
    for g in grads:
        for p in model.parameters():
            (p * 1.0).backward(g[: p.size].reshape(p.shape))
        opt.step()
        opt.zero_grad()
        sched.step()


def test_training_resumes_exactly_from_a_checkpoint(tmp_path):
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(6) for _ in range(8)]

    straight = Tiny()
    opt = optim.Adam(straight.parameters(), lr=0.1, weight_decay=0.01)
    sched = optim.StepLR(opt, step_size=2, gamma=0.5)
    train_steps(straight, opt, sched, grads)

    first = Tiny()
    opt1 = optim.Adam(first.parameters(), lr=0.1, weight_decay=0.01)
    sched1 = optim.StepLR(opt1, step_size=2, gamma=0.5)
    train_steps(first, opt1, sched1, grads[:3])
    path = tmp_path / "ckpt.npz"
    io.save({"model": first.state_dict(), "optimizer": opt1.state_dict(),
             "scheduler": sched1.state_dict()}, path)

    resumed = Tiny()
    opt2 = optim.Adam(resumed.parameters(), lr=0.1, weight_decay=0.01)
    sched2 = optim.StepLR(opt2, step_size=2, gamma=0.5)
    ckpt = io.load(path)
    resumed.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["optimizer"])
    sched2.load_state_dict(ckpt["scheduler"])
    train_steps(resumed, opt2, sched2, grads[3:])
    for a, b in zip(straight.parameters(), resumed.parameters()):
        np.testing.assert_array_equal(a.value, b.value)
    assert opt2.lr == opt.lr


def test_pathlib_and_str_paths(tmp_path):
    io.save({"x": np.ones(1)}, pathlib.Path(tmp_path) / "a.npz")
    assert io.load(os.path.join(str(tmp_path), "a.npz"))["x"].tolist() == [1.0]


def test_integers_outside_int64_are_refused_before_writing(tmp_path):
    path = tmp_path / "ck.npz"
    fa.save({"w": np.ones(2)}, path)
    with pytest.raises(TypeError, match="outside the int64 range"):
        fa.save({"w": np.ones(2), "seed": 2**64}, path)
    np.testing.assert_array_equal(fa.load(path)["w"], np.ones(2))     # the old checkpoint survives
    fa.save({"big": 2**63 - 1, "small": -2**63}, path)
    assert fa.load(path) == {"big": 2**63 - 1, "small": -2**63}
