"""fa.gather_dot: A[a_ids[...]] . B[b_ids[..., j]] in one node, the same values and gradients
as the gathers, reshape and vector_dot it fuses, bit for bit, in passes and in fa.train."""
import numpy as np
import pytest

import fastad as fa
from fused_helpers import assert_constant_and_input_table_grads_match, assert_fused_matches_composed


def tables(f64=True, a_rows=7, b_rows=9, dim=6, seed=0, same=False):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    A = fa.Parameter(rng.normal(size=(a_rows, dim)), dtype=dtype)
    B = A if same else fa.Parameter(rng.normal(size=(b_rows, dim)), dtype=dtype)
    return A, B


def composed(A, a_ids, B, b_ids):
    """The ops gather_dot fuses, as Word2Vec's skip-gram graph built them before it."""
    lead = a_ids.shape
    return fa.vector_dot(fa.take(B, b_ids), fa.reshape(fa.take(A, a_ids), lead + (1, A.shape[1])))


IDS = {  # a_ids, b_ids (a_ids' shape plus one axis); ids repeat within and across the two
    "rows": ([0, 3, 3], [[1, 2, 4, 1], [2, 1, 0, 6], [3, 3, 3, 0]]),
    "scalar": (2, [4, 0, 4, 6, 5, 5]),
    "grid": ([[0, 1], [6, 6]], [[[4, 4], [3, 0]], [[1, 0], [0, 2]]]),
    "one_each": ([5, 2, 5], [[1], [2], [1]]),
    "empty": (np.zeros(0, int), np.zeros((0, 3), int)),
    "no_b_rows": ([1, 2], np.zeros((2, 0), int)),
}


@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("same", [False, True], ids=["two_tables", "one_table"])
@pytest.mark.parametrize("case", sorted(IDS))
def test_values_and_gradients_are_those_of_the_composed_ops_bit_for_bit(case, same, f64):
    a_ids, b_ids = IDS[case]
    results = []
    for build in (composed, fa.gather_dot):
        A, B = tables(f64, same=same)
        scores = build(A, fa.IndexInput(a_ids), B, fa.IndexInput(b_ids))
        seed = np.linspace(-1.5, 2.0, scores.size).reshape(scores.shape)
        scores.backward(seed.astype(scores.dtype))
        results.append((scores.value.copy(), scores.shape, A.grad, B.grad))
    assert_fused_matches_composed(results, np.shape(b_ids), f64)


def test_gradients_match_finite_differences():
    a_ids, b_ids = IDS["rows"]
    weights = np.random.default_rng(1).normal(size=(3, 4))
    rng = np.random.default_rng(2)
    assert fa.gradcheck(lambda A, B: fa.sum(fa.gather_dot(A, a_ids, B, b_ids) * weights),
                        rng.normal(size=(7, 3)), rng.normal(size=(9, 3)))
    assert fa.gradcheck(lambda A: fa.sum(fa.gather_dot(A, a_ids, A, b_ids) * weights),
                        rng.normal(size=(7, 3)))


