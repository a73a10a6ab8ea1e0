"""fa.models.KeyedVectors (Word2Vec.wv): gensim's queries and word2vec's file formats,
checked against gensim itself where it is installed."""
import numpy as np
import pytest

import fastad as fa
from fastad.models import KeyedVectors

WORDS = [f"w{i}" for i in range(40)] + ["naïve", "日本"]


@pytest.fixture
def wv():
    vectors = np.random.default_rng(0).normal(size=(len(WORDS), 8)).astype(np.float32)
    return KeyedVectors(list(WORDS), vectors)


def test_lookups(wv):
    assert len(wv) == 42 and wv.vector_size == 8 and "w3" in wv and "nope" not in wv
    assert wv.key_to_index["w3"] == 3 and wv.index_to_key[3] == "w3"
    np.testing.assert_array_equal(wv["w3"], wv.vectors[3])
    np.testing.assert_array_equal(wv[["w1", "w2"]], wv.vectors[1:3])
    wv["w3"][:] = 0                                       # a copy: the vectors are untouched
    assert wv.vectors[3].any()
    np.testing.assert_allclose(np.linalg.norm(wv.get_vector("w5", norm=True)), 1.0, rtol=1e-6)
    with pytest.raises(KeyError, match=r"KeyedVectors.get_vector: 'nope' is not in the vocabulary \(42 words\)"):
        wv["nope"]


def test_queries_match_gensim(wv):
    gensim_models = pytest.importorskip("gensim.models")
    theirs = gensim_models.KeyedVectors(8)
    theirs.add_vectors(list(WORDS), wv.vectors.copy())

    def same(ours, reference):
        assert [w for w, _ in ours] == [w for w, _ in reference]
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in reference], rtol=1e-5, atol=1e-6)

    same(wv.most_similar("w1", topn=5), theirs.most_similar("w1", topn=5))
    same(wv.most_similar(positive=["w1", "w2"], negative=["w3"], topn=4),
         theirs.most_similar(positive=["w1", "w2"], negative=["w3"], topn=4))
    same(wv.similar_by_word("w7", topn=3), theirs.similar_by_word("w7", topn=3))
    same(wv.similar_by_vector(wv.vectors[4], topn=3), theirs.similar_by_vector(wv.vectors[4], topn=3))
    assert wv.similarity("w1", "w9") == pytest.approx(float(theirs.similarity("w1", "w9")), abs=1e-6)
    assert wv.n_similarity(["w1", "w2"], ["w3"]) == pytest.approx(
        float(theirs.n_similarity(["w1", "w2"], ["w3"])), abs=1e-6)
    assert wv.doesnt_match(["w1", "w2", "w3", "w4"]) == theirs.doesnt_match(["w1", "w2", "w3", "w4"])


def test_query_errors(wv):
    with pytest.raises(ValueError, match="topn must be a positive int, got 0"):
        wv.most_similar("w1", topn=0)
    with pytest.raises(ValueError, match=r"a vector must have shape \(8,\), got \(3,\)"):
        wv.most_similar(np.ones(3))
    with pytest.raises(ValueError, match="both lists of words must be non-empty"):
        wv.n_similarity([], ["w1"])
    with pytest.raises(ValueError, match="none of"):
        wv.doesnt_match(["x", "y"])
    assert wv.doesnt_match(["w1", "w2", "unknown"]) in ("w1", "w2")        # gensim skips unknowns
    with pytest.raises(ValueError, match=r"vectors must have shape \(2, dim\)"):
        KeyedVectors(["a", "b"], np.zeros((3, 4)))


