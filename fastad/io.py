"""Checkpoints: `save(obj, path)` / `load(path)` for state dicts.

A checkpoint is a plain `.npz` file, or a safetensors file when the path ends
in ".safetensors" (fastad/safetensors_format.py). `obj` is a dict, possibly nested, whose
keys are strings without "/" and whose values are numpy arrays (numbers or
booleans), Python or numpy numbers, booleans, strings, or further dicts. Each
value is stored under its flattened key ("model/0.weight",
"optimizer/state.0.exp_avg", ...), so `numpy.load` can read it too; one more
entry, "__fastad__", records the tree (and which leaves were numbers or
strings) as JSON so that `load` rebuilds exactly what was saved, empty dicts
included.

Saving writes a temporary file in the target's directory, fsyncs it and
renames it over the target (os.replace): a crash mid-save leaves any old file
intact. `write_atomically` does this for fastad's other file writers too
(Word2Vec.save_word2vec_format). Loading never unpickles (allow_pickle=False).
"""
import json
import os
import secrets
import zipfile
from contextlib import suppress

import numpy as np

from fastad import safetensors_format

__all__ = ["save", "load"]

_MANIFEST = "__fastad__"
_FORMAT = "fastad-checkpoint-1"
_SCALAR_KINDS = {"int": int, "float": float, "bool": bool, "str": str}
_NPZ_START = b"PK\x03\x04"      # a zip archive's first entry: how every .npz file begins


