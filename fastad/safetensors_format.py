"""The safetensors file format, read and written with numpy alone (no dependency).

Layout (the format's documentation): an unsigned little-endian 64-bit header
size N, then N bytes of JSON mapping each tensor name to {"dtype", "shape",
"data_offsets": [begin, end]} (offsets into the data that follows, which the
tensors cover end to end without gaps), plus an optional "__metadata__" map of
strings to strings; then the tensors' little-endian bytes.

`fastad.save(obj, "x.safetensors")` stores each array of the (nested) dict
under its dotted name ("model.0.weight"), numbers as 0-d tensors, and the
tree itself (which leaves were numbers or strings, the strings' values) as
JSON in the metadata entry "fastad", so `fastad.load` rebuilds exactly what was
saved; other tools (`safetensors.torch.load_file`) see the tensors. A file
written elsewhere loads as a flat {name: array} dict.
"""
import json
import struct

import numpy as np

METADATA_KEY = "fastad"

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
           "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(t): name for name, t in _DTYPES.items()}
_HEADER_LIMIT = 100 * 1024 * 1024     # as the format's reference reader


def encode(tensors, metadata):
    """The bytes of a safetensors file holding `tensors` ({name: ndarray}) and `metadata` ({str: str})."""
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.asarray(array, order="C")      # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype not in _NAMES:
            raise TypeError(f"save: {name!r} has dtype {array.dtype}, which safetensors cannot hold")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)          # the reference writer aligns the data to 8 bytes
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def decode(raw, path):
    """({name: ndarray}, metadata) of a safetensors file's bytes; ValueError naming `path` if damaged."""
    def damaged(why):
        return ValueError(f"load: {path} is not a readable safetensors file ({why})")

    if len(raw) < 8:
        raise damaged(f"{len(raw)} bytes, shorter than the 8-byte header size")
    (size,) = struct.unpack("<Q", raw[:8])
    if size > min(_HEADER_LIMIT, len(raw) - 8):
        raise damaged(f"a header of {size} bytes does not fit in the file (truncated or another format?)")
    try:
        header = json.loads(raw[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise damaged(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise damaged("the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise damaged("__metadata__ must map strings to strings")
    data = memoryview(raw)[8 + size:]
    tensors, spans = {}, []
    for name, entry in header.items():
        try:
            dtype_name, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise damaged(f"tensor {name!r} lacks dtype, shape or data_offsets") from None
        if dtype_name not in _DTYPES:
            raise ValueError(f"load: {path}: tensor {name!r} has dtype {dtype_name}, which fastad "
                             f"cannot hold (it reads {', '.join(_DTYPES)})")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise damaged(f"tensor {name!r} has shape {shape}")
        dtype = np.dtype(_DTYPES[dtype_name]).newbyteorder("<")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not (isinstance(begin, int) and isinstance(end, int)) or end - begin != expected \
                or begin < 0 or end > len(data):
            raise damaged(f"tensor {name!r} has data_offsets [{begin}, {end}] for {expected} bytes "
                          f"in {len(data)} bytes of data (truncated?)")
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).astype(
            dtype.newbyteorder("="))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise damaged(f"tensor {name!r} starts at {begin}, not where the one before ends ({position})")
        position = end
    if position != len(data):
        raise damaged(f"{len(data) - position} bytes of data follow the last tensor")
    return tensors, metadata
