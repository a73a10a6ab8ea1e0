"""Big tables: Parameters and embedding modules over a given array without a copy
(`Parameter(a, copy=False)`, `_weight=`, `from_pretrained`, Hogwild handles), and
tables drawn in place in their own dtype, on threads if asked, the same values whatever
their number."""
import tracemalloc

import numpy as np
import pytest

import fastad as fa
from fastad import nn
from fastad.nn import init


def _read_only(array):
    array.flags.writeable = False
    return array


# ------------------------------------------------------------- Parameter(copy=False)

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parameter_without_a_copy_is_the_array_itself(dtype):
    table = np.arange(12, dtype=dtype).reshape(4, 3)
    p = fa.Parameter(table, copy=False, name="E")
    assert p.value is table or np.shares_memory(p.value, table)
    assert p.dtype == dtype and p.name == "E"
    opt = fa.optim.SGD([p], lr=0.5)
    fa.sum(p[fa.IndexInput([1, 1])]).backward()
    opt.step()
    expected = np.arange(12, dtype=dtype).reshape(4, 3)
    expected[1] -= 1.0                   # two gathers of row 1, lr 0.5
    np.testing.assert_array_equal(table, expected)       # trained in place


def test_parameter_copies_by_default():
    table = np.zeros((3, 2), np.float32)
    p = fa.Parameter(table)
    assert not np.shares_memory(p.value, table)


def test_parameter_without_a_copy_refuses_what_it_cannot_train_in_place():
    with pytest.raises(TypeError, match=r"Parameter: with copy=False, the array must be "
                                        r"C-contiguous float32 or float64 .*got float16; "
                                        r"copy=True copies it"):
        fa.Parameter(np.ones((3, 2), np.float16), copy=False)
    with pytest.raises(TypeError, match=r"got float32 \(not C-contiguous\)"):
        fa.Parameter(np.ones((3, 4), np.float32)[:, ::2], copy=False)
    with pytest.raises(TypeError, match=r"not C-contiguous"):
        fa.Parameter(np.asfortranarray(np.ones((3, 4), np.float32)), copy=False)
    with pytest.raises(ValueError, match="writeable and aligned .*got a read-only array"):
        fa.Parameter(_read_only(np.ones((3, 2), np.float32)), copy=False)
    with pytest.raises(TypeError, match="copy=False adopts a numpy array as the value, got list"):
        fa.Parameter([[1.0, 2.0]], copy=False)
    with pytest.raises(TypeError, match="the array is float32, not float64; a Parameter made "
                                        "without a copy keeps the array's dtype"):
        fa.Parameter(np.ones((3, 2), np.float32), dtype=np.float64, copy=False)


def test_a_shared_handle_is_adopted_whatever_copy_says():
    table = np.ones((4, 2), np.float32)
    with fa.hogwild.InProcessArrays({"E": table}) as shared:
        for copy in (True, False):
            assert np.shares_memory(fa.Parameter(shared["E"], copy=copy).value, table)


# ------------------------------------------------------------- modules over a given table

@pytest.mark.parametrize("make", [
    lambda w: nn.Embedding(4, 3, _weight=w),
    lambda w: nn.EmbeddingBag(4, 3, _weight=w),
    lambda w: nn.Embedding.from_pretrained(w, freeze=False),
    lambda w: nn.EmbeddingBag.from_pretrained(w, freeze=False),
])
def test_modules_use_the_given_table_itself(make):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    module = make(table)
    assert np.shares_memory(module.weight.value, table)
    assert module.weight.requires_grad and module.weight.dtype == np.float32
    assert (module.num_embeddings, module.embedding_dim) == (4, 3)
    opt = fa.optim.SGD(module.parameters(), lr=1.0)
    out = module(fa.IndexInput([2]), fa.IndexInput([0])) if isinstance(module, nn.EmbeddingBag) \
        else module(fa.IndexInput([2]))
    fa.sum(out).backward()
    opt.step()
    np.testing.assert_array_equal(table[2], [5.0, 6.0, 7.0])    # 6, 7, 8 stepped by 1 in place


def test_a_given_table_keeps_its_padding_row_as_pytorch_does():
    table = np.ones((4, 2), np.float32)
    emb = nn.Embedding(4, 2, padding_idx=1, _weight=table)
    np.testing.assert_array_equal(emb.weight.value, 1.0)
    np.testing.assert_array_equal(nn.Embedding(4, 2, padding_idx=1).weight.value[1], 0.0)


@pytest.mark.parametrize("cls", [nn.Embedding, nn.EmbeddingBag])
def test_from_pretrained_freezes_by_default(cls):
    table = np.ones((5, 2), np.float32)
    frozen = cls.from_pretrained(table)
    assert not frozen.weight.requires_grad
    assert np.shares_memory(frozen.weight.value, table)
    # a frozen table makes no gradient: a loss through it has nothing to train
    with pytest.raises(RuntimeError, match="does not depend on any Parameter"):
        fa.train(fa.sum(fa.embedding_bag(frozen.weight, fa.IndexInput([[0, 1]]))),
                 fa.optim.SGD([frozen.weight], lr=1.0), {})
    with pytest.raises(TypeError, match="from_pretrained: freeze must be True or False"):
        cls.from_pretrained(table, freeze="yes")


def test_torch_from_pretrained_agrees():
    torch = pytest.importorskip("torch")
    table = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    ids, offsets = [4, 0, 4, 2], [0, 1]
    ours = nn.EmbeddingBag.from_pretrained(table, mode="mean")
    theirs = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(table.copy()), mode="mean")
    np.testing.assert_allclose(ours(fa.IndexInput(ids), fa.IndexInput(offsets)).value,
                               theirs(torch.tensor(ids), torch.tensor(offsets)).numpy(), rtol=1e-6)
    assert theirs.weight.requires_grad == ours.weight.requires_grad


