"""Run fastad's CUDA kernels on the CPU: each family's program compiled as C++ with g++.

A family's program (`fastad.cuda.kernels.program_source`) is compiled against
`cuda/emulation.h`, which defines the CUDA keywords, thread coordinates and
atomics as plain C++. For every name expression (`"scale_add<float>"`, ...) a
generated `extern "C"` launcher unpacks a `void**` argument list into the
kernel's parameters, deducing their types from the kernel's function type as
`cudaLaunchKernel` does, and runs every (block, thread) pair one after another.

Before a launch, the arguments are checked against the kernel's parameter types
(read from the compiled library), so a float32 array passed for a `double*`, or a
Python int passed for a `long long`, is a TypeError naming the kernel and the
parameter instead of silently wrong numbers.

Libraries are cached in `<tempdir>/fastad-emulator-<uid>/<hash>.so`, keyed by
every input of the build (program, header, flags, `g++ --version`), and written
atomically, so concurrent test processes share them safely.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from fastad.cuda import kernels

#: g++ flags of every emulator build (the output, source and include folder are added).
CXXFLAGS = ("-O1", "-shared", "-fPIC", "-std=c++17")

#: the most parameters a kernel may have (the size of the descriptor buffers).
_MAX_PARAMS = 256


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the compiled library describes it.

    `kind` is a numpy dtype kind ('f', 'i', 'u', 'b'), 'v' for void or 'o' for
    any other type; for a pointer it is the pointee's kind.
    """

    is_pointer: bool
    size: int
    pointee_size: int
    kind: str

    @property
    def element_size(self) -> int:
        """The pointee's sizeof for a pointer, else the parameter's own sizeof."""
        return self.pointee_size if self.is_pointer else self.size

    def dtype(self) -> np.dtype | None:
        """The numpy dtype of the value (pointee for a pointer); None for void or a struct."""
        if self.kind in ("v", "o"):
            return None
        return np.dtype(f"{self.kind}{self.element_size}")

    def describe(self) -> str:
        """The C type, as `float*` or `long long`."""
        dtype = self.dtype()
        if dtype is None:
            element = "void" if self.kind == "v" else f"{self.element_size}-byte struct"
        else:
            element = _C_NAMES.get(dtype, str(dtype))
        return element + ("*" if self.is_pointer else "")


#: numpy dtype -> the C type a kernel spells it with
_C_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
            np.dtype(np.int32): "int", np.dtype(np.int64): "long long",
            np.dtype(np.uint32): "unsigned int", np.dtype(np.uint64): "unsigned long long",
            np.dtype(np.bool_): "bool"}


@dataclass
class _Kernel:
    launcher: Callable[..., None]
    params: tuple[Param, ...]


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("the CUDA emulator compiles kernels with g++, which is not on PATH: "
                           "install g++ (e.g. the `g++` or `build-essential` package)")
    return gxx


@functools.lru_cache(maxsize=None)
def _gxx_version(gxx: str) -> str:
    return subprocess.run([gxx, "--version"], capture_output=True, text=True,
                          check=True).stdout


def generate_cpp(family: str, source: str, expressions: Sequence[str],
                 first_file: str) -> str:
    """The C++ translation unit of a family: the header, the program, and for the
    i-th name expression `fa_launch_<i>`, `fa_param_count_<i>` and `fa_param_info_<i>`.

    `first_file` names the program's first line in compiler messages (`#line`).
    """
    head = f'#include "emulation.h"\n#line 1 "{first_file}"\n{source}\n'
    lines = [f"// launchers for the {family} family"]
    for i, expression in enumerate(expressions):
        kernel = f"&{expression}"
        lines += [
            f"// {i}: {expression}",
            f'extern "C" void fa_launch_{i}(void** args, unsigned int grid, unsigned int block) '
            f"{{ fa_emulation::launch({kernel}, args, grid, block); }}",
            f'extern "C" int fa_param_count_{i}() {{ return fa_emulation::param_count({kernel}); }}',
            f'extern "C" void fa_param_info_{i}(int* is_pointer, long long* size, '
            f"long long* pointee_size, char* kinds) "
            f"{{ fa_emulation::param_info({kernel}, is_pointer, size, pointee_size, kinds); }}",
        ]
    tail_start = head.count("\n") + 2
    return head + f'#line {tail_start} "{family}_emulated.cpp"\n' + "\n".join(lines) + "\n"