def _leaf_kind(value, key):
    """The manifest tag of a leaf value, or a TypeError naming its key."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"save: {key!r} is an array of dtype {value.dtype}; only numeric and "
                            f"boolean arrays can be saved")
        return "array"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        if not -2**63 <= int(value) < 2**63:
            raise TypeError(f"save: {key!r} is the integer {value}, outside the int64 range a "
                            f"checkpoint can hold; save it as a string or a float")
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    raise TypeError(f"save: {key!r} is a {type(value).__name__}; a checkpoint holds dicts of numpy "
                    f"arrays, numbers, booleans and strings")


def _flatten(tree, prefix, arrays):
    """The manifest of `tree`; fills `arrays` with {flattened key: array}."""
    manifest = {}
    for key, value in tree.items():
        if not isinstance(key, str) or "/" in key or not key:
            raise TypeError(f"save: keys must be non-empty strings without '/', got {key!r}"
                            f"{' under ' + repr(prefix) if prefix else ''}")
        path = prefix + key
        if path == _MANIFEST:
            raise ValueError(f"save: the top-level key {_MANIFEST!r} is reserved")
        if isinstance(value, dict):
            manifest[key] = _flatten(value, path + "/", arrays)
        else:
            manifest[key] = _leaf_kind(value, path)
            arrays[path] = np.asarray(value)
    return manifest


def save(obj, path):
    """Write the dict `obj` (e.g. {"model": model.state_dict(), "optimizer":
    opt.state_dict(), "epoch": 3}) to `path`, atomically: an .npz file, or a
    safetensors file when `path` ends in ".safetensors" (see
    fastad/safetensors_format.py: arrays under dotted names, readable by
    `safetensors.torch.load_file`).

    `path` is used as given (no suffix is added). Raises TypeError for a value
    or key that a checkpoint cannot hold, before anything is written.

    >>> fa.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, "ckpt.npz")
    >>> fa.save(model.state_dict(), "model.safetensors")
    """
    if not isinstance(obj, dict):
        raise TypeError(f"save: expected a dict (e.g. a state_dict()), got {type(obj).__name__}")
    arrays = {}
    manifest = _flatten(obj, "", arrays)
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        payload = _safetensors_payload(manifest, arrays)
        write_atomically(path, lambda f: f.write(payload))
    else:
        arrays[_MANIFEST] = np.array(json.dumps({"format": _FORMAT, "tree": manifest}))
        write_atomically(path, lambda f: np.savez(f, **arrays))


def _safetensors_payload(manifest, arrays):
    """The file's bytes: arrays (and numbers, as 0-d tensors) under dotted names; strings and
    the tree in the metadata, so that `load` rebuilds the same dict."""
    tensors, names, strings = {}, {}, {}
    for flat, value in arrays.items():
        if value.dtype.kind == "U":
            strings[flat] = str(value[()])
            continue
        dotted = flat.replace("/", ".")
        if dotted in tensors:
            raise TypeError(f"save: two entries are both named {dotted!r} once flattened with dots")
        tensors[dotted] = value
        names[flat] = dotted
    meta = {"format": _FORMAT, "tree": manifest, "names": names, "strings": strings}
    return safetensors_format.encode(tensors, {safetensors_format.METADATA_KEY: json.dumps(meta)})


def write_atomically(path, write, who="save"):
    """Run write(file) on a temporary file beside `path` (opened for writing bytes), fsync
    it and rename it over `path`; a failure leaves any old file at `path` as it was and no
    temporary file. An error opening it names `who` (the caller) and `path`, not the
    temporary file:

    >>> write_atomically("out/vectors.txt", lambda f: f.write(b"..."), "Word2Vec.save_word2vec_format")
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    try:
        # 0o666 less the umask: the file gets the permissions a plain open() would give
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:      # named after the user's path, not the temporary file's
        if os.path.isdir(directory):
            reason = e.strerror
        elif os.path.exists(directory):
            reason = f"{directory} is not a folder"
        else:
            reason = f"the folder {directory} does not exist"
        raise type(e)(e.errno, f"{who}: cannot write {path}: {reason}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with suppress(OSError):         # make the rename durable (where a directory can be opened)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unflatten(manifest, prefix, arrays, path):
    tree = {}
    for key, kind in manifest.items():
        flat = prefix + key
        if isinstance(kind, dict):
            tree[key] = _unflatten(kind, flat + "/", arrays, path)
            continue
        if flat not in arrays:
            raise ValueError(f"load: {path} is damaged: the entry {flat!r} is missing")
        value = arrays[flat]
        if kind == "array":
            tree[key] = value
        elif kind in _SCALAR_KINDS and value.ndim == 0:
            tree[key] = _SCALAR_KINDS[kind](value.item())
        else:
            raise ValueError(f"load: {path} is damaged: the entry {flat!r} has kind {kind!r}")
    return tree


def load(path):
    """Read a checkpoint written by `save`: the same nested dict, with arrays as
    numpy arrays and numbers and strings as Python values.

    A path ending in ".safetensors" is read as a safetensors file: one that
    fastad wrote gives back the same dict; one written elsewhere gives a flat
    {tensor name: array} dict (a dtype numpy cannot hold, such as BF16, is a
    ValueError naming the tensor).

    Raises FileNotFoundError if `path` does not exist and ValueError naming
    `path` if it is truncated, damaged or not a fastad checkpoint.

    >>> ckpt = fa.load("ckpt.npz")
    >>> model.load_state_dict(ckpt["model"]); opt.load_state_dict(ckpt["optimizer"])
    """
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        return _load_safetensors(path)
    with open(path, "rb") as f:
        # numpy takes a file that is neither .npz nor .npy for a pickle: look first
        start = f.read(len(_NPZ_START))
        if start != _NPZ_START:
            found = f"it begins with {start!r}" if start else "it is empty"
            raise ValueError(f"load: {path} is not a fastad checkpoint (.npz, a zip archive "
                             f"beginning with {_NPZ_START!r}): {found}")
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
            raise ValueError(f"load: {path} is a damaged .npz file or not a fastad checkpoint: "
                             f"{e}") from None
    header = arrays.pop(_MANIFEST, None)
    try:
        meta = json.loads(str(header[()])) if header is not None and header.ndim == 0 else None
    except (ValueError, TypeError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT or not isinstance(
            meta.get("tree"), dict):
        raise ValueError(f"load: {path} is not a fastad checkpoint (no valid {_MANIFEST!r} entry; "
                         f"it may be a plain .npz written by numpy)")
    return _unflatten(meta["tree"], "", arrays, path)


def _load_safetensors(path):
    with open(path, "rb") as f:
        tensors, metadata = safetensors_format.decode(f.read(), path)
    if safetensors_format.METADATA_KEY not in metadata:
        return tensors
    try:
        meta = json.loads(metadata[safetensors_format.METADATA_KEY])
        if meta.get("format") != _FORMAT:
            raise ValueError(f"format {meta.get('format')!r}")
        arrays = {flat: tensors[dotted] for flat, dotted in meta["names"].items()}
        arrays.update({flat: np.asarray(text) for flat, text in meta["strings"].items()})
        tree = meta["tree"]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"load: {path} has a damaged fastad entry in its metadata ({e!r})") from None
    return _unflatten(tree, "", arrays, path)
