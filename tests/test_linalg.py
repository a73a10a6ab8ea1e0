"""matmul and vector_dot: values, gradients, both sides of the BLAS crossover, replay, bad input."""
import numpy as np
import pytest

import fastad as fa
from fastad.ops import linalg
from fastad.ops.linalg import matmul, vector_dot
from fastad.ops.shape import stack, transpose
from shape_helpers import (assert_replay_matches_fresh, torch_weighted_grads, weighted_sum,
                           weights_for)

rng = np.random.default_rng(0)
ALWAYS_LOOPS, ALWAYS_BLAS = 10**18, 0


def data(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(params=["loops", "blas"])
def kernel(request):
    """Run the test once with the C loops and once with BLAS, whatever the shapes."""
    old = linalg._set_blas_min_work(ALWAYS_LOOPS if request.param == "loops" else ALWAYS_BLAS)
    yield request.param
    linalg._set_blas_min_work(old)


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 4), (4, 1)),
    ((1, 6), (6, 3)),
    ((2, 3, 4), (2, 4, 5)),         # batched
    ((2, 3, 4), (4, 5)),            # shared right operand
    ((3, 4), (2, 4, 5)),            # shared left operand
    ((2, 2, 3, 4), (2, 2, 4, 2)),   # two batch axes
    ((4,), (4,)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((0, 4), (4, 5)),               # empty outputs and k == 0
    ((3, 4), (4, 0)),
    ((3, 0), (0, 5)),
    ((0,), (0,)),
    ((0, 3, 4), (4, 5)),
    ((3, 4), (0, 4, 5)),
    ((2, 3, 0), (2, 0, 5)),
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_values_and_gradients(kernel, sa, sb):
    a, b = data(*sa), data(*sb)
    c = matmul(fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64))
    assert c.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(c.value, np.matmul(a, b), rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda pa, pb: weighted_sum(matmul(pa, pb)), a, b)


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_gradients_match_pytorch(kernel, sa, sb):
    torch = pytest.importorskip("torch")
    a, b = data(*sa), data(*sb)
    pa, pb = fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64)
    weighted_sum(matmul(pa, pb)).backward()
    ga, gb = torch_weighted_grads(torch, torch.matmul, a, b)
    np.testing.assert_allclose(pa.grad, ga, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pb.grad, gb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("build", [
    lambda p: matmul(p, p),                                  # both operands one Variable
    lambda p: matmul(p, transpose(p)),
    lambda p: fa.add(matmul(p, p), p),                        # and a third contribution
    lambda p: matmul(p, stack([fa.mul(p, p), p])),           # shared left operand, batch 2
], ids=["p@p", "p@p.T", "p@p+p", "shared"])
def test_matmul_gradient_contributions_add_up(kernel, build):
    assert fa.gradcheck(lambda p: weighted_sum(build(p)), data(3, 3))


def test_matmul_shared_operand_gradient_sums_over_the_batch(kernel):
    w, xs = data(3, 4), data(5, 4, 2)
    assert fa.gradcheck(lambda pw, px: weighted_sum(matmul(pw, px)), w, xs)
    assert fa.gradcheck(lambda px, pw: weighted_sum(matmul(px, pw)), data(5, 2, 3), w)


# One row or one column takes BLAS's matrix-vector product: (1, 256, 128) and (40, 30, 1) in the
# forward pass, and each of the four transpose cases among the gradients of those and (30, 1, 40).
@pytest.mark.parametrize("m, k, n", [(2, 3, 4), (1, 7, 5), (6, 6, 6), (64, 80, 48), (1, 256, 128),
                                     (33, 17, 65), (40, 30, 1), (30, 1, 40), (1, 9, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blas_and_c_loops_agree(m, k, n, dtype):
    a, b, seed = data(m, k, dtype=dtype), data(k, n, dtype=dtype), data(m, n, dtype=dtype)
    results = {}
    for name, threshold in (("loops", ALWAYS_LOOPS), ("blas", ALWAYS_BLAS)):
        old = linalg._set_blas_min_work(threshold)
        try:
            pa, pb = fa.Parameter(a, dtype=dtype), fa.Parameter(b, dtype=dtype)
            c = matmul(pa, pb)
        finally:
            linalg._set_blas_min_work(old)
        c.backward(seed)
        results[name] = (c.value, pa.grad, pb.grad)
    a64, b64, seed64 = (x.astype(np.float64) for x in (a, b, seed))
    exact = (a64 @ b64, seed64 @ b64.T, a64.T @ seed64)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for name in ("loops", "blas"):
        for got, want, what in zip(results[name], exact, ("value", "grad a", "grad b")):
            assert got.dtype == dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(max(m, n, k)),
                                       err_msg=f"{name}: {what}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_row_gradients_of_a_shared_weight_add_as_outer_products(kernel, dtype):
    # each (1, k) @ W adds the outer product x^T g into W's gradient: written by the first, added by the rest
    xs, w, seeds = data(3, 1, 16, dtype=dtype), data(16, 24, dtype=dtype), data(3, 1, 24, dtype=dtype)
    pw = fa.Parameter(w, dtype=dtype)
    px = [fa.Parameter(x, dtype=dtype) for x in xs]
    out = fa.concat([matmul(x, pw) for x in px], axis=0)
    out.backward(seeds.reshape(3, 24))
    exact = sum(x.astype(np.float64).T @ g.astype(np.float64) for x, g in zip(xs, seeds))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(pw.grad, exact, rtol=tol, atol=tol)
    for x, g in zip(px, seeds):
        np.testing.assert_allclose(x.grad, g.astype(np.float64) @ w.astype(np.float64).T, rtol=tol, atol=tol)


def test_default_crossover_puts_tiny_products_in_loops_and_large_in_blas():
    small, large = (2, 2, 2), (16, 20, 24)
    assert np.prod(small) < linalg.BLAS_MIN_WORK <= np.prod(large)
    for m, k, n in (small, large):
        assert fa.gradcheck(lambda pa, pb: weighted_sum(matmul(pa, pb)), data(m, k), data(k, n))


def test_matmul_float32(kernel):
    torch = pytest.importorskip("torch")
    a, b = data(5, 3, 4, dtype=np.float32), data(4, 6, dtype=np.float32)
    pa, pb = fa.Parameter(a), fa.Parameter(b)
    c = pa @ pb
    assert c.dtype == np.float32
    np.testing.assert_allclose(c.value, a @ b, rtol=1e-5, atol=1e-6)
    weighted_sum(c).backward()
    assert pa.grad.dtype == np.float32
    ga, gb = torch_weighted_grads(torch, torch.matmul, a, b)
    np.testing.assert_allclose(pa.grad, ga, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pb.grad, gb, rtol=1e-5, atol=1e-5)


def test_matmul_operator_with_numpy_operands():
    a = data(3, 4)
    w = fa.Parameter(data(4, 2), dtype=np.float64)
    np.testing.assert_allclose((a @ w).value, a @ w.value)                 # __rmatmul__
    np.testing.assert_allclose((w.T @ a.T).value, w.value.T @ a.T)         # __matmul__
    f32 = fa.Parameter(data(4, 2, dtype=np.float32))
    assert (a @ f32).dtype == np.float32                                    # the array adopts it
    x = fa.Input(data(4, 3).T, dtype=np.float64)                           # non-contiguous source
    np.testing.assert_allclose((x @ w).value, x.value @ w.value)
    (a.T[:, ::2].T @ w).backward(np.ones((2, 2)))                          # strided numpy operand
    np.testing.assert_allclose(w.grad, a.T[:, ::2].T.T @ np.ones((2, 2)))


def test_matmul_bad_input():
    a = fa.Parameter(data(3, 4))
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 2\).*inner dimensions.*4.*5"):
        matmul(a, fa.Parameter(data(5, 2)))
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(3,\).*inner"):
        a @ fa.Parameter(data(3))
    with pytest.raises(ValueError, match=r"batch axes \(2,\) and \(3,\)"):
        matmul(fa.Parameter(data(2, 3, 4)), fa.Parameter(data(3, 4, 5)))
    with pytest.raises(ValueError, match="at least 1 axis"):
        a @ 2.0
    with pytest.raises(TypeError, match="mixed dtypes"):
        a @ fa.Parameter(data(4, 2), dtype=np.float64)
    with pytest.raises(TypeError, match="IndexInput"):
        matmul(a, fa.IndexInput([1, 2, 3, 0]))
    with pytest.raises(TypeError, match="at least one operand"):
        matmul(np.ones((2, 2)), np.ones((2, 2)))


def test_matmul_replay_after_set_value_matches_fresh_build(kernel):
    w0, w1 = data(4, 3), data(3)

    def build(x, y):
        p, q = fa.Parameter(w0, dtype=np.float64), fa.Parameter(w1, dtype=np.float64)
        return fa.tanh(matmul(matmul(x, p), q) + vector_dot(y, y)), [p, q]

    assert_replay_matches_fresh(build, [data(2, 5, 4), data(2, 5, 6)],
                                [data(2, 5, 4), data(2, 5, 6)])


# --------------------------------------------------------------- vector_dot

DOT_SHAPES = [(5, 3), (3,), (1, 4), (2, 3, 4), (0, 3), (3, 0), (0,)]


@pytest.mark.parametrize("shape", DOT_SHAPES)
def test_vector_dot_values_and_gradients(shape):
    a, b = data(*shape), data(*shape)
    y = vector_dot(fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64))
    assert y.shape == shape[:-1]
    np.testing.assert_allclose(y.value, (a * b).sum(-1), rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda pa, pb: weighted_sum(vector_dot(pa, pb)), a, b)
    assert fa.gradcheck(lambda pa: weighted_sum(vector_dot(pa, pa)), a)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_dot_matches_pytorch(dtype):
    torch = pytest.importorskip("torch")
    a, b = data(4, 6, dtype=dtype), data(4, 6, dtype=dtype)
    pa, pb = fa.Parameter(a, dtype=dtype), fa.Parameter(b, dtype=dtype)
    y = vector_dot(pa, pb)
    assert y.dtype == dtype
    weighted_sum(y).backward()
    ga, gb = torch_weighted_grads(torch, lambda x, z: (x * z).sum(-1), a, b)
    np.testing.assert_allclose(pa.grad, ga, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pb.grad, gb, rtol=1e-5, atol=1e-6)


def test_vector_dot_numpy_operand_and_replay():
    b = data(3, 2)
    p = fa.Parameter(data(3, 2), dtype=np.float64)
    np.testing.assert_allclose(vector_dot(b.T.T, p).value, (b * p.value).sum(-1))
    w = weights_for((3,))
    vector_dot(p, b).backward(w)
    np.testing.assert_allclose(p.grad, w[:, None] * b)
    assert_replay_matches_fresh(lambda x: (vector_dot(x * p, x), [p]), [data(3, 2)], [data(3, 2)])


@pytest.mark.parametrize("shapes", [((1, 4), (6, 4)), ((6, 4), (4,)), ((2, 1, 3), (5, 3)),
                                    ((0, 3), (1, 3)), ((3, 6, 4), (3, 1, 4))])
def test_vector_dot_broadcasts_the_leading_axes_like_pytorch(shapes):
    torch = pytest.importorskip("torch")
    a, b = data(*shapes[0]), data(*shapes[1])
    pa, pb = fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64)
    y = vector_dot(pa, pb)
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = (ta * tb).sum(-1)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = data(*y.shape)
    y.backward(w)
    ty.backward(torch.tensor(w))
    np.testing.assert_allclose(pa.grad, ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pb.grad, tb.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda qa, qb: weighted_sum(vector_dot(qa, qb)), a, b)


def test_broadcast_vector_dot_adds_into_a_shared_gradient_and_replays():
    # p feeds two broadcasting dots: its gradient is written by one and added by the other.
    centre = fa.Parameter(data(2, 1, 3), dtype=np.float64)
    rows = fa.Input(data(2, 4, 3), dtype=np.float64)

    def graph(x):
        return weighted_sum(vector_dot(x, centre) + vector_dot(centre, x * 2.0)), [centre]

    loss, _ = graph(rows)
    loss.backward()
    expected = 3 * (weights_for((2, 4))[:, :, None] * rows.value).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(centre.grad, expected)
    assert_replay_matches_fresh(graph, [data(2, 4, 3)], [data(2, 4, 3)])


def test_vector_dot_bad_input():
    with pytest.raises(ValueError, match=r"last axes.*\(3, 2\).*\(2, 3\)"):
        vector_dot(fa.Parameter(data(3, 2)), fa.Parameter(data(2, 3)))
    with pytest.raises(ValueError, match=r"\(3, 2\) and \(4, 2\) cannot be broadcast"):
        vector_dot(fa.Parameter(data(3, 2)), fa.Parameter(data(4, 2)))
    with pytest.raises(ValueError, match="last axis"):
        vector_dot(fa.Parameter(1.0), fa.Parameter(2.0))
    with pytest.raises(TypeError, match="mixed dtypes"):
        vector_dot(fa.Parameter(data(3)), fa.Parameter(data(3), dtype=np.float64))
