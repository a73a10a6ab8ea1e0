"""Row gathers (`p[ix]`, `fa.take`) and the sparse gradient accumulator."""
import numpy as np
import pytest

import fastad as fa
from vjp import check_vjp


def table(rows=6, dim=3, seed=0):
    return fa.Parameter(np.random.default_rng(seed).normal(size=(rows, dim)), dtype=np.float64)


def test_gather_values_and_shapes():
    E = table()
    ix = fa.IndexInput([4, 0, 4])
    rows = E[ix]
    assert rows.shape == (3, 3)
    np.testing.assert_array_equal(rows.value, E.value[[4, 0, 4]])
    ix2 = fa.IndexInput([[1, 2], [3, 4]])
    assert fa.take(E, ix2).shape == (2, 2, 3)
    v = fa.Parameter(np.arange(5.0), dtype=np.float64)
    np.testing.assert_array_equal(v[fa.IndexInput([3, 1])].value, [3.0, 1.0])


def test_repeated_ids_add_and_only_touched_rows_are_listed():
    E = table()
    rows = E[fa.IndexInput([4, 0, 4, 4])]
    cot = np.arange(12.0).reshape(4, 3)
    rows.backward(cot)
    assert E.is_sparse_grad
    assert sorted(E.sparse_rows()) == [0, 4]
    expected = np.zeros((6, 3))
    np.add.at(expected, [4, 0, 4, 4], cot)
    np.testing.assert_allclose(E.grad, expected)
    assert E.is_sparse_grad                # reading .grad changes nothing
    assert not E.grad.flags.writeable      # a dense copy of a sparse gradient


def test_sparse_gradients_accumulate_across_backward_calls():
    E = table()
    ix = fa.IndexInput([1, 2])
    rows = E[ix]
    rows.backward(np.ones((2, 3)))
    ix.set_value([2, 5])
    rows.forward()
    rows.backward(np.ones((2, 3)))
    assert sorted(E.sparse_rows()) == [1, 2, 5]
    expected = np.zeros((6, 3))
    expected[[1, 5]] = 1
    expected[2] = 2
    np.testing.assert_allclose(E.grad, expected)


def test_dense_and_sparse_contributions_add_in_either_order():
    for dense_first in (True, False):
        E = table()
        sparse_part = E[fa.IndexInput([3, 3, 1])]
        dense_part = E * 2.0
        if dense_first:
            dense_part.backward(np.ones((6, 3)))
            sparse_part.backward(np.ones((3, 3)))
        else:
            sparse_part.backward(np.ones((3, 3)))
            dense_part.backward(np.ones((6, 3)))
        expected = np.full((6, 3), 2.0)
        expected[3] += 2
        expected[1] += 1
        np.testing.assert_allclose(E.grad, expected)


def test_sparse_and_dense_use_in_one_graph_matches_finite_differences():
    ids = np.array([2, 0, 2])
    check_vjp(lambda E:
              fa.tanh(fa.take(E, ids)) * fa.take(E, [1, 1, 2]), np.random.default_rng(1).normal(size=(3, 2)))
    check_vjp(lambda E: fa.take(E, ids) * 3.0 + fa.take(fa.exp(E), ids),
              np.random.default_rng(2).normal(size=(3, 2)))


def test_zero_grad_forgets_sparse_rows():
    E = table()
    E[fa.IndexInput([1])].backward(np.ones((1, 3)))
    E.zero_grad()
    assert E.sparse_rows() is None
    E[fa.IndexInput([2])].backward(np.ones((1, 3)))
    assert list(E.sparse_rows()) == [2]
    np.testing.assert_allclose(E.grad.sum(axis=1), [0, 0, 3, 0, 0, 0])


def test_gather_from_a_computed_table_scatters_densely():
    E = table()
    doubled = E * 2.0
    doubled[fa.IndexInput([0, 0])].backward(np.ones((2, 3)))
    expected = np.zeros((6, 3))
    expected[0] = 4
    np.testing.assert_allclose(E.grad, expected)


def test_out_of_range_ids_raise_at_build_and_at_replay():
    E = table(rows=6)
    with pytest.raises(IndexError, match="id 6 at position 1 .* 6 rows"):
        E[fa.IndexInput([0, 6])]
    ix = fa.IndexInput([0, 1])
    rows = E[ix]
    ix.set_value([5, 9])
    with pytest.raises(IndexError, match="id 9 at position 1"):
        rows.forward()
    with pytest.raises(IndexError, match="id 9"):
        rows.backward(np.ones((2, 3)))
    ix.value[:] = [-3, 2]      # written past set_value's check: the replay's check sees it
    with pytest.raises(IndexError, match="id -3 at position 0"):
        rows.forward()
    ix.set_value([5, 2])
    rows.forward()
    np.testing.assert_array_equal(rows.value, E.value[[5, 2]])