@pytest.mark.parametrize("cls", [nn.Embedding, nn.EmbeddingBag])
def test_a_given_table_that_cannot_be_used_itself_is_refused_clearly(cls):
    name = cls.__name__
    with pytest.raises(TypeError, match=rf"{name}: the given weight is used itself, without a "
                                        rf"copy, and cannot be: .*got float16.*To train a copy, "
                                        rf"give np.ascontiguousarray"):
        cls(4, 2, _weight=np.ones((4, 2), np.float16))
    with pytest.raises(TypeError, match="not C-contiguous"):
        cls(4, 2, _weight=np.ones((4, 4), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="read-only"):
        cls.from_pretrained(_read_only(np.ones((4, 2), np.float32)))
    with pytest.raises(ValueError, match=rf"{name}.from_pretrained: the weight must be 2-D "
                                         rf"\(num_embeddings, embedding_dim\), got shape \(8,\)"):
        cls.from_pretrained(np.ones(8, np.float32))
    with pytest.raises(ValueError, match=rf"{name}: _weight must have shape \(4, 2\) "
                                         rf"\(num_embeddings, embedding_dim\), got \(2, 4\)"):
        cls(4, 2, _weight=np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="the given weight is float32, not float64"):
        cls(4, 2, _weight=fa.Parameter(np.ones((4, 2)), dtype=np.float32), dtype=np.float64)


def test_modules_over_hogwild_handles_train_the_shared_array():
    table = np.zeros((6, 2), np.float32)
    with fa.hogwild.InProcessArrays({"E": table}) as shared:
        bag = nn.EmbeddingBag(6, 2, mode="sum", _weight=shared["E"])
        assert bag.weight.shared is shared["E"]
        emb = nn.Embedding.from_pretrained(shared["E"], freeze=False)
        assert np.shares_memory(emb.weight.value, table)
        opt = fa.optim.SGD([bag.weight], lr=1.0)
        fa.sum(bag(fa.IndexInput([[3, 3]]))).backward()
        opt.step()
    np.testing.assert_array_equal(table[3], [-2.0, -2.0])
    with fa.hogwild.share({"E": np.ones((3, 2), np.float32)}) as shared:
        emb = nn.Embedding.from_pretrained(shared["E"])
        assert np.shares_memory(emb.weight.value, shared["E"].numpy())


# ------------------------------------------------------------- in-place draws

def _drawn(rows, dim, seed, threads, cls=nn.EmbeddingBag, dtype=None):
    return cls(rows, dim, generator=np.random.default_rng(seed), threads=threads,
               dtype=dtype).weight.value


def test_a_big_table_is_the_same_whatever_the_number_of_threads():
    rows = 3 * (1 << 20) // 40 + 7                     # four streams, the last one short
    first = _drawn(rows, 40, 5, None)
    assert first.dtype == np.float32
    for threads in (1, 2, 3, 8):
        np.testing.assert_array_equal(_drawn(rows, 40, 5, threads), first)
    assert not np.array_equal(_drawn(rows, 40, 6, 2), first)
    chunks = first.reshape(-1)[:3 << 20].reshape(3, -1)     # the streams differ
    assert not np.array_equal(chunks[0], chunks[1])
    np.testing.assert_array_equal(_drawn(rows, 40, 5, 2, cls=nn.Embedding), first)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1000, 30_000])        # one stream, and several
def test_the_draw_is_standard_normal_in_the_tables_dtype(dtype, rows):
    value = _drawn(rows, 50, 0, 2, dtype=dtype)
    assert value.dtype == dtype
    assert value.mean() == pytest.approx(0, abs=0.01)
    assert value.std() == pytest.approx(1, rel=0.01)
    assert np.mean(np.abs(value) < 1) == pytest.approx(0.6827, abs=0.01)


@pytest.mark.parametrize("fill", ["normal", "uniform"])
def test_init_fills_in_place_on_threads_with_the_same_values(fill):
    def drawn(threads):
        w = fa.Parameter(np.empty((1100, 1000), np.float32), copy=False)
        value = w.value
        if fill == "normal":
            init.normal_(w, mean=2.0, std=0.5, generator=np.random.default_rng(3), threads=threads)
        else:
            init.uniform_(w, -1.0, 3.0, generator=np.random.default_rng(3), threads=threads)
        assert w.value is value
        return value

    value = drawn(3)
    np.testing.assert_array_equal(value, drawn(None))
    if fill == "normal":
        assert value.mean() == pytest.approx(2.0, abs=0.005) and value.std() == pytest.approx(0.5, rel=0.01)
    else:
        assert value.min() >= -1.0 and value.max() < 3.0
        assert value.mean() == pytest.approx(1.0, abs=0.01)
    with pytest.raises(TypeError, match="normal_: threads must be an int"):
        init.normal_(fa.Parameter(np.zeros((2, 2))), threads=1.5)
    with pytest.raises(ValueError, match="uniform_: threads must be"):
        init.uniform_(fa.Parameter(np.zeros((2, 2))), threads=0)


def test_building_a_table_allocates_about_the_table_alone():
    """A float64 draw cast to float32 would allocate three times the table's bytes."""
    tracemalloc.start()
    try:
        bag = nn.EmbeddingBag(200_000, 50, generator=np.random.default_rng(0), threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert bag.weight.value.nbytes == 200_000 * 50 * 4
    assert peak < 1.3 * bag.weight.value.nbytes
