"""scaled_dot_product_attention and nn.MultiheadAttention against PyTorch (float64)."""
import numpy as np
import pytest
import torch

import fastad as fa
from vjp import check_vjp

F64 = np.float64


def rng(seed=0):
    return np.random.default_rng(seed)


def torch_sdpa(q, k, v, **kw):
    tensors = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    if isinstance(kw.get("attn_mask"), np.ndarray):
        kw["attn_mask"] = torch.tensor(kw["attn_mask"])
    return tensors, torch.nn.functional.scaled_dot_product_attention(*tensors, **kw)


def compare_sdpa(q, k, v, **kw):
    leaves = [fa.Parameter(a, dtype=F64) for a in (q, k, v)]
    out = fa.scaled_dot_product_attention(*leaves, **kw)
    tensors, expected = torch_sdpa(q, k, v, **kw)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    cot = rng(9).normal(size=out.shape)
    out.backward(cot)
    expected.backward(torch.tensor(cot))
    for leaf, tensor in zip(leaves, tensors):
        np.testing.assert_allclose(leaf.grad, tensor.grad.numpy(), rtol=1e-10, atol=1e-12)
    return out, leaves


QKV_SHAPES = [((5, 4), (6, 4), (6, 3)), ((2, 5, 4), (2, 6, 4), (2, 6, 4)),
              ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 2)), ((1, 1, 4), (1, 1, 4), (1, 1, 1))]


@pytest.mark.parametrize("shapes", QKV_SHAPES)
def test_sdpa_matches_torch_without_a_mask(shapes):
    r = rng(1)
    compare_sdpa(*(r.normal(size=s) for s in shapes))


@pytest.mark.parametrize("mask_shape", [(5, 6), (2, 1, 5, 6), (1, 6), (2, 3, 5, 6)])
def test_sdpa_boolean_mask_keeps_true_positions(mask_shape):
    r = rng(2)
    q, k, v = r.normal(size=(2, 3, 5, 4)), r.normal(size=(2, 3, 6, 4)), r.normal(size=(2, 3, 6, 4))
    mask = r.random(mask_shape) > 0.4
    mask[..., 0] = True                        # no row masked out entirely
    out, _ = compare_sdpa(q, k, v, attn_mask=mask)
    free, _ = compare_sdpa(q, k, v)
    assert not np.allclose(out.value, free.value)


def test_sdpa_float_mask_is_added_and_may_be_a_variable():
    r = rng(3)
    q, k, v = r.normal(size=(2, 5, 4)), r.normal(size=(2, 6, 4)), r.normal(size=(2, 6, 4))
    bias = r.normal(size=(5, 6))
    compare_sdpa(q, k, v, attn_mask=bias)
    # a float Variable mask gets a gradient (a learned relative-position bias)
    check_vjp(lambda b: fa.scaled_dot_product_attention(
        fa.Input(q, dtype=F64), fa.Input(k, dtype=F64), fa.Input(v, dtype=F64), attn_mask=b), bias)


@pytest.mark.parametrize("lengths", [(5, 5), (4, 7), (6, 3)])
def test_sdpa_causal_and_scale(lengths):
    r = rng(4)
    L, S = lengths
    q, k, v = r.normal(size=(2, L, 4)), r.normal(size=(2, S, 4)), r.normal(size=(2, S, 3))
    compare_sdpa(q, k, v, is_causal=True)
    compare_sdpa(q, k, v, scale=0.37)
    compare_sdpa(q, k, v, is_causal=True, scale=2.0)


def test_sdpa_row_masked_out_entirely_gives_zeros_as_torch():
    r = rng(5)
    q, k, v = r.normal(size=(3, 4)), r.normal(size=(5, 4)), r.normal(size=(5, 2))
    mask = r.random((3, 5)) > 0.3
    mask[1] = False
    out, leaves = compare_sdpa(q, k, v, attn_mask=mask)
    np.testing.assert_array_equal(out.value[1], 0.0)
    assert np.isfinite(leaves[0].grad).all()


def test_sdpa_gradients_against_finite_differences_and_replay():
    r = rng(6)
    q, k, v = r.normal(size=(2, 4, 3)), r.normal(size=(2, 5, 3)), r.normal(size=(2, 5, 3))
    mask = np.tril(np.ones((4, 5), dtype=bool), 1)
    check_vjp(lambda a, b, c: fa.scaled_dot_product_attention(a, b, c, attn_mask=mask), q, k, v)
    Q = fa.Input(q, dtype=F64)
    out = fa.scaled_dot_product_attention(Q, fa.Input(k, dtype=F64), fa.Input(v, dtype=F64),
                                          is_causal=True)
    q2 = r.normal(size=q.shape)
    Q.set_value(q2)
    out.forward()
    _, expected = torch_sdpa(q2, k, v, is_causal=True)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-10)