def test_take_rejects_bad_arguments():
    E = table()
    with pytest.raises(TypeError, match="integers"):
        fa.take(E, [0.5])
    with pytest.raises(ValueError, match="at least one axis"):
        fa.take(fa.Parameter(1.0), [0])
    with pytest.raises(TypeError, match="float Variable"):
        fa.take(E, fa.Input([1.0]))


def test_sparse_gradient_float32():
    E = fa.Parameter(np.ones((4, 2)), dtype=np.float32)
    E[fa.IndexInput([3, 3])].backward(np.ones((2, 2), dtype=np.float32))
    np.testing.assert_array_equal(E.grad, [[0, 0], [0, 0], [0, 0], [2, 2]])


def test_reading_grad_does_not_change_what_the_optimizer_does():
    def run(read_grad):
        E = fa.Parameter(np.ones((4, 2)), dtype=np.float64)
        ix = fa.IndexInput([1])
        loss = fa.sum(E[ix])
        opt = fa.optim.Adam([E], lr=0.1)
        loss.backward(); opt.step(); opt.zero_grad()
        ix.set_value([2]); loss.forward(); loss.backward()
        if read_grad:
            np.linalg.norm(E.grad)
        opt.step(); opt.zero_grad()
        if read_grad:
            E.grad                         # no gradient now: zeros, and the next step skips E
        opt.step()
        return E.value.copy()
    np.testing.assert_array_equal(run(False), run(True))


# ------------------------------------------------ embedding options, embedding_bag

import torch                                    # noqa: E402


def torch_table(E):
    return torch.tensor(E.value.copy(), requires_grad=True)


@pytest.mark.parametrize("padding_idx", [0, 3, -1])
def test_padding_idx_row_gets_no_gradient_as_torch(padding_idx):
    E = table(rows=6, dim=3)
    ids = [3, 0, 5, 3, 0, 1, 5]
    out = fa.embedding(E, fa.IndexInput(ids), padding_idx=padding_idx)
    t = torch_table(E)
    expected = torch.nn.functional.embedding(torch.tensor(ids), t, padding_idx=padding_idx)
    np.testing.assert_array_equal(out.value, expected.detach().numpy())
    cot = np.random.default_rng(1).normal(size=out.shape)
    out.backward(cot)
    expected.backward(torch.tensor(cot))
    np.testing.assert_allclose(E.grad, t.grad.numpy(), rtol=1e-12)
    assert padding_idx % 6 not in E.sparse_rows()
    np.testing.assert_array_equal(E.grad[padding_idx], 0.0)


def test_padding_idx_module_starts_at_zero_and_stays_there():
    emb = fa.nn.Embedding(5, 4, padding_idx=-2, dtype=np.float64, generator=np.random.default_rng(0))
    assert emb.padding_idx == 3
    np.testing.assert_array_equal(emb.weight.value[3], 0.0)
    assert torch.nn.Embedding(5, 4, padding_idx=-2).padding_idx == 3
    loss = emb(fa.IndexInput([3, 1, 3])).sum()
    opt = fa.optim.Adam(emb.parameters(), lr=0.1)
    for _ in range(3):
        loss.forward(); loss.backward(); opt.step(); opt.zero_grad()
    np.testing.assert_array_equal(emb.weight.value[3], 0.0)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_norm_renormalises_looked_up_rows_in_place_as_torch(norm_type, dtype):
    values = np.random.default_rng(2).normal(size=(6, 4)) * 2
    E = fa.Parameter(values, dtype=dtype)
    t = torch.tensor(values.astype(dtype), requires_grad=True)
    ids = [1, 4, 1, 2]
    out = fa.embedding(E, fa.IndexInput(ids), max_norm=1.5, norm_type=norm_type)
    expected = torch.nn.functional.embedding(torch.tensor(ids), t, max_norm=1.5, norm_type=norm_type)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=tol)
    np.testing.assert_allclose(E.value, t.detach().numpy(), rtol=tol)       # the table itself
    np.testing.assert_array_equal(E.value[[0, 3, 5]], values[[0, 3, 5]].astype(dtype))
    cot = np.ones(out.shape)
    out.backward(cot)
    expected.backward(torch.tensor(cot, dtype=t.dtype))
    np.testing.assert_allclose(E.grad, t.grad.numpy(), rtol=tol)


