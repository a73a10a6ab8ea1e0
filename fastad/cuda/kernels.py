"""The table of GPU kernels: which `.cu` file holds each kernel, and how it is compiled.

Every kernel is a template on the element type `T`, instantiated for float
and double through CuPy's `name_expressions` ("unary_forward<float>", ...).
A family's program is `common.cuh`, then `fastad/ops/rules.h` (the scalar
rules the CPU kernels share), then the family's `.cu` file, so NVRTC needs no
include path and CuPy's cache key covers all three texts.

This table is the only place a kernel is registered: the CuPy backend, the
CPU emulator, and the NVRTC/nvcc compile checks all read it.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

import fastad.ops.elementwise
from fastad.ops import manifest

#: family -> the kernels its `.cu` file defines (each a template on T). A family's
#: name is that of its CPU module (`fastad/ops/<family>.pyx`) and of its device ops
#: (`fastad/cuda/ops/<family>.py`; the optimizers' are `fastad/cuda/optim.py`).
FAMILIES: dict[str, tuple[str, ...]] = {
    "elementwise": (
        "fill", "copy_or_add", "unary_forward", "unary_backward",
        "binary_forward", "binary_backward", "all_finite", "where_forward", "where_backward",
    ),
    "reduction": (
        "reduce_sum", "reduce_max", "reduce_logsumexp", "count_ties", "reduce_backward",
        "softmax_forward", "softmax_backward",
        "reduce_min", "reduce_norm2", "arg_reduce", "cumsum_forward", "cumsum_backward",
    ),
    "losses": (
        "cross_entropy_forward", "cross_entropy_backward", "nll_forward", "nll_backward",
        "pointwise_loss_forward", "pointwise_loss_backward", "loss_finish",
    ),
    "shape": ("gather_positions", "put_positions", "scatter_add_positions"),
    "sparse": ("gather_rows", "scatter_add_rows", "renorm_rows", "zero_rows", "copy_ids",
               "bag_forward", "bag_backward_rows", "bag_weights_backward", "along_forward",
               "along_scatter_add"),
    "linalg": ("row_dot_forward", "row_dot_backward"),
    "conv": (
        "im2col", "col2im", "conv_unstage", "conv_stage", "conv_bias_backward", "pool_forward",
        "pool_backward", "batch_norm_stats", "batch_norm_forward", "batch_norm_sums",
        "batch_norm_backward",
    ),
    "optim": (
        "claim_rows", "release_rows", "count_step", "sgd_dense", "sgd_rows", "adagrad_dense",
        "adagrad_rows", "adam_dense", "adam_rows", "rmsprop_dense", "rmsprop_rows",
        "adadelta_dense", "adadelta_rows", "adamax_dense", "adamax_rows", "radam_dense",
        "radam_rows", "nadam_product_step", "nadam_dense", "nadam_rows", "ftrl_dense", "ftrl_rows",
        "grad_norm_dense", "grad_norm_rows", "scale_dense", "scale_rows", "clamp_dense",
        "clamp_rows",
    ),
}

#: kernel name -> its family
KERNEL_FAMILY: dict[str, str] = {k: fam for fam, names in FAMILIES.items() for k in names}

#: numpy dtype -> the C type a template is instantiated with
CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}

#: Options fastad passes to `cupy.RawModule`. CuPy adds, for NVRTC: `-ftz=true`,
#: `-arch=sm_XX` (or compute_XX) for the device, and
#: `--device-as-default-execution-space`; `COMPILE_CHECK_OPTIONS` spells out the
#: same full list for the checks that run without a GPU.
RAWMODULE_OPTIONS = ("--std=c++17",)
COMPILE_CHECK_OPTIONS = RAWMODULE_OPTIONS + (
    "-ftz=true", "-arch=compute_90", "--device-as-default-execution-space")

#: The ops of `unary_forward`/`unary_backward`, `binary_forward`/`binary_backward` and
#: `pointwise_loss_forward/backward`, in the order of their enums (fastad/ops/op_codes.h,
#: generated from the manifest): the code a device op passes is the index here.
UNARY_OPS = tuple(op["name"] for op in manifest.UNARY_OPS)
BINARY_OPS = tuple(op["name"] for op in manifest.BINARY_OPS)
POINTWISE_LOSSES = tuple(op["name"] for op in manifest.POINTWISE_LOSSES)

#: The comparisons among BINARY_OPS: 0/1 masks, no gradient.
COMPARISONS = BINARY_OPS[BINARY_OPS.index("greater"):]


def _manifest_kernels() -> dict[str, tuple[str, ...]]:
    """The kernels of the op manifest's ops (an op's own list, else its family's): for each
    public function, and for each pointwise loss code (the device node's name)."""
    table = {}
    for family, ops in manifest.TABLES.items():
        for op in ops:
            name = op["name"] if family == "loss" else op.get("public")
            if name:
                table[name] = op.get("kernels", manifest.FAMILIES[family]["kernels"])
    return table


_ROWS = ("claim_rows", "release_rows")

#: Each public op, loss and optimizer -> the kernels its device forward and
#: backward (or step) launch. The code is in fastad/cuda/ops/<family>.py (and
#: fastad/cuda/optim.py), the CPU version in fastad/ops/. matmul's products (and the
#: convolutions' GEMMs) go to cuBLAS; lstm_cell, lstm_sequence and gru_cell are composed of the ops
#: below. Seeding a backward pass also launches fill or copy_or_add. A test runs every op and
#: checks this table against the kernels it launched.
OPS: dict[str, tuple[str, ...]] = {
    **_manifest_kernels(),
    "where": ("where_forward", "where_backward", "reduce_sum", "fill"),
    "vector_dot": ("row_dot_forward", "row_dot_backward"),
    "matmul": (),
    "sum": ("reduce_sum", "fill", "reduce_backward"),
    "mean": ("reduce_sum", "fill", "reduce_backward"),
    "max": ("reduce_max", "count_ties", "reduce_backward"),
    "logsumexp": ("reduce_logsumexp", "reduce_backward"),
    "softmax": ("softmax_forward", "softmax_backward"),
    "log_softmax": ("softmax_forward", "softmax_backward"),
    "reshape": ("copy_or_add",),
    "transpose": ("gather_positions", "fill", "scatter_add_positions"),
    "getitem": ("gather_positions", "fill", "scatter_add_positions"),
    "concat": ("put_positions", "gather_positions"),
    "stack": ("put_positions", "gather_positions"),
    "take": ("gather_rows", "fill", "copy_ids", "scatter_add_rows"),
    **{op: ("im2col", "conv_unstage", "conv_stage", "conv_bias_backward", "col2im")
       for op in ("conv1d", "conv2d")},
    **{op: ("pool_forward", "fill", "pool_backward") for op in
       ("max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d")},
    "batch_norm": ("batch_norm_stats", "batch_norm_forward", "batch_norm_sums",
                   "batch_norm_backward"),
    "min": ("reduce_min", "count_ties", "reduce_backward"),
    "norm": ("reduce_norm2", "reduce_backward"),
    "argmax": ("arg_reduce",),
    "argmin": ("arg_reduce",),
    "cumsum": ("cumsum_forward", "cumsum_backward"),
    "take_along_axis": ("along_forward", "fill", "copy_ids", "along_scatter_add"),
    **{op: ("gather_positions", "fill", "scatter_add_positions") for op in ("flip", "tile")},
    "embedding": ("claim_rows", "renorm_rows", "release_rows", "gather_rows", "fill", "copy_ids",
                  "scatter_add_rows"),
    "embedding_bag": ("bag_forward", "bag_backward_rows", "bag_weights_backward", "fill",
                      "copy_ids", "scatter_add_rows"),
    "cross_entropy": ("fill", "cross_entropy_forward", "loss_finish", "cross_entropy_backward"),
    "nll_loss": ("fill", "nll_forward", "loss_finish", "nll_backward"),
    **{optimizer: ("count_step", f"{step}_dense", f"{step}_rows") + _ROWS
       for optimizer, step in (("SGD", "sgd"), ("Adagrad", "adagrad"), ("Adam", "adam"),
                               ("AdamW", "adam"), ("RMSprop", "rmsprop"),
                               ("Adadelta", "adadelta"), ("Adamax", "adamax"), ("RAdam", "radam"),
                               ("FTRL", "ftrl"))},
    "NAdam": ("count_step", "nadam_product_step", "nadam_dense", "nadam_rows") + _ROWS,
    "clip_grad_norm": ("grad_norm_dense", "grad_norm_rows", "scale_dense", "scale_rows") + _ROWS,
    "clip_grad_value": ("clamp_dense", "clamp_rows"),
}


def source_dir() -> Path:
    """The folder holding the `.cu` sources: inside the installed package
    (`fastad/cuda/src`), or the repository's `cuda/` folder in a source tree."""
    installed = Path(__file__).resolve().parent / "src"
    if (installed / "common.cuh").is_file():
        return installed
    repo = Path(__file__).resolve().parents[2] / "cuda"
    if (repo / "common.cuh").is_file():
        return repo
    raise FileNotFoundError(
        f"fastad's CUDA sources are missing: looked for common.cuh in {installed} and {repo}; "
        f"reinstall fastad (`pip install .` ships them inside the package)")


@functools.lru_cache(maxsize=None)
def program_source(family: str) -> str:
    """The full program text of a family: common.cuh, op_codes.h (the op codes rules.h
    includes on the host), rules.h, then `<family>.cu`."""
    if family not in FAMILIES:
        raise KeyError(f"unknown kernel family {family!r}; known: {sorted(FAMILIES)}")
    folder = source_dir()
    common = (folder / "common.cuh").read_text()
    ops_folder = Path(fastad.ops.elementwise.__file__).resolve().parent   # the CPU op families
    rules = (ops_folder / "rules.h").read_text()
    op_codes = (ops_folder / "op_codes.h").read_text()
    body = (folder / f"{family}.cu").read_text()
    return (f"{common}\n#line 1 \"op_codes.h\"\n{op_codes}\n#line 1 \"rules.h\"\n{rules}"
            f"\n#line 1 \"{family}.cu\"\n{body}")


def name_expressions(family: str) -> list[str]:
    """Every instantiation CuPy compiles for a family: each kernel for float and double."""
    return [f"{kernel}<{ctype}>" for kernel in FAMILIES[family] for ctype in CTYPE.values()]


def name_expression(kernel: str, dtype) -> str:
    """`"kernel<float>"` or `"kernel<double>"` for an array dtype."""
    try:
        return f"{kernel}<{CTYPE[np.dtype(dtype)]}>"
    except KeyError:
        raise TypeError(f"GPU kernels take float32 or float64 arrays, got {np.dtype(dtype)}") from None