def build(family: str, cpp: str, cache_dir: Path) -> Path:
    """Compile a generated translation unit to a shared library in `cache_dir`
    (reusing one built from the same inputs) and return its path."""
    gxx = _gxx()
    header = kernels.source_dir() / "emulation.h"      # next to the .cu sources
    key = hashlib.sha256()
    for part in (_gxx_version(gxx), " ".join(CXXFLAGS), header.read_text(), cpp):
        key.update(part.encode())
        key.update(b"\0")
    _make_private_dir(cache_dir)
    library = cache_dir / f"{family}-{key.hexdigest()[:32]}.so"
    if library.is_file():
        return library
    with tempfile.TemporaryDirectory(dir=cache_dir) as work:
        source = Path(work) / f"{family}_emulated.cpp"
        source.write_text(cpp)
        output = Path(work) / library.name
        result = subprocess.run([gxx, *CXXFLAGS, "-I", str(header.parent), "-o", str(output),
                                 str(source)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"the CUDA emulator could not compile the {family!r} kernel family "
                               f"with g++:\n{result.stderr}{result.stdout}")
        os.replace(output, library)
    return library


def _make_private_dir(folder: Path) -> None:
    """Create `folder` (mode 0700) unless it exists; refuse one owned by another user or
    writable by others, since the libraries loaded from it run as this process."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"the CUDA emulator's cache folder {folder} is owned by another user "
                           f"or writable by others; remove it or pass another cache_dir")


class Emulator:
    """Compiles kernel families as C++ on first use and runs their kernels on numpy arrays.

    `programs` maps a family name to `(program source, name expressions)`; by
    default the families of `fastad.cuda.kernels` are used. `cache_dir` (where compiled
    families are kept) defaults to `<tempdir>/fastad-emulator-<uid>`.
    """

    def __init__(self, programs: Mapping[str, tuple[str, Sequence[str]]] | None = None,
                 cache_dir: str | os.PathLike | None = None):
        self._programs = None if programs is None else {
            family: (source, tuple(expressions)) for family, (source, expressions) in programs.items()}
        if cache_dir is None:
            cache_dir = Path(tempfile.gettempdir()) / f"fastad-emulator-{os.getuid()}"
        self._cache_dir = Path(cache_dir)
        self._families: dict[str, dict[str, _Kernel]] = {}

    def _program(self, family: str) -> tuple[str, tuple[str, ...], str]:
        """(source, name expressions, name of the source's first file) of a family."""
        if self._programs is None:       # program_source refuses an unknown family
            return (kernels.program_source(family), tuple(kernels.name_expressions(family)),
                    "common.cuh")
        if family not in self._programs:
            raise KeyError(f"unknown kernel family {family!r}; known: {sorted(self._programs)}")
        source, expressions = self._programs[family]
        return source, expressions, f"{family}.cu"

    def parameters(self, family: str) -> dict[str, tuple[Param, ...]]:
        """The parameters of each kernel of a family, by name expression (compiles it)."""
        return {expression: kernel.params for expression, kernel in self._family(family).items()}

    def _family(self, family: str) -> dict[str, _Kernel]:
        loaded = self._families.get(family)
        if loaded is not None:
            return loaded
        source, expressions, first_file = self._program(family)
        cpp = generate_cpp(family, source, expressions, first_file)
        library = ctypes.CDLL(str(build(family, cpp, self._cache_dir)))
        loaded = {}
        for i, expression in enumerate(expressions):
            launcher = getattr(library, f"fa_launch_{i}")
            launcher.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_uint]
            launcher.restype = None
            loaded[expression] = _Kernel(launcher, _read_params(library, i))
        self._families[family] = loaded
        return loaded

    def launch(self, family: str, name_expression: str, grid: int, block: int, args) -> None:
        """Run `name_expression` of `family` over `grid` blocks of `block` threads.

        `args` holds one entry per kernel parameter: a C-contiguous numpy array
        whose element type matches a pointer parameter's pointee, or a numpy
        scalar of exactly a value parameter's type. Raises KeyError for an
        unknown kernel, TypeError for arguments that do not match, ValueError
        for a launch shape that is not positive.
        """
        family_kernels = self._family(family)
        kernel = family_kernels.get(name_expression)
        if kernel is None:
            raise KeyError(f"the {family!r} kernel family has no kernel {name_expression!r}; "
                           f"it has: {', '.join(family_kernels)}")
        for what, value in (("grid", grid), ("block", block)):
            if not isinstance(value, (int, np.integer)) or not 1 <= value < 2**31:
                raise ValueError(f"{name_expression}: {what} must be a positive int below 2**31, "
                                 f"got {value!r}")
        args = tuple(args)
        if len(args) != len(kernel.params):
            raise TypeError(f"{name_expression} takes {len(kernel.params)} arguments "
                            f"({', '.join(p.describe() for p in kernel.params)}), got {len(args)}")
        storages = [_argument_storage(name_expression, index, param, arg)   # alive until the launch
                    for index, (param, arg) in enumerate(zip(kernel.params, args))]
        pointers = (ctypes.c_void_p * max(len(args), 1))(*(s.ctypes.data for s in storages))
        kernel.launcher(pointers, int(grid), int(block))


def _read_params(library: ctypes.CDLL, i: int) -> tuple[Param, ...]:
    count = getattr(library, f"fa_param_count_{i}")
    count.restype = ctypes.c_int
    n = count()
    if n > _MAX_PARAMS:
        raise RuntimeError(f"a kernel with {n} parameters: the emulator handles at most {_MAX_PARAMS}")
    is_pointer = (ctypes.c_int * _MAX_PARAMS)()
    size = (ctypes.c_longlong * _MAX_PARAMS)()
    pointee_size = (ctypes.c_longlong * _MAX_PARAMS)()
    kinds = (ctypes.c_char * _MAX_PARAMS)()
    info = getattr(library, f"fa_param_info_{i}")
    info.restype = None
    info(is_pointer, size, pointee_size, kinds)
    return tuple(Param(bool(is_pointer[k]), size[k], pointee_size[k], kinds.raw[k:k + 1].decode())
                 for k in range(n))


def _expected(param: Param) -> str:
    """What a parameter takes, in numpy terms: `float64 (8 bytes)`."""
    dtype = param.dtype()
    size = f"{param.element_size} bytes"
    return f"{dtype} ({size})" if dtype is not None else size


def _kind_matches(param_kind: str, dtype: np.dtype) -> bool:
    return param_kind in ("v", "o") or dtype.kind == param_kind


def _argument_storage(expression: str, index: int, param: Param, arg) -> np.ndarray:
    """An array holding the bytes of the argument's value (for a pointer parameter, the
    array's address); raises TypeError when `arg` does not fit the parameter."""
    where = f"{expression}: parameter {index} ({param.describe()})"
    if param.is_pointer:
        if not isinstance(arg, np.ndarray):
            raise TypeError(f"{where} expects a numpy array, got {type(arg).__name__}")
        dtype = arg.dtype
        if not (arg.flags.c_contiguous and arg.flags.aligned and dtype.isnative):
            raise TypeError(f"{where} expects a C-contiguous, aligned, native-byte-order array; "
                            f"got one that is not (use np.ascontiguousarray)")
        if param.kind != "v" and (dtype.itemsize != param.pointee_size
                                  or not _kind_matches(param.kind, dtype)):
            raise TypeError(f"{where} expects an array of {_expected(param)}, "
                            f"got a {dtype} array ({dtype.itemsize}-byte elements)")
        return np.array([arg.ctypes.data], dtype=np.uintp)
    if not isinstance(arg, np.generic):
        dtype = param.dtype()
        example = f"np.{dtype}({arg!r})" if dtype is not None else "a numpy scalar"
        raise TypeError(f"{where} expects a numpy scalar of {_expected(param)}, got "
                        f"{type(arg).__name__} {arg!r}: pass an explicit numpy type, "
                        f"e.g. {example}, as CuPy requires")
    dtype = arg.dtype
    if dtype.itemsize != param.size or not _kind_matches(param.kind, dtype):
        raise TypeError(f"{where} expects a numpy scalar of {_expected(param)}, "
                        f"got {dtype} ({dtype.itemsize} bytes)")
    return np.array(arg)