def test_max_norm_applies_again_on_replay_with_new_ids():
    values = np.full((4, 2), 3.0)
    E = fa.Parameter(values, dtype=np.float64)
    ix = fa.IndexInput([0])
    out = fa.nn.Embedding(4, 2, max_norm=1.0, dtype=np.float64)
    out.weight = E
    y = out(ix)
    np.testing.assert_allclose(np.linalg.norm(E.value, axis=1), [1.0, np.sqrt(18), np.sqrt(18), np.sqrt(18)],
                               rtol=1e-6)
    ix.set_value([2])
    y.forward()
    np.testing.assert_allclose(np.linalg.norm(y.value), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(E.value[2]), 1.0, rtol=1e-6)


def test_embedding_option_errors():
    E = table()
    with pytest.raises(ValueError, match=r"padding_idx must be in \[-6, 6\).*got 6"):
        fa.embedding(E, [1], padding_idx=6)
    with pytest.raises(ValueError, match=r"Embedding: padding_idx must be in \[-3, 3\)"):
        fa.nn.Embedding(3, 2, padding_idx=-4)
    with pytest.raises(TypeError, match="padding_idx must be an int"):
        fa.embedding(E, [1], padding_idx=1.0)
    with pytest.raises(ValueError, match="max_norm must be a number > 0"):
        fa.embedding(E, [1], max_norm=0)
    with pytest.raises(ValueError, match="norm_type must be a number > 0"):
        fa.embedding(E, [1], max_norm=1.0, norm_type=-1)
    with pytest.raises(ValueError, match="must be a leaf"):
        fa.embedding(E * 2.0, [1], max_norm=1.0)
    ix = fa.IndexInput([1])
    y = fa.embedding(E, ix, padding_idx=0)
    ix.set_value([6])
    with pytest.raises(IndexError, match="embedding: id 6 at position 0"):
        y.forward()


def bag_case(seed=3):
    """Ragged bags with repeated ids and empty bags (first, middle and last)."""
    ids = np.array([4, 1, 4, 4, 0, 2, 5, 1], dtype=np.int64)
    offsets = np.array([0, 0, 3, 3, 6, 8], dtype=np.int64)
    return ids, offsets


def torch_bag(E, ids, offsets, **kw):
    t = torch_table(E)
    out = torch.nn.functional.embedding_bag(torch.tensor(ids), t,
                                            None if offsets is None else torch.tensor(offsets), **kw)
    return t, out


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_matches_torch(mode, sparse, include_last_offset):
    E = table(rows=6, dim=3)
    ids, offsets = bag_case()
    out = fa.embedding_bag(E, fa.IndexInput(ids), fa.IndexInput(offsets), mode=mode,
                           include_last_offset=include_last_offset, sparse=sparse)
    t, expected = torch_bag(E, ids, offsets, mode=mode, include_last_offset=include_last_offset)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-12, atol=1e-15)
    cot = np.random.default_rng(4).normal(size=out.shape)
    out.backward(cot)
    expected.backward(torch.tensor(cot))
    np.testing.assert_allclose(E.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)
    assert E.is_sparse_grad == sparse
    if sparse:
        used = ids[:offsets[-1]] if include_last_offset else ids
        assert sorted(E.sparse_rows()) == sorted(set(used.tolist()))


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_fixed_bags_and_finite_differences(mode):
    ids = np.array([[0, 3, 3], [1, 2, 0]])
    E = table(rows=4, dim=2)
    out = fa.embedding_bag(E, fa.IndexInput(ids), mode=mode)
    t, expected = torch_bag(E, ids, None, mode=mode)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-12)
    check_vjp(lambda w: fa.embedding_bag(w, fa.IndexInput(ids), mode=mode, sparse=False),
              E.value)
    ragged_ids, offsets = bag_case()
    check_vjp(lambda w: fa.embedding_bag(w, ragged_ids, offsets, mode=mode), table(6, 2).value)


def test_embedding_bag_dense_and_sparse_gradients_add_across_ops():
    E = table(rows=5, dim=2)
    bag = fa.embedding_bag(E, [1, 2, 2, 4], [0, 1], mode="sum", sparse=False)
    loss = bag.sum() + (E[fa.IndexInput([2])] * 3.0).sum()
    loss.backward()
    expected = np.zeros((5, 2))
    np.add.at(expected, [1, 2, 2, 4], 1.0)
    expected[2] += 3.0
    np.testing.assert_allclose(E.grad, expected)


