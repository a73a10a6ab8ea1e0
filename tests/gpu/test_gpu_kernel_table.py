"""fastad.cuda.kernels.OPS, the table of which kernels each op launches, against
the kernels each op really launches in a forward and backward (or a step)."""
import numpy as np
import pytest

import fastad as fa
from fastad.cuda import kernels
from fastad.ops import generate, manifest
from fastad.ops.fused import lstm_cell

SEEDING = {"fill", "copy_or_add"}            # a backward pass's start: ones, or a given seed

rng = np.random.default_rng(0)


def P(*shape):
    return fa.Parameter(rng.standard_normal(shape), device="cuda")


def ids(values):
    return fa.IndexInput(values, device="cuda")


# every unary function of the op manifest that takes x alone, and every generated pointwise loss
UNARY = {op: (lambda f: lambda: f(P(3, 2)))(getattr(fa, op))
         for op in generate.public_names("unary") if op not in ("pow", "clip")}
PLAIN_LOSSES = {op["name"]: (lambda f: lambda: f(P(3), P(3)))(getattr(fa.nn, op["name"]))
                for op in manifest.POINTWISE_LOSSES if op.get("builder") == "generated"}
BUILDS = {
    **UNARY,
    **PLAIN_LOSSES,
    "pow": lambda: fa.pow(fa.pow(P(3, 4), 3), P(4)),   # a number exponent, then a broadcast one
    "clip": lambda: fa.clip(P(3, 2), -0.5, 0.5),
    "maximum": lambda: fa.maximum(P(3, 4), P(4)),
    "minimum": lambda: fa.minimum(P(3, 4), P(4)),
    **{op: (lambda f: lambda: f(P(3, 4), P(4)))(getattr(fa, op)) for op in kernels.COMPARISONS},
    "where": lambda: fa.where(rng.random((3, 4)) > 0.5, P(3, 4), P(4)),
    "add": lambda: fa.add(P(700, 3), P(3)),          # a broadcast bias: a chunked sum
    "sub": lambda: fa.sub(P(700, 3), P(3)),
    "mul": lambda: fa.mul(P(3, 4), P(4)),
    "div": lambda: fa.div(P(3, 4), P(4)),
    "vector_dot": lambda: fa.vector_dot(P(3, 2), P(3, 2)),
    "matmul": lambda: fa.matmul(P(3, 4), P(4, 2)),
    "sum": lambda: fa.sum(P(3000)),
    "mean": lambda: fa.mean(P(3, 4), axis=0),
    "max": lambda: fa.max(P(3, 4), axis=1),
    "logsumexp": lambda: fa.logsumexp(P(3, 4)),
    "softmax": lambda: fa.softmax(P(3, 4)),
    "log_softmax": lambda: fa.log_softmax(P(3, 4)),
    "reshape": lambda: fa.reshape(P(3, 4), (4, 3)),
    "transpose": lambda: fa.transpose(P(3, 4)),
    "getitem": lambda: P(3, 4)[[0, 0, 2]],
    "concat": lambda: fa.concat([P(2, 2), P(2, 2)]),
    "stack": lambda: fa.stack([P(2), P(2)]),
    "take": lambda: fa.take(P(5, 2), ids([1, 1, 3])),
    "embedding": lambda: fa.embedding(P(5, 2), ids([1, 1, 3]), padding_idx=3, max_norm=0.5),
    "embedding_bag": lambda: fa.embedding_bag(P(5, 2), ids([1, 1, 3, 4]), [0, 2], mode="sum",
                                              per_sample_weights=P(4)),
    "cross_entropy": lambda: fa.nn.cross_entropy(P(3, 4), ids([1, 2, 3])),
    "nll_loss": lambda: fa.nn.nll_loss(P(3, 4), [1, 2, 3]),
    "bce_with_logits": lambda: fa.nn.bce_with_logits(P(3), P(3)),
    "huber": lambda: fa.nn.huber(P(3), P(3)),
    "conv1d": lambda: fa.conv1d(P(2, 2, 5), P(3, 2, 2), P(3)),
    "conv2d": lambda: fa.conv2d(P(2, 2, 4, 4), P(3, 2, 2, 2), P(3)),
    "max_pool1d": lambda: fa.max_pool1d(P(1, 2, 4), 2),
    "max_pool2d": lambda: fa.max_pool2d(P(1, 2, 4, 4), 2),
    "avg_pool1d": lambda: fa.avg_pool1d(P(1, 2, 4), 2),
    "avg_pool2d": lambda: fa.avg_pool2d(P(1, 2, 4, 4), 2),
    "adaptive_avg_pool2d": lambda: fa.adaptive_avg_pool2d(P(1, 2, 4, 4), 3),
    "batch_norm": lambda: fa.nn.functional.batch_norm(P(4, 3), None, None, P(3), P(3),
                                                      training=True),
    "min": lambda: fa.min(P(3, 4), axis=1),
    "norm": lambda: fa.norm(P(3, 4), axis=0),
    "argmax": lambda: fa.argmax(P(3, 4), axis=1),
    "argmin": lambda: fa.argmin(P(3, 4)),
    "cumsum": lambda: fa.cumsum(P(3, 4), axis=0),
    "take_along_axis": lambda: fa.take_along_axis(P(5, 2), ids([[1, 0], [1, 4]]), 0),
    "flip": lambda: fa.flip(P(3, 4)),
    "tile": lambda: fa.tile(P(3), 2),
    "kl_div": lambda: fa.nn.kl_div(P(3), P(3)),
    "kl_div_log_target": lambda: fa.nn.kl_div(P(3), P(3), log_target=True),
    "smooth_l1": lambda: fa.nn.smooth_l1(P(3), P(3)),
    "binary_cross_entropy": lambda: fa.nn.binary_cross_entropy(
        fa.Parameter([0.2, 0.7], device="cuda"), fa.Parameter([0.5, 1.0], device="cuda")),
    "poisson_nll": lambda: fa.nn.poisson_nll(P(3), P(3)),
    "poisson_nll_full": lambda: fa.nn.poisson_nll(P(3), P(3), full=True),
    "poisson_nll_rate": lambda: fa.nn.poisson_nll(P(3), P(3), log_input=False),
    "poisson_nll_rate_full": lambda: fa.nn.poisson_nll(P(3), P(3), log_input=False, full=True),
    "gaussian_nll": lambda: fa.nn.gaussian_nll(P(3), P(3), fa.Parameter([0.5, 1.0, 2.0], device="cuda")),
}


