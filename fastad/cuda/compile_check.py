"""Compile fastad's kernel families without a GPU: with NVRTC as CuPy does, and with nvcc.

`nvrtc_compile(family)` runs the family's program through NVRTC with the
options `cupy.RawModule` ends up using (`kernels.COMPILE_CHECK_OPTIONS`),
through CuPy's low-level bindings, which need no driver. `nvcc_compile(family)`
is a second, stricter opinion: nvcc has no `--device-as-default-execution-space`,
so every helper a kernel calls must be marked `__device__`, and `-arch=sm_90`
runs ptxas as well.

CuPy is imported only when NVRTC is used, so this module imports anywhere;
`nvrtc_available()` and `nvcc_available()` say whether a check can run, and why not.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from fastad.cuda import kernels

#: nvcc options of `nvcc_compile` (-c and the files are added).
NVCC_OPTIONS = ("-std=c++17", "-arch=sm_90", "-ftz=true")


class CompileError(RuntimeError):
    """A kernel program that NVRTC or nvcc rejected; the message holds the compiler's log."""


def nvrtc_available() -> tuple[bool, str]:
    """(True, NVRTC's version) when CuPy's NVRTC bindings load, else (False, why not)."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as e:
        return False, f"CuPy's NVRTC bindings are not importable ({e}); install cupy-cuda13x"
    try:
        major, minor = nvrtc.getVersion()
    except Exception as e:             # the NVRTC shared library is missing or unloadable
        return False, f"CuPy is installed but NVRTC cannot be loaded: {e}"
    return True, f"NVRTC {major}.{minor}"


def nvcc_available() -> tuple[bool, str]:
    """(True, nvcc's path) when nvcc is on PATH, else (False, why not)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False, "nvcc is not on PATH (install the CUDA toolkit)"
    return True, nvcc


def nvrtc_compile_program(source: str, name_expressions: Sequence[str], name: str,
                          options: Sequence[str] = kernels.COMPILE_CHECK_OPTIONS) -> dict[str, str]:
    """Compile `source` with NVRTC, asking for every name expression; return
    {name expression: lowered (mangled) name}. Raises CompileError with NVRTC's log."""
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(source, name, (), ())
    try:
        for expression in name_expressions:
            nvrtc.addNameExpression(program, expression)
        try:
            nvrtc.compileProgram(program, list(options))
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(program)
            raise CompileError(f"NVRTC could not compile {name} ({e}), options "
                               f"{' '.join(options)}:\n{log}") from None
        return {expression: nvrtc.getLoweredName(program, expression)
                for expression in name_expressions}
    finally:
        nvrtc.destroyProgram(program)


def nvrtc_compile(family: str) -> dict[str, str]:
    """Compile a family's program as `cupy.RawModule` does; return the lowered names
    of its name expressions. Raises CompileError with NVRTC's log."""
    # The program starts with common.cuh; rules.h and the family file follow, each after
    # a #line directive.
    return nvrtc_compile_program(kernels.program_source(family), kernels.name_expressions(family),
                                 "common.cuh")


def instantiation_source(source: str, name_expressions: Sequence[str]) -> str:
    """`source` plus a file-scope array taking every name expression's address, which
    makes nvcc instantiate (and compile for the device) each kernel template."""
    addresses = ", ".join(f"(void*)&{expression}" for expression in name_expressions)
    return f"{source}\nstatic void* const fa_instantiate[] = {{{addresses}}};\n"


def nvcc_compile_program(source: str, name_expressions: Sequence[str], name: str,
                         options: Sequence[str] = NVCC_OPTIONS) -> None:
    """Compile `source` with every name expression instantiated, with
    `nvcc <options> -c` in a temporary folder. Raises CompileError
    with nvcc's output, or RuntimeError when nvcc is missing."""
    found, nvcc = nvcc_available()
    if not found:
        raise RuntimeError(nvcc)
    with tempfile.TemporaryDirectory(prefix="fastad-nvcc-") as work:
        path = Path(work) / name
        path.write_text(instantiation_source(source, name_expressions))
        command = [nvcc, *options, "-c", str(path), "-o", str(path.with_suffix(".o"))]
        result = subprocess.run(command, capture_output=True, text=True, cwd=work)
        if result.returncode != 0:
            raise CompileError(f"nvcc could not compile {name} (`{' '.join(command)}`):\n"
                               f"{result.stdout}{result.stderr}")


def nvcc_compile(family: str) -> None:
    """Compile a family's program with nvcc, every kernel instantiated for float and
    double. Raises CompileError with nvcc's output."""
    nvcc_compile_program(kernels.program_source(family), kernels.name_expressions(family),
                         f"{family}_program.cu")