def test_embedding_bag_replay_after_set_value_and_float32():
    E = fa.Parameter(np.random.default_rng(5).normal(size=(7, 4)).astype(np.float32))
    ix, off = fa.IndexInput([0, 1, 2, 3]), fa.IndexInput([0, 2])
    out = fa.nn.EmbeddingBag(7, 4, mode="mean")
    out.weight = E
    y = out(ix, off)
    assert y.dtype == np.float32
    ix.set_value([6, 6, 5, 1])
    off.set_value([0, 3])
    y.forward()
    t, expected = torch_bag(E, np.array([6, 6, 5, 1]), np.array([0, 3]), mode="mean")
    np.testing.assert_allclose(y.value, expected.detach().numpy(), rtol=1e-6)
    y.backward(np.ones((2, 4), np.float32))
    expected.backward(torch.ones(2, 4))
    np.testing.assert_allclose(E.grad, t.grad.numpy(), rtol=1e-6)
    assert sorted(E.sparse_rows()) == [1, 5, 6]


def test_embedding_bag_bad_input():
    E = table(rows=6, dim=3)
    with pytest.raises(IndexError, match="embedding_bag: id 6 at position 1"):
        fa.embedding_bag(E, [0, 6], [0])
    with pytest.raises(ValueError, match=r"offsets\[0\] must be 0"):
        fa.embedding_bag(E, [0, 1], [1])
    with pytest.raises(ValueError, match=r"offsets must not decrease, got offsets\[1\] = 2 and offsets\[2\] = 1"):
        fa.embedding_bag(E, [0, 1, 2], [0, 2, 1])
    with pytest.raises(ValueError, match=r"offsets\[1\] = 4 is past the end of the 3 ids"):
        fa.embedding_bag(E, [0, 1, 2], [0, 4])
    with pytest.raises(ValueError, match="mode must be 'sum' or 'mean'"):
        fa.embedding_bag(E, [0], [0], mode="max")
    with pytest.raises(ValueError, match="1-D ids need offsets"):
        fa.embedding_bag(E, [0])
    with pytest.raises(ValueError, match=r"2-D ids \(1, 2\) are one bag per row"):
        fa.embedding_bag(E, [[0, 1]], [0])
    with pytest.raises(ValueError, match=r"weight must be 2-D \(rows, dim\) or 1-D"):
        fa.embedding_bag(fa.Parameter(np.zeros((3, 1, 1))), [0], [0])
    with pytest.raises(ValueError, match="needs at least one entry"):
        fa.embedding_bag(E, [0], np.zeros(0, np.int64), include_last_offset=True)
    with pytest.raises(ValueError, match="EmbeddingBag: mode"):
        fa.nn.EmbeddingBag(3, 2, mode="max")
    # checked again on replay, before any loop
    ix, off = fa.IndexInput([0, 1, 2]), fa.IndexInput([0, 1])
    y = fa.embedding_bag(E, ix, off, mode="sum")
    off.set_value([0, 5])
    with pytest.raises(ValueError, match="past the end"):
        y.forward()
    off.set_value([0, 1])
    ix.set_value([0, 9, 1])
    with pytest.raises(IndexError, match="id 9 at position 1"):
        y.forward()
    with pytest.raises(IndexError, match="id 9"):
        y.backward(np.ones((2, 3)))


def test_embedding_bag_checks_only_the_ids_its_bags_hold():
    # a leaf made for the longest bag (as fa.data.BagSampler fills) holds, past the last bag's
    # end, ids that are never read: they are not checked, so a short bag costs its own length
    E = table(rows=6, dim=3)
    ix, off = fa.IndexInput([0, 1, 2, 3]), fa.IndexInput([0, 4])
    y = fa.embedding_bag(E, ix, off, mode="mean", include_last_offset=True)
    ix.set_value([4, 5, 99, 7])
    off.set_value([0, 2])
    y.forward()
    np.testing.assert_allclose(y.value[0], E.value[[4, 5]].mean(axis=0), rtol=1e-6)
    y.backward(np.ones((1, 3), np.float32))
    assert sorted(E.sparse_rows()) == [4, 5]
    off.set_value([0, 3])       # the bag now reaches the bad id
    with pytest.raises(IndexError, match="id 99 at position 2"):
        y.forward()


def test_embedding_bag_no_bags_and_no_ids():
    E = table(rows=3, dim=2)
    none = fa.embedding_bag(E, np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert none.shape == (0, 2)
    empty = fa.embedding_bag(E, np.zeros(0, np.int64), [0, 0], mode="mean")
    np.testing.assert_array_equal(empty.value, np.zeros((2, 2)))
    empty.backward(np.ones((2, 2)))
    assert E.sparse_rows().size == 0