@pytest.fixture
def launched(backend, monkeypatch):
    seen = []
    original = backend.launch
    monkeypatch.setattr(backend, "launch", lambda kernel, *args: (seen.append(kernel),
                                                                  original(kernel, *args))[1])
    return seen


def test_every_listed_kernel_exists_and_every_op_is_listed():
    known = set(kernels.KERNEL_FAMILY)
    for op, names in kernels.OPS.items():
        assert set(names) <= known, f"{op}: {sorted(set(names) - known)} not in kernels.FAMILIES"
    assert set(BUILDS) | {"SGD", "Adagrad", "Adam", "AdamW", "RMSprop", "Adadelta", "Adamax",
                          "NAdam", "RAdam", "FTRL", "clip_grad_norm", "clip_grad_value"} == set(kernels.OPS)


@pytest.mark.parametrize("op", sorted(BUILDS))
def test_an_op_launches_exactly_its_listed_kernels(launched, op):
    y = BUILDS[op]()
    if y.requires_grad:                  # argmax, argmin and comparisons have no gradient
        y.backward(np.ones(y.shape) if y.size != 1 else None)
    listed = set(kernels.OPS[op])
    assert listed - SEEDING <= set(launched) <= listed | SEEDING, \
        f"{op} launched {sorted(set(launched))}; kernels.OPS lists {sorted(listed)}"


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW", "RMSprop", "Adadelta",
                                  "Adamax", "NAdam", "RAdam", "FTRL"])
def test_an_optimizer_step_launches_its_listed_kernels(launched, name):
    dense, table = P(3, 2), P(6, 2)
    loss = (dense * dense).sum() + fa.take(table, ids([1, 1, 4])).sum()
    opt = getattr(fa.optim, name)([dense, table], lr=0.1)
    loss.backward()
    del launched[:]
    opt.step()
    assert set(launched) == set(kernels.OPS[name])


def test_clipping_launches_its_listed_kernels(launched):
    dense, table = P(3, 2), P(6, 2)
    ((dense * 100.0).sum() + fa.take(table, ids([1, 1, 4])).sum()).backward()
    del launched[:]
    fa.optim.clip_grad_norm([dense, table], 0.1)
    assert set(launched) == set(kernels.OPS["clip_grad_norm"])
    del launched[:]
    fa.optim.clip_grad_value([dense, table], 0.1)
    assert set(launched) == set(kernels.OPS["clip_grad_value"])


def test_a_recurrent_cell_is_made_of_listed_ops(launched):
    x, h, c = P(2, 3), P(2, 4), P(2, 4)
    hc = lstm_cell(x, h, c, P(16, 3), P(16, 4), P(16), P(16))
    hc.backward(np.ones(hc.shape))
    allowed = set().union(*kernels.OPS.values()) | SEEDING
    assert set(launched) <= allowed