def test_masked_attention_passes_detect_anomaly():
    r = rng(8)
    q = fa.Parameter(r.normal(size=(2, 4, 3)), dtype=F64)
    with fa.detect_anomaly():
        out = fa.scaled_dot_product_attention(q, q, q, is_causal=True)
        out.sum().backward()
    _, expected = torch_sdpa(q.value, q.value, q.value, is_causal=True)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-12)


def test_sdpa_float32():
    r = rng(7)
    q, k, v = (r.normal(size=(2, 4, 3)).astype(np.float32) for _ in range(3))
    out = fa.scaled_dot_product_attention(fa.Input(q), fa.Input(k), fa.Input(v), is_causal=True)
    assert out.dtype == np.float32
    expected = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
    np.testing.assert_allclose(out.value, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_sdpa_bad_input():
    q = fa.Input(np.zeros((2, 5, 4)))
    k = fa.Input(np.zeros((2, 6, 4)))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(5, 5\).*\(2, 5, 6\)"):
        fa.scaled_dot_product_attention(q, k, k, attn_mask=np.ones((5, 5), dtype=bool))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(3, 5, 6\).*\(2, 5, 6\)"):
        fa.scaled_dot_product_attention(q, k, k, attn_mask=np.ones((3, 5, 6)))
    with pytest.raises(ValueError, match="not both"):
        fa.scaled_dot_product_attention(q, k, k, attn_mask=np.ones((5, 6), bool), is_causal=True)
    with pytest.raises(ValueError, match=r"query \(2, 5, 4\), key \(2, 6, 3\)"):
        fa.scaled_dot_product_attention(q, fa.Input(np.zeros((2, 6, 3))), k)
    with pytest.raises(ValueError, match="value"):
        fa.scaled_dot_product_attention(q, k, fa.Input(np.zeros((2, 7, 4))))
    with pytest.raises(ValueError, match="query must have shape"):
        fa.scaled_dot_product_attention(fa.Input(np.zeros(4)), k, k)
    with pytest.raises(TypeError, match="key must be a float fastad Variable"):
        fa.scaled_dot_product_attention(q, np.zeros((2, 6, 4)), k)
    with pytest.raises(TypeError, match="attn_mask must be boolean or float"):
        fa.scaled_dot_product_attention(q, k, k, attn_mask=np.array([["a"] * 6] * 5))
    with pytest.raises(TypeError, match="scale"):
        fa.scaled_dot_product_attention(q, k, k, scale="big")


# ------------------------------------------------------------------ MultiheadAttention

def twin(embed_dim, heads, bias=True, batch_first=True, seed=0):
    """A torch MultiheadAttention and a fastad one holding the same weights."""
    torch.manual_seed(seed)
    theirs = torch.nn.MultiheadAttention(embed_dim, heads, bias=bias, batch_first=batch_first,
                                         dtype=torch.float64)
    if bias:      # torch starts the biases at zero: make them count
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = fa.nn.MultiheadAttention(embed_dim, heads, bias=bias, batch_first=batch_first,
                                    dtype=F64)
    ours.load_state_dict(theirs.state_dict())       # the same names and layouts
    return theirs, ours


def compare_mha(theirs, ours, q, k, v, **kw):
    leaves = [fa.Input(a, dtype=F64, requires_grad=True) for a in (q, k, v)]
    out, weights = ours(*leaves, **kw)
    tensors = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    tkw = {key: torch.tensor(val) if isinstance(val, np.ndarray) else val for key, val in kw.items()}
    t_out, t_weights = theirs(*tensors, **tkw)
    np.testing.assert_allclose(out.value, t_out.detach().numpy(), rtol=1e-9, atol=1e-12)
    if t_weights is None:
        assert weights is None
    else:
        np.testing.assert_allclose(weights.value, t_weights.detach().numpy(), rtol=1e-9, atol=1e-12)
    cot = rng(11).normal(size=out.shape)
    out.backward(cot)
    t_out.backward(torch.tensor(cot))
    for leaf, tensor in zip(leaves, tensors):
        if tensor.grad is not None:
            np.testing.assert_allclose(leaf.grad, tensor.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.in_proj_weight.grad, theirs.in_proj_weight.grad.numpy(),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.out_proj.weight.grad, theirs.out_proj.weight.grad.numpy(),
                               rtol=1e-9, atol=1e-12)
    if ours.in_proj_bias is not None:
        np.testing.assert_allclose(ours.in_proj_bias.grad, theirs.in_proj_bias.grad.numpy(),
                                   rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ours.out_proj.bias.grad, theirs.out_proj.bias.grad.numpy(),
                                   rtol=1e-9, atol=1e-12)
    return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_mha_self_and_cross_attention_match_torch(bias, average):
    theirs, ours = twin(8, 2, bias=bias)
    r = rng(12)
    x, mem = r.normal(size=(3, 4, 8)), r.normal(size=(3, 6, 8))
    compare_mha(theirs, ours, x, x, x, average_attn_weights=average)
    ours.zero_grad(); theirs.zero_grad()
    compare_mha(theirs, ours, x, mem, mem, average_attn_weights=average)


def test_mha_masks_match_torch():
    theirs, ours = twin(12, 3)
    r = rng(13)
    q, kv = r.normal(size=(2, 4, 12)), r.normal(size=(2, 5, 12))
    padding = np.array([[False, False, True, False, True], [False, True, True, True, False]])
    attn = r.random((4, 5)) > 0.7
    attn[:, 0] = False                          # True masks out here: keep key 0 everywhere
    compare_mha(theirs, ours, q, kv, kv, key_padding_mask=padding)
    for mask in (attn, r.normal(size=(4, 5)), np.where(r.random((6, 4, 5)) > 0.8, -np.inf, 0.0)):
        ours.zero_grad(); theirs.zero_grad()
        compare_mha(theirs, ours, q, kv, kv, attn_mask=mask, key_padding_mask=padding)


def test_mha_causal_need_weights_and_sequence_first():
    theirs, ours = twin(8, 4, batch_first=False)
    r = rng(14)
    x = r.normal(size=(5, 2, 8))               # (L, batch, E)
    causal = ~np.tril(np.ones((5, 5), dtype=bool))
    leaves = [fa.Input(x, dtype=F64)] * 3
    out, weights = ours(*leaves, is_causal=True, need_weights=False)
    assert weights is None and out.shape == (5, 2, 8)
    ours.zero_grad()
    expected = compare_mha(theirs, ours, x, x, x, attn_mask=causal, need_weights=False)
    np.testing.assert_allclose(out.value, expected.value, rtol=1e-12)


def test_mha_gradcheck_replay_and_float32():
    attn = fa.nn.MultiheadAttention(6, 2, dtype=F64, generator=np.random.default_rng(0))
    r = rng(15)
    x = r.normal(size=(2, 3, 6))
    fa.gradcheck(lambda a: (attn(a, a, a)[0] ** 2).sum(), x)
    X = fa.Input(x, dtype=F64)
    out = attn(X, X, X)[0]
    X.set_value(2 * x)
    out.forward()
    fresh = attn(fa.Input(2 * x, dtype=F64), *[fa.Input(2 * x, dtype=F64)] * 2)[0]
    np.testing.assert_allclose(out.value, fresh.value, rtol=1e-12)
    small = fa.nn.MultiheadAttention(6, 3)
    y, w = small(*[fa.Input(x.astype(np.float32))] * 3)
    assert y.dtype == np.float32 and w.shape == (2, 3, 3)


def test_mha_bad_input():
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        fa.nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="num_heads must be >= 1, got 0"):
        fa.nn.MultiheadAttention(8, 0)
    attn = fa.nn.MultiheadAttention(8, 2)
    x = fa.Input(np.zeros((2, 4, 8)))
    with pytest.raises(ValueError, match=r"query must have shape \(batch, length, embed_dim\).*\(2, 4, 6\)"):
        attn(fa.Input(np.zeros((2, 4, 6))), x, x)
    with pytest.raises(ValueError, match=r"attn_mask has shape \(4, 3\); expected \(4, 4\)"):
        attn(x, x, x, attn_mask=np.zeros((4, 3), bool))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(4,\); expected .*\(2, 4\)"):
        attn(x, x, x, key_padding_mask=np.zeros(4, bool))
    with pytest.raises(ValueError, match="key"):
        attn(x, x, fa.Input(np.zeros((2, 5, 8))))
