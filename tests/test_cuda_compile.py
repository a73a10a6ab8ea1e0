"""Every kernel family compiles: with NVRTC as CuPy does, with nvcc, and as C++ for the emulator.

NVRTC needs CuPy (run with the CuPy venv's python); without it, or without
nvcc, those tests skip with the reason. Families whose `.cu` file is not
written yet are left out.
"""
import re

import numpy as np
import pytest

from cuda_toy_family import TOY_EXPRESSIONS, one_kernel_program, toy_source
from fastad.cuda import compile_check, kernels
from fastad.cuda.emulator import Emulator

EXISTING = [family for family in kernels.FAMILIES
            if (kernels.source_dir() / f"{family}.cu").is_file()]


def require(check):
    available, reason = check()
    if not available:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def emulator():
    return Emulator()


@pytest.mark.parametrize("family", EXISTING)
def test_nvrtc_compiles_family(family):
    require(compile_check.nvrtc_available)
    lowered = compile_check.nvrtc_compile(family)
    assert sorted(lowered) == sorted(kernels.name_expressions(family))
    assert all(name.startswith("_Z") for name in lowered.values())


@pytest.mark.parametrize("family", EXISTING)
def test_nvcc_compiles_family(family):
    require(compile_check.nvcc_available)
    compile_check.nvcc_compile(family)


@pytest.mark.parametrize("family", EXISTING)
def test_emulator_compiles_family_with_allowed_scalar_types(emulator, family):
    """Every scalar parameter is long long, int, T or double (the kernel rules)."""
    for expression, params in emulator.parameters(family).items():
        t_size = np.dtype(np.float32 if expression.endswith("<float>") else np.float64).itemsize
        allowed = {np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float64),
                   np.dtype(f"f{t_size}")}
        for index, param in enumerate(params):
            if not param.is_pointer:
                assert param.dtype() in allowed, (
                    f"{expression}: parameter {index} is {param.describe()}; scalar parameters "
                    f"must be long long, int, T or double")


@pytest.mark.parametrize("family", EXISTING)
def test_every_kernel_is_a_global_template_in_its_file(family):
    text = (kernels.source_dir() / f"{family}.cu").read_text()
    for kernel in kernels.FAMILIES[family]:
        pattern = (rf"template\s*<\s*(?:typename|class)\s+T\s*>\s*__global__\s+"
                   rf"(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+{kernel}\s*\(")
        assert re.search(pattern, text), (
            f"cuda/{family}.cu defines no `template <typename T> __global__ void {kernel}(`")


def test_family_files_have_no_include():
    for family in EXISTING:
        text = (kernels.source_dir() / f"{family}.cu").read_text()
        assert not re.search(r"^\s*#\s*include", text, re.MULTILINE), (
            f"cuda/{family}.cu has an #include: NVRTC gets no headers")


# ---- the checks themselves, on a toy program ----

def test_nvrtc_compiles_toy_program():
    require(compile_check.nvrtc_available)
    lowered = compile_check.nvrtc_compile_program(toy_source(), TOY_EXPRESSIONS, "toy.cu")
    assert lowered["toy_axpy<float>"] == "_Z8toy_axpyIfEvxT_PKS0_PS0_"
    assert sorted(lowered) == sorted(TOY_EXPRESSIONS)


def test_nvcc_compiles_toy_program():
    require(compile_check.nvcc_available)
    compile_check.nvcc_compile_program(toy_source(), TOY_EXPRESSIONS, "toy.cu")


BROKEN = one_kernel_program("x[0] = undefined_name;")
# Valid until instantiated: only a check that instantiates each name expression fails.
BAD_INSTANCE = one_kernel_program("x[0] = T::no_such_member;")


#: compiler -> (its availability check, its compile function)
COMPILERS = {"NVRTC": (compile_check.nvrtc_available, compile_check.nvrtc_compile_program),
             "nvcc": (compile_check.nvcc_available, compile_check.nvcc_compile_program)}


@pytest.mark.parametrize("compiler", sorted(COMPILERS))
@pytest.mark.parametrize("program", [BROKEN, BAD_INSTANCE], ids=["broken", "bad_instance"])
def test_compile_error_carries_the_compiler_output(compiler, program):
    available, compile_program = COMPILERS[compiler]
    require(available)
    with pytest.raises(compile_check.CompileError,
                       match=compiler + r" could not compile bad\.cu(.|\n)*error(.|\n)*"
                                        r"(undefined_name|no_such_member)"):
        compile_program(*program, "bad.cu")


def test_nvcc_source_takes_every_kernels_address():
    text = compile_check.instantiation_source("// program", ["k<float>", "k<double>"])
    assert text.endswith("static void* const fa_instantiate[] = "
                         "{(void*)&k<float>, (void*)&k<double>};\n")


def test_availability_reasons_are_strings():
    for check in (compile_check.nvrtc_available, compile_check.nvcc_available):
        available, reason = check()
        assert isinstance(available, bool) and reason
    try:
        import cupy_backends  # noqa: F401
    except ImportError:
        available, reason = compile_check.nvrtc_available()
        assert not available and "CuPy" in reason