@pytest.mark.parametrize("binary", [False, True])
def test_word2vec_format_round_trip(wv, tmp_path, binary):
    path = tmp_path / "vectors.bin"
    wv.save_word2vec_format(path, binary=binary)
    back = KeyedVectors.load_word2vec_format(path, binary=binary)
    assert back.index_to_key == WORDS
    if binary:
        np.testing.assert_array_equal(back.vectors, wv.vectors)
    else:
        np.testing.assert_allclose(back.vectors, wv.vectors, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_word2vec_format_is_gensims(wv, tmp_path, binary):
    gensim_models = pytest.importorskip("gensim.models")
    ours, theirs_path = tmp_path / "ours", tmp_path / "theirs"
    wv.save_word2vec_format(ours, binary=binary)
    read = gensim_models.KeyedVectors.load_word2vec_format(str(ours), binary=binary)
    assert list(read.index_to_key) == WORDS
    np.testing.assert_allclose(read.vectors, wv.vectors, rtol=1e-5, atol=1e-6)
    read.save_word2vec_format(str(theirs_path), binary=binary)
    back = KeyedVectors.load_word2vec_format(theirs_path, binary=binary)
    assert back.index_to_key == WORDS
    np.testing.assert_allclose(back.vectors, wv.vectors, rtol=1e-5, atol=1e-6)


def test_bad_files_are_named(wv, tmp_path):
    path = tmp_path / "v.bin"
    wv.save_word2vec_format(path, binary=True)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=r"ends after \d+ of the 42 words"):
        KeyedVectors.load_word2vec_format(path, binary=True)
    path.write_bytes(b"not a header\nw 1 2\n")
    with pytest.raises(ValueError, match="does not start with a 'count dim' line"):
        KeyedVectors.load_word2vec_format(path)
    path.write_bytes(b"1 3\nw 1 2\n")
    with pytest.raises(ValueError, match="or entry 0 is not 3 numbers"):
        KeyedVectors.load_word2vec_format(path)
    with pytest.raises(TypeError, match="binary must be True or False"):
        wv.save_word2vec_format(path, binary="yes")
    spaced = KeyedVectors(["a b", "c"], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="white space"):
        spaced.save_word2vec_format(path)


def test_word2vec_takes_gensims_names_and_exposes_wv():
    corpus = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat", "on", "the", "log"]] * 50
    model = fa.models.Word2Vec(vector_size=8, alpha=0.05, min_alpha=0.001, sg=1, window=2,
                               min_count=1, sample=0, epochs=2)
    assert (model.dim, model.lr, model.min_lr, model.sg) == (8, 0.05, 0.001, True)
    assert fa.models.Word2Vec(sg=0).sg is False
    with pytest.raises(TypeError, match="give dim or gensim's vector_size, not both"):
        fa.models.Word2Vec(dim=8, vector_size=16)
    with pytest.raises(RuntimeError, match="not trained"):
        model.wv
    model.fit(corpus)
    wv = model.wv
    assert wv is model.wv and np.shares_memory(wv.vectors, model.vectors)
    np.testing.assert_array_equal(wv["cat"], model.vector("cat"))
    assert wv.most_similar("cat", topn=3) == model.most_similar("cat", topn=3)
    with pytest.raises(KeyError, match=r"Word2Vec.get_vector: 'plum' is not in the vocabulary \(7 words, min_count=1\)"):
        wv["plum"]
    model.fit(corpus[:40])                              # a new fit: a new view
    assert model.wv is not wv and np.shares_memory(model.wv.vectors, model.vectors)


def test_save_and_load_keep_the_words_and_vectors_and_mmap_r_is_read_only(tmp_path):
    wv = fa.models.KeyedVectors(["a", "b", "c"], np.arange(6, dtype=np.float32).reshape(3, 2))
    wv.save(tmp_path / "v.kv")
    again = fa.models.KeyedVectors.load(tmp_path / "v.kv")
    assert again.index_to_key == ["a", "b", "c"] and np.array_equal(again.vectors, wv.vectors)
    assert again.vectors.flags.writeable
    frozen = fa.models.KeyedVectors.load(tmp_path / "v.kv", mmap="r")
    assert not frozen.vectors.flags.writeable and np.array_equal(frozen["b"], [2, 3])
    with pytest.raises(ValueError, match="mmap"):
        fa.models.KeyedVectors.load(tmp_path / "v.kv", mmap="w+")
    fa.save({"x": np.zeros(2)}, tmp_path / "other.npz")
    with pytest.raises(ValueError, match="is not saved KeyedVectors"):
        fa.models.KeyedVectors.load(tmp_path / "other.npz")
