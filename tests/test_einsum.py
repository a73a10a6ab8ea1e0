"""einsum: values and gradients against torch.einsum (float64) and finite differences,
the plan onto matmul, replay, and the errors for subscripts it cannot do."""
import numpy as np
import pytest
import torch

import fastad as fa
from fastad.ops.linalg import Matmul
from shape_helpers import assert_replay_matches_fresh, torch_weighted_grads, weighted_sum

rng = np.random.default_rng(18)

TWO = [("ij,jk->ik", (2, 3), (3, 4)), ("ij,jk", (2, 3), (3, 4)), ("ij,kj->ik", (2, 3), (4, 3)),
       ("ji,jk->ki", (3, 2), (3, 4)), ("bij,bjk->bik", (5, 2, 3), (5, 3, 4)),
       ("bij,bkj->bki", (2, 3, 4), (2, 5, 4)), ("bij,jk->kbi", (2, 3, 4), (4, 5)),
       ("i,i->", (3,), (3,)), ("i,j->ij", (3,), (4,)), ("ij,ij->ij", (2, 3), (2, 3)),
       ("ij,ij->", (2, 3), (2, 3)), ("ij,j->i", (2, 3), (3,)), ("i,->i", (3,), ()),
       ("abc,cd->", (2, 3, 4), (4, 5)), ("iij,jk->ik", (3, 3, 2), (2, 4)),
       ("ijk,ikl->jl", (2, 3, 4), (2, 4, 5)), ("ij,kl->ijkl", (2, 3), (2, 2)),
       ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)), ("ij,jk->ik", (2, 0), (0, 3)),
       ("ij,jk->ik", (0, 3), (3, 2)), ("i j , j k -> i k", (2, 3), (3, 2)),
       ("Ab,bC->AC", (2, 3), (3, 2))]
ONE = [("ij->ji", (2, 3)), ("ii->", (3, 3)), ("ii->i", (3, 3)), ("ij->j", (2, 3)),
       ("ij->", (2, 3)), ("ijk->kj", (2, 3, 4)), ("ij", (2, 3)), ("ji", (2, 3)), ("ii", (3, 3)),
       ("iji->j", (3, 2, 3)), ("->", ()), ("i->i", (0,))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("subscripts, sa, sb", TWO, ids=[c[0] for c in TWO])
def test_two_operands_match_torch(subscripts, sa, sb, dtype):
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    pa, pb = fa.Parameter(a, dtype=dtype), fa.Parameter(b, dtype=dtype)
    y = fa.einsum(subscripts, pa, pb)
    expected = torch.einsum(subscripts.replace(" ", ""), torch.tensor(a), torch.tensor(b)).numpy()
    assert y.shape == expected.shape and y.dtype == dtype
    np.testing.assert_allclose(y.value, expected, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)
    weighted_sum(y).backward()
    ga, gb = torch_weighted_grads(torch, lambda u, v: torch.einsum(subscripts.replace(" ", ""), u, v),
                                  a, b)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pa.grad, ga, **tol)
    np.testing.assert_allclose(pb.grad, gb, **tol)
    if dtype == np.float64:
        assert fa.gradcheck(lambda u, v: weighted_sum(fa.einsum(subscripts, u, v)), a, b)


@pytest.mark.parametrize("subscripts, shape", ONE, ids=[c[0] for c in ONE])
def test_one_operand_matches_torch(subscripts, shape):
    a = rng.standard_normal(shape)
    p = fa.Parameter(a, dtype=np.float64)
    y = fa.einsum(subscripts, p)
    expected = torch.einsum(subscripts, torch.tensor(a)).numpy()
    assert y.shape == expected.shape
    np.testing.assert_allclose(y.value, expected, rtol=1e-12, atol=1e-12)
    weighted_sum(y).backward()
    (g,) = torch_weighted_grads(torch, lambda u: torch.einsum(subscripts, u), a)
    np.testing.assert_allclose(p.grad, g, rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda u: weighted_sum(fa.einsum(subscripts, u)), a)


def test_a_contraction_is_one_matmul_and_an_operand_may_be_an_array():
    a, b = rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 3, 5))
    y = fa.einsum("bij,bjk->bik", fa.Parameter(a, dtype=np.float64), b)
    assert isinstance(y, Matmul)                        # no transpose or reshape was needed
    np.testing.assert_allclose(y.value, np.einsum("bij,bjk->bik", a, b), rtol=1e-12)


def test_replay_after_set_value_matches_a_fresh_build():
    w = rng.standard_normal((3, 4))

    def make(x):
        p = fa.Parameter(w, dtype=np.float64)
        return fa.einsum("bi,ij->jb", x, p), [p]

    assert_replay_matches_fresh(make, [rng.standard_normal((2, 3))], [rng.standard_normal((2, 3))])


@pytest.mark.parametrize("subscripts, message", [
    ("ij,jk->il", "output letter 'l' is in no input term"),
    ("ij,jk->iik", "output letter 'i' appears more than once"),
    ("ij,j->i", r"input term 1 'j' names 1 axes, but operand 1 has shape \(3, 4\)"),
    ("ij->ij", r"1 input term\(s\) for 2 operand\(s\)"),
    ("ij,jk,kl->il", r"3 input term\(s\) for 2 operand\(s\)"),
    ("...j,jk->...k", r"'\.\.\.' \(ellipsis\) is not supported"),
    ("i1,jk", "'1' in input term 0 is not a letter"),
    ("ij,jk->i_k", "'_' in the output is not a letter"),
    ("ij->->", "'->' must appear at most once"),
    ("ij-jk", "'->' must appear at most once"),
    ("ik,jk->ij", "letter 'k' has length 3 in one place and 4 in operand 1"),
])
def test_bad_subscripts_name_the_problem_and_the_supported_forms(subscripts, message):
    a, b = fa.Parameter(np.ones((2, 3))), fa.Parameter(np.ones((3, 4)))
    with pytest.raises(ValueError, match=message) as info:
        fa.einsum(subscripts, a, b)
    assert "supported: one or two operands" in str(info.value)
    assert repr(subscripts) in str(info.value)


def test_bad_operands():
    with pytest.raises(TypeError, match="subscripts must be a str"):
        fa.einsum(["ij"], fa.Parameter(np.ones((2, 2))))
    with pytest.raises(TypeError, match="IndexInput"):
        fa.einsum("i->i", fa.IndexInput([1, 2]))
    with pytest.raises(TypeError, match="mixed dtypes"):
        fa.einsum("i,i->", fa.Parameter(np.ones(2), dtype=np.float32),
                  fa.Parameter(np.ones(2), dtype=np.float64))
    with pytest.raises(ValueError, match="1 input term"):
        fa.einsum("ii", fa.Parameter(np.ones((2, 3))), fa.Parameter(np.ones(2)))
    with pytest.raises(ValueError, match="letter 'i' has length 2 in one place and 3"):
        fa.einsum("ii", fa.Parameter(np.ones((2, 3))))
