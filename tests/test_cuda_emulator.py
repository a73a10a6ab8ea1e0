"""The CPU emulator of the CUDA kernels (fastad.cuda.emulator), on a toy kernel family."""
import os
import threading

import numpy as np
import pytest

from cuda_toy_family import TOY_EXPRESSIONS, one_kernel_program, toy_source
from fastad.cuda.emulator import Emulator

SHAPES = [(1, 1), (1, 7), (5, 7), (3, 256), (64, 1)]
SIZES = [1, 37, 1000]
DTYPES = [np.float32, np.float64]


@pytest.fixture(scope="module")
def emulator():
    return Emulator({"toy": (toy_source(), TOY_EXPRESSIONS)})


def expression(kernel, dtype):
    return f"{kernel}<{'float' if dtype == np.float32 else 'double'}>"


@pytest.mark.parametrize("grid, block", SHAPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_grid_stride_axpy_matches_numpy(emulator, grid, block, n, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    expected = dtype(2.5) * x + y
    emulator.launch("toy", expression("toy_axpy", dtype), grid, block,
                    (np.int64(n), dtype(2.5), x, y))
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("grid, block", SHAPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_atomic_add_reduction_matches_numpy(emulator, grid, block, n, dtype):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    out = np.array([1.0], dtype=dtype)
    emulator.launch("toy", expression("toy_sum", dtype), grid, block, (np.int64(n), x, out))
    np.testing.assert_allclose(out[0], 1.0 + x.astype(np.float64).sum(),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("grid, block", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add_with_int64_indices(emulator, grid, block, dtype):
    idx = np.array([3, 0, 3, 3, 1, 0, 4], dtype=np.int64)
    x = np.arange(1, 8, dtype=dtype)
    out = np.zeros(5, dtype=dtype)
    count = np.zeros(1, dtype=np.int32)
    emulator.launch("toy", expression("toy_scatter_add", dtype), grid, block,
                    (np.int64(len(idx)), idx, x, out, count))
    expected = np.zeros(5, dtype=dtype)
    np.add.at(expected, idx, x)
    np.testing.assert_array_equal(out, expected)
    assert count[0] == len(idx)


@pytest.mark.parametrize("dtype", DTYPES)
def test_math_helpers_match_numpy(emulator, dtype):
    x = np.array([0.25, 0.5, 1.0, 2.0, 3.5, np.inf], dtype=dtype)
    out = np.full(len(x), 10.0, dtype=dtype)
    emulator.launch("toy", expression("toy_math", dtype), 2, 3,
                    (np.int64(len(x)), x, out, np.float64(0.5)))
    v = x[:-1].astype(np.float64)
    r = (np.exp(-v) + np.log(v) + np.log1p(v) + np.tanh(v) + np.sqrt(v) + v ** 1.5 + v
         + np.maximum(v, 1) + np.minimum(v, 1))
    expected = 0.5 * r + np.where(np.arange(len(v)) % 2 == 1, 10.0, 0.0)   # fa_put adds on odd i
    np.testing.assert_allclose(out[:-1], expected, rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert out[-1] == -1                                                    # fa_isfinite(inf)


@pytest.mark.parametrize("grid, block", SHAPES)
def test_every_thread_runs_once_with_its_coordinates(emulator, grid, block):
    where = np.zeros(2 * grid * block, dtype=np.uint32)
    shape = np.zeros(2, dtype=np.uint32)
    emulator.launch("toy", "toy_coords<float>", grid, block, (where, shape))
    blocks, threads = np.divmod(np.arange(grid * block), block)
    np.testing.assert_array_equal(where[0::2], blocks)
    np.testing.assert_array_equal(where[1::2], threads)
    np.testing.assert_array_equal(shape, [grid, block])


def test_threads_run_in_a_scrambled_order(tmp_path):
    body = ("unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "x[t] = atomicAdd(x + gridDim.x * blockDim.x, (T)1);")     # each thread's turn
    emulator = Emulator({"order": one_kernel_program(body)}, cache_dir=tmp_path)
    turns = np.zeros(5 * 7 + 1, dtype=np.float64)
    emulator.launch("order", "k<double>", 5, 7, (turns,))
    turns = turns[:-1]
    assert sorted(turns) == list(range(35))                            # each thread once
    assert not np.array_equal(turns, np.arange(35))                    # not 0, 1, 2, ...


@pytest.mark.parametrize("dtype", DTYPES)
def test_atomics_return_the_old_value(emulator, dtype):
    ints = np.array([3, 5, 4, 1, 8], dtype=np.int32)
    longs = np.array([2, 6], dtype=np.int64)
    ulongs = np.array([1, 2], dtype=np.uint64)
    values = np.array([1.5], dtype=dtype)
    old = np.zeros(10, dtype=np.int64)
    emulator.launch("toy", expression("toy_atomics", dtype), 1, 1, (ints, longs, ulongs, values, old))
    np.testing.assert_array_equal(old, [3, 5, 4, 1, 8, 2, 6, 1, 2, 1])
    np.testing.assert_array_equal(ints, [7, -2, 9, 1, 11])
    np.testing.assert_array_equal(longs, [2 ** 40, -5])
    np.testing.assert_array_equal(ulongs, [11, 12])
    assert values[0] == 2.0


def test_parameters_are_described(emulator):
    params = emulator.parameters("toy")["toy_axpy<double>"]
    assert [p.describe() for p in params] == ["long long", "double", "double*", "double*"]
    assert [p.dtype() for p in params] == [np.int64, np.float64, np.float64, np.float64]


# ---- argument checks: each names the kernel, the parameter, what was expected and got ----

def axpy_args(n=4, dtype=np.float32):
    return [np.int64(n), dtype(2), np.ones(n, dtype), np.ones(n, dtype)]


def replaced(index, value):
    args = axpy_args()
    args[index] = value
    return args


@pytest.mark.parametrize("args, message", [
    (replaced(0, 4), r"toy_axpy<float>: parameter 0 \(long long\) expects a numpy scalar of "
                     r"int64 \(8 bytes\), got int 4: pass an explicit numpy type, e\.g\. np\.int64\(4\)"),
    (replaced(1, 2.0), r"parameter 1 \(float\) .* got float 2\.0: .* np\.float32\(2\.0\)"),
    (replaced(0, np.int32(4)), r"parameter 0 \(long long\) expects a numpy scalar of int64 "
                               r"\(8 bytes\), got int32 \(4 bytes\)"),
    (replaced(1, np.float64(2)), r"parameter 1 \(float\) expects a numpy scalar of float32 "
                                 r"\(4 bytes\), got float64 \(8 bytes\)"),
    (replaced(0, np.float64(4)), r"parameter 0 \(long long\) .* got float64"),
    (replaced(1, np.ones(1, np.float32)), r"parameter 1 \(float\) expects a numpy scalar .* got ndarray"),
    (replaced(2, np.ones(4, np.float64)), r"toy_axpy<float>: parameter 2 \(float\*\) expects an "
                                          r"array of float32 \(4 bytes\), got a float64 array"),
    (replaced(3, np.ones(4, np.int32)), r"parameter 3 \(float\*\) .* got a int32 array"),
    (replaced(2, np.float32(1)), r"parameter 2 \(float\*\) expects a numpy array, got float32"),
    (replaced(2, [1.0, 2.0]), r"parameter 2 \(float\*\) expects a numpy array, got list"),
    (replaced(3, np.ones(8, np.float32)[::2]), r"parameter 3 \(float\*\) expects a C-contiguous"),
    (axpy_args()[:3], r"toy_axpy<float> takes 4 arguments \(long long, float, float\*, float\*\), got 3"),
    (axpy_args() + [np.int64(1)], r"takes 4 arguments .* got 5"),
])
def test_bad_arguments_are_type_errors(emulator, args, message):
    with pytest.raises(TypeError, match=message):
        emulator.launch("toy", "toy_axpy<float>", 1, 1, args)


def test_index_array_must_be_int64(emulator):
    args = (np.int64(2), np.zeros(2, np.int32), np.ones(2, np.float32), np.zeros(2, np.float32),
            np.zeros(1, np.int32))
    with pytest.raises(TypeError, match=r"parameter 1 \(long long\*\) expects an array of int64 "
                                        r"\(8 bytes\), got a int32 array"):
        emulator.launch("toy", "toy_scatter_add<float>", 1, 1, args)
    float_ids = (args[0], np.zeros(2, np.float64)) + args[2:]
    with pytest.raises(TypeError, match=r"parameter 1 \(long long\*\) .* got a float64 array"):
        emulator.launch("toy", "toy_scatter_add<float>", 1, 1, float_ids)


def test_unknown_kernel_names_the_familys_kernels(emulator):
    with pytest.raises(KeyError, match=r"'toy' kernel family has no kernel 'toy_axpy<int>'; "
                                       r"it has: toy_axpy<float>, toy_axpy<double>, toy_sum<float>"):
        emulator.launch("toy", "toy_axpy<int>", 1, 1, axpy_args())


def test_unknown_family(emulator):
    with pytest.raises(KeyError, match=r"unknown kernel family 'nope'; known: \['toy'\]"):
        emulator.launch("nope", "toy_axpy<float>", 1, 1, axpy_args())


@pytest.mark.parametrize("grid, block", [(0, 1), (1, 0), (1, 2 ** 31), (1.0, 1)])
def test_launch_shape_must_be_positive_ints(emulator, grid, block):
    with pytest.raises(ValueError, match="must be a positive int"):
        emulator.launch("toy", "toy_axpy<float>", grid, block, axpy_args())


def test_nothing_runs_when_an_argument_is_wrong(emulator):
    args = axpy_args()
    args[3] = np.ones(3, np.float64)
    with pytest.raises(TypeError):
        emulator.launch("toy", "toy_axpy<float>", 1, 1, args)
    np.testing.assert_array_equal(args[3], 1.0)


# ---- what must not compile, and how the build is cached ----

@pytest.mark.parametrize("body, feature", [
    ("__syncthreads(); x[0] = 1;", "__syncthreads"),
    ("__shared__ T buf[32]; buf[0] = x[0];", "__shared__"),
    ("x[0] = __shfl_down_sync(0xffffffffu, x[0], 1);", "__shfl_down_sync"),
    ("x[0] = warpSize;", "warpSize"),
])
def test_cooperative_features_do_not_compile(tmp_path, body, feature):
    emulator = Emulator({"coop": one_kernel_program(body)}, cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match=rf"could not compile the 'coop' kernel family(.|\n)*"
                                           rf"fastad kernels must not use {feature}"):
        emulator.launch("coop", "k<float>", 1, 1, (np.zeros(1, np.float32),))
    assert not list(tmp_path.glob("*.so"))


def test_compile_error_shows_the_kernel_line(tmp_path):
    emulator = Emulator({"broken": one_kernel_program("x[0] = undefined_name;")}, cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match=r"(.|\n)*error: .undefined_name. was not declared"):
        emulator.parameters("broken")


def test_missing_gxx_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    emulator = Emulator({"toy": (toy_source(), TOY_EXPRESSIONS)}, cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="compiles kernels with g\\+\\+, which is not on PATH"):
        emulator.parameters("toy")


def test_build_is_cached_and_safe_in_parallel(tmp_path):
    program = one_kernel_program("FA_GRID_STRIDE(i, 3) { x[i] += (T)1; }")
    emulators = [Emulator({"fam": program}, cache_dir=tmp_path) for _ in range(2)]
    errors = []

    def build(e):
        try:
            e.parameters("fam")
        except Exception as error:             # reported below
            errors.append(error)

    threads = [threading.Thread(target=build, args=(e,)) for e in emulators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    libraries = list(tmp_path.glob("*.so"))
    assert len(libraries) == 1 and libraries[0].name.startswith("fam-")
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]            # no temp folders left
    stamp = os.stat(libraries[0]).st_mtime_ns
    x = np.zeros(3, np.float64)
    Emulator({"fam": program}, cache_dir=tmp_path).launch("fam", "k<double>", 2, 2, (x,))
    np.testing.assert_array_equal(x, 1.0)
    assert os.stat(libraries[0]).st_mtime_ns == stamp                     # reused, not rebuilt
