"""Public-API usage that mypy checks against the compiled modules' stubs (the .pyi beside each).

Not a pytest module (no test_ prefix). `python -m mypy --follow-imports=silent
tests/typing_sample.py` type-checks it (tests/test_stubs.py does so when mypy is installed);
`python tests/typing_sample.py` runs it.
Each assert_type pins what an editor or mypy infers for one call.
"""
import sys

import numpy as np
from numpy.typing import NDArray

import fastad as fa
from fastad.ops.conv import batch_norm
from fastad.ops.fastmath import approximate
from fastad.ops.fused import lstm_cell
from fastad.ops.losses import cross_entropy, mse

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type


def train_linear_model() -> float:
    w = fa.Parameter(np.random.default_rng(0).normal(size=(4, 3)), name="w")
    x = fa.Input(np.zeros((2, 4)))
    h = fa.tanh(x @ w)
    loss = (h * h + 1.0).sum()
    assert_type(loss, fa.Variable)
    assert_type(loss.item(), float)
    assert_type(loss.shape, tuple[int, ...])
    loss.backward()
    assert_type(w.grad, NDArray[np.floating] | None)
    assert_type(h.grad, NDArray[np.floating] | None)
    opt = fa.optim.Adam([w], lr=1e-2, betas=(0.9, 0.99))
    assert_type(opt.beta2, float)
    opt.step()
    opt.zero_grad()
    x.set_value(np.ones((2, 4)))
    assert_type(loss.forward(), fa.Variable)
    loss.backward()
    assert_type(fa.optim.clip_grad_norm(w, max_norm=1.0), float)
    state = opt.state_dict()
    assert_type(opt.load_state_dict(state), fa.optim.Adam)
    return loss.item()


def sparse_embedding_step() -> list[float]:
    table = fa.Parameter(np.zeros((10, 4)), dtype=np.float64)
    users = fa.IndexInput([1, 3])
    items = fa.IndexInput([2, 5])
    score = fa.vector_dot(table[users], fa.take(table, items))
    loss = -fa.logsigmoid(score).mean()
    loss.backward()
    assert_type(table.is_sparse_grad, bool)
    assert_type(table.sparse_rows(), NDArray[np.int64] | None)
    opt = fa.optim.SGD([table], lr=0.1)
    opt.zero_grad()
    feeds = {users: np.array([[0, 1], [2, 3]]), items: np.array([[4, 5], [6, 7]])}
    means = fa.train(loss, opt, feeds, epochs=2, shuffle=True, seed=0)
    assert_type(means, list[float])
    return means


def classifier_and_lstm() -> None:
    logits = fa.Parameter(np.zeros((2, 3)))
    assert_type(cross_entropy(logits, fa.IndexInput([0, 2]), reduction="sum"), fa.Variable)
    assert_type(mse(logits, np.ones((2, 3))), fa.Variable)
    joined = fa.concat([logits, fa.softmax(logits, axis=0)], axis=1)
    assert_type(fa.sum(joined, axis=(0, 1), keepdims=True), fa.Variable)
    assert_type(joined.reshape(3, 4).T[0, 1:], fa.Variable)
    x = fa.Input(np.ones((1, 2)))
    hc = lstm_cell(x, None, None, fa.Parameter(np.zeros((8, 2))), fa.Parameter(np.zeros((8, 2))),
                   fa.Parameter(np.zeros(8)), fa.Parameter(np.zeros(8)))
    assert_type(hc[0], fa.Variable)
    with fa.no_grad():
        assert_type((hc * 2).requires_grad, bool)
    assert_type(approximate("tanh", np.zeros(3)), NDArray[np.floating])


def convolutions() -> None:
    x = fa.Input(np.ones((2, 3, 8, 8)))
    y = fa.conv2d(x, fa.Parameter(np.ones((4, 3, 3, 3))), None, stride=(2, 1), padding=1)
    assert_type(fa.max_pool2d(y, 2), fa.Variable)
    assert_type(fa.adaptive_avg_pool2d(y, (1, 1)), fa.Variable)
    mean, var = np.zeros(4, np.float32), np.ones(4, np.float32)
    assert_type(batch_norm(y, mean, var, training=True, momentum=0.2), fa.Variable)


def masks_and_limits() -> None:
    x = fa.Parameter(np.array([-1.0, 2.0]))
    assert_type(x > 0, fa.Variable)
    assert_type(x == x, fa.Variable)
    assert_type(fa.where(x > 0, x, 0.01 * x), fa.Variable)
    assert_type(fa.where(np.array([True, False]), 1.0, x), fa.Variable)
    assert_type(fa.maximum(x, 1.0), fa.Variable)
    assert_type(fa.clip(x, None, 1.0), fa.Variable)
    assert_type(2.0 ** x, fa.Variable)
    assert_type(x ** x, fa.Variable)
    assert_type({x: 1}[x], int)


if __name__ == "__main__":
    print(train_linear_model(), sparse_embedding_step())
    classifier_and_lstm()
    convolutions()
    masks_and_limits()