def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    A, B = tables(f64=True)
    a_ids, b_ids = IDS["rows"]
    labels = np.zeros((3, 4))
    labels[:, 0] = 1
    loss = fa.nn.bce_with_logits(fa.gather_dot(A, a_ids, B, b_ids), labels, reduction="sum")
    loss.backward()
    tA, tB = (torch.tensor(p.value.copy(), requires_grad=True) for p in (A, B))
    t_scores = (tB[torch.tensor(b_ids)] * tA[torch.tensor(a_ids)][:, None, :]).sum(-1)
    t_loss = torch.nn.functional.binary_cross_entropy_with_logits(
        t_scores, torch.tensor(labels), reduction="sum")
    t_loss.backward()
    np.testing.assert_allclose(loss.value, t_loss.item(), rtol=1e-12)
    for ours, theirs in ((A, tA), (B, tB)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradients_are_sparse_rows_of_parameters():
    A, B = tables()
    fa.gather_dot(A, [0, 3], B, [[1, 2], [2, 8]]).sum().backward()
    assert A.is_sparse_grad and sorted(A.sparse_rows()) == [0, 3]
    assert B.is_sparse_grad and sorted(B.sparse_rows()) == [1, 2, 8]


def test_tables_that_are_not_parameters_get_dense_gradients_or_none():
    """A constant A takes no gradient (reads as zeros); an Input B with requires_grad a
    dense one: as with the composed ops."""
    a_ids, b_ids = IDS["rows"]
    results = []
    for build in (composed, fa.gather_dot):
        A, B = tables()
        frozen = fa.Input(A.value, dtype=np.float64)
        items = fa.Input(B.value, dtype=np.float64, requires_grad=True)
        scores = build(frozen, fa.IndexInput(a_ids), items, fa.IndexInput(b_ids))
        scores.backward(np.arange(1.0, 13.0).reshape(3, 4))
        results.append((scores.value.copy(), frozen.grad, items.grad))
    assert_constant_and_input_table_grads_match(results)


def test_replay_after_set_value_reads_the_new_ids_and_rows():
    A, B = tables()
    a_ids, b_ids = fa.IndexInput([0, 1]), fa.IndexInput([[2, 3], [4, 4]])
    scores = fa.gather_dot(A, a_ids, B, b_ids)
    loss = fa.sum(scores * np.array([[1.0, -2.0], [0.5, 3.0]]))
    a_ids.set_value([5, 5])
    b_ids.set_value([[0, 8], [8, 1]])
    B.set_value(B.value * 2)
    loss.forward()
    loss.backward()
    A2, B2 = tables()
    B2.set_value(B2.value * 2)
    fresh = fa.gather_dot(A2, [5, 5], B2, [[0, 8], [8, 1]])
    fa.sum(fresh * np.array([[1.0, -2.0], [0.5, 3.0]])).backward()
    np.testing.assert_array_equal(scores.value, fresh.value)
    for ours, theirs in ((A, A2), (B, B2)):
        np.testing.assert_array_equal(ours.grad, theirs.grad)


def _train(fused, optimizer, batch, f64, b_rows, same):
    """Skip-gram-shaped training: each centre row against its word and 3 noise rows."""
    rng = np.random.default_rng(0)
    dtype = np.float64 if f64 else np.float32
    A = fa.Parameter(rng.normal(0, 0.1, (30, 8)), dtype=dtype)
    B = A if same else fa.Parameter(rng.normal(0, 0.1, (b_rows, 8)), dtype=dtype)
    examples, per = 320, 4
    centres = rng.integers(0, 30, (examples // batch, batch))
    targets = rng.integers(0, B.shape[0], (examples // batch, batch, per))
    a_ids = fa.IndexInput(np.zeros(batch, dtype=np.int64))
    b_ids = fa.IndexInput(np.zeros((batch, per), dtype=np.int64))
    scores = (fa.gather_dot if fused else composed)(A, a_ids, B, b_ids)
    labels = np.zeros((batch, per), dtype=dtype)
    labels[:, 0] = 1
    loss = fa.nn.bce_with_logits(scores, labels, reduction="sum")
    params = [A] if same else [A, B]
    opt = optimizer(params, lr=0.05)
    fa.train(loss, opt, {a_ids: centres, b_ids: targets}, epochs=2)
    return [p.value.copy() for p in params]


@pytest.mark.parametrize("optimizer", [fa.optim.SGD, fa.optim.Adagrad])
@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("b_rows", [6, 400])          # few rows: rows repeat within a step
@pytest.mark.parametrize("same", [False, True], ids=["two_tables", "one_table"])
def test_fa_train_gives_the_composed_ops_parameters_bit_for_bit(optimizer, batch, f64, b_rows, same):
    """With plain SGD the loop steps the rows as their gradients come (no gradient row of B
    is stored); with Adagrad through the optimizer. Either way, as with the composed ops."""
    composed_params = _train(False, optimizer, batch, f64, b_rows, same)
    fused_params = _train(True, optimizer, batch, f64, b_rows, same)
    for theirs, ours in zip(composed_params, fused_params):
        np.testing.assert_array_equal(ours, theirs)


def test_word2vec_skip_gram_builds_one_gather_dot_node():
    from fastad.models.text.word2vec import _example_graph
    W, C = tables(f64=False)
    for batch in (1, 16):
        settings = {"batch": batch, "negative": 5, "sg": True, "window": 5}
        leaves, loss = _example_graph(W, C, settings)
        seen, todo = {}, [loss]
        while todo:
            node = todo.pop()
            if id(node) not in seen:
                seen[id(node)] = node
                todo.extend(node.parents)
        nodes = [n for n in seen.values() if getattr(n, "op_name", None) == "gather_dot"]
        assert not [n for n in seen.values() if getattr(n, "op_name", None) in ("take", "vector_dot")]
        assert len(nodes) == 1 and nodes[0].shape == (batch, 6)
        assert [id(p) for p in nodes[0].parents] == [id(W), id(C), id(leaves[0]), id(leaves[1])]


@pytest.mark.parametrize("make, error, message", [
    (lambda A, B: fa.gather_dot(A, [0], B, [[0, 9]]), IndexError,
     "gather_dot: id 9 at position 1 of the IndexInput is out of range for a table with 9 rows"),
    (lambda A, B: fa.gather_dot(A, [7], B, [[0]]), IndexError,
     "id 7 at position 0 of the IndexInput is out of range for a table with 7 rows"),
    (lambda A, B: fa.gather_dot(A, [-1], B, [[0]]), IndexError, "ids must be >= 0, got -1"),
    (lambda A, B: fa.gather_dot(A, [0, 1], B, [0, 1]), ValueError,
     r"b_ids must have a_ids' shape plus one axis \(the B rows of each A row\): a_ids has shape "
     r"\(2,\), so b_ids needs \(2, 'm'\), got \(2,\)"),
    (lambda A, B: fa.gather_dot(A, [0, 1], B, [[0, 1]]), ValueError,
     r"a_ids has shape \(2,\), so b_ids needs \(2, 'm'\), got \(1, 2\)"),
    (lambda A, B: fa.gather_dot(A, [0], fa.Parameter(np.zeros((9, 4))), [[0]]), ValueError,
     r"a_table and b_table must be 2-D with one row length, got shapes \(7, 6\) and \(9, 4\)"),
    (lambda A, B: fa.gather_dot(fa.Parameter(np.zeros(7)), [0], B, [[0]]), ValueError,
     r"must be 2-D with one row length, got shapes \(7,\) and \(9, 6\)"),
    (lambda A, B: fa.gather_dot(A, [0], fa.Parameter(np.zeros((9, 6)), dtype=np.float32), [[0]]),
     TypeError, "mixed dtypes"),
    (lambda A, B: fa.gather_dot(A, [0], B.value, [[0]]), TypeError,
     "b_table must be a fastad Variable, got ndarray"),
    (lambda A, B: fa.gather_dot(A, fa.Input([0.0]), B, [[1]]), TypeError,
     "a_ids must be an IndexInput or integers, got a float Variable"),
])
def test_bad_input_is_a_clear_error_and_changes_nothing(make, error, message):
    A, B = tables()
    before = [p.value.copy() for p in (A, B)]
    with pytest.raises(error, match=message):
        make(A, B)
    for p, value in zip((A, B), before):
        np.testing.assert_array_equal(p.value, value)


def test_an_id_made_bad_after_the_build_fails_training_and_the_replay_before_any_write():
    A, B = tables()
    b_ids = fa.IndexInput([[1, 2], [3, 4]])
    loss = fa.sum(fa.gather_dot(A, [0, 1], B, b_ids))
    opt = fa.optim.SGD([A, B], lr=0.1)
    before = [p.value.copy() for p in (A, B)]
    with pytest.raises(IndexError, match=r"ids up to 11 .* out of range for the graph \(gather_dot: "
                                         r"id 11 .* 9 rows\); nothing was trained"):
        fa.train(loss, opt, {b_ids: np.array([[[1, 2], [3, 11]]])}, epochs=1)
    b_ids.value[1, 0] = -3                 # written into the array, not through set_value
    with pytest.raises(IndexError, match="id -3 at position 2"):
        loss.forward()
    for p, value in zip((A, B), before):
        np.testing.assert_array_equal(p.value, value)


def test_an_id_made_bad_between_forward_and_backward_fails_the_backward_before_any_write():
    A, B = tables()
    a_ids = fa.IndexInput([0, 1])
    loss = fa.sum(fa.gather_dot(A, a_ids, B, [[3, 4], [1, 2]]))
    a_ids.value[0] = 12
    with pytest.raises(IndexError, match="gather_dot: id 12 at position 0 .* 7 rows"):
        loss.backward()
    for p in (A, B):
        assert not np.any(p.grad)


@pytest.mark.parametrize("same", [False, True], ids=["two_tables", "one_table"])
def test_on_a_device_it_is_the_composed_ops(same):
    """Run by the kernel emulator (no GPU needed): the device result is the CPU's."""
    from fastad.cuda import backend
    backend.set_emulation(True)
    try:
        rng = np.random.default_rng(3)
        arrays = [rng.normal(size=(7, 4)), rng.normal(size=(9, 4))]
        a_ids, b_ids = IDS["rows"]
        results = []
        for device in (None, "cuda"):
            A = fa.Parameter(arrays[0], dtype=np.float64, device=device)
            B = A if same else fa.Parameter(arrays[1], dtype=np.float64, device=device)
            scores = fa.gather_dot(A, fa.IndexInput(a_ids, device=device), B,
                                   fa.IndexInput(b_ids, device=device))
            weights = fa.Input(np.arange(1.0, 13.0).reshape(3, 4), dtype=np.float64, device=device)
            fa.sum(scores * weights).backward()
            results.append([scores.numpy()] + [backend.to_host(p.grad) if device else p.grad
                                               for p in (A, B)])
        for cpu, dev in zip(*results):
            np.testing.assert_allclose(dev, cpu, rtol=1e-12, atol=1e-13)
    finally:
        backend.set_emulation(None)
