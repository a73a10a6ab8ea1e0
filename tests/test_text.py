"""fa.text: fastText's tokens, hash and dictionary, checked against a readable Python
statement of fastText's rules (dictionary.cc) and against the `fasttext` package itself."""
import numpy as np
import pytest

import fastad as fa
from fastad.models.text import EOS, Dictionary, fasttext_hash, fasttext_tokens


def reference_hash(text):
    """dictionary.cc's hash: FNV-1a over the UTF-8 bytes, each byte sign-extended."""
    h = 2166136261
    for byte in text.encode("utf-8"):
        h ^= (byte - 256 if byte >= 128 else byte) & 0xFFFFFFFF
        h = (h * 16777619) & 0xFFFFFFFF
    return h


def reference_char_ngrams(word, minn, maxn, nwords, bucket):
    """dictionary.cc's computeSubwords over "<word>", in characters."""
    chars = "<" + word + ">"
    out = []
    for i in range(len(chars)):
        for n in range(1, maxn + 1):
            if i + n > len(chars):
                break
            if n >= minn and not (n == 1 and (i == 0 or i + n == len(chars))):
                out.append(nwords + reference_hash(chars[i:i + n]) % bucket)
    return out


def reference_word_ngrams(tokens, n, nwords, bucket):
    """dictionary.cc's addWordNgrams: int32 hashes widened to uint64 with their sign."""
    hashes = [(h - (1 << 32) if h >= 1 << 31 else h) % (1 << 64) for h in map(reference_hash, tokens)]
    out = []
    for i in range(len(hashes)):
        h = hashes[i]
        for j in range(i + 1, min(len(hashes), i + n)):
            h = (h * 116049371 + hashes[j]) % (1 << 64)
            out.append(nwords + h % bucket)
    return out


def test_the_hash_and_tokens_are_fasttexts():
    for word in ["", "a", "</s>", "héllo", "日本語", "naïve café"]:
        assert fasttext_hash(word) == reference_hash(word) == fasttext_hash(word.encode("utf-8"))
    assert fasttext_tokens("a\tb  c\x0bd\x0ce\rf") == ["a", "b", "c", "d", "e", "f", EOS]
    assert fasttext_tokens("") == [EOS] and fasttext_tokens("x y\n") == ["x", "y", EOS]


LINES = ["__label__a the cat sat", "__label__b the dog ran on the mat", "the cat __label__a",
         "", "__label__b a dog"]


def test_build_orders_words_by_count_and_keeps_labels_apart():
    d = Dictionary(min_count=2).build(LINES)
    # every line ends with EOS; ties (cat, dog: 2 each) keep the order first seen
    assert d.words == [EOS, "the", "cat", "dog"] and d.word_counts.tolist() == [5, 4, 2, 2]
    assert d.labels == ["__label__a", "__label__b"] and d.label_counts.tolist() == [2, 2]
    assert d.ntokens == 17 + 5 and d.input_rows == 4 + d.bucket
    assert d.word_id("the") == 1 and d.word_id("sat") == -1 and d.word_id("__label__a") == -1
    assert d.label_id("__label__b") == 1 and d.label_id("the") == -1


def test_encode_gives_each_lines_words_ngrams_and_labels():
    bucket = 1009
    d = Dictionary(min_count=2, word_ngrams=3, minn=2, maxn=3, bucket=bucket).build(LINES)
    ids, offsets, labels, label_offsets = d.encode(LINES + ["zebra the"])
    assert ids.dtype == labels.dtype == np.int32 and len(offsets) == len(label_offsets) == len(LINES) + 2
    for k, line in enumerate(LINES + ["zebra the"]):
        tokens = fasttext_tokens(line)
        words = [t for t in tokens if not t.startswith("__label__")]
        expected = []
        for word in words:
            wid = d.word_id(word)
            if wid >= 0:
                expected.append(wid)
            if word != EOS:
                expected += reference_char_ngrams(word, 2, 3, d.nwords, bucket)
        expected += reference_word_ngrams(words, 3, d.nwords, bucket)
        assert ids[offsets[k]:offsets[k + 1]].tolist() == expected, line
        assert labels[label_offsets[k]:label_offsets[k + 1]].tolist() == \
            [d.label_id(t) for t in tokens if t.startswith("__label__")]
    assert d.subword_ids("cat").tolist() == [2] + reference_char_ngrams("cat", 2, 3, d.nwords, bucket)
    assert d.subword_ids(EOS).tolist() == [0]


def test_a_file_is_streamed_as_bytes(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(("\n".join(LINES) + "\n").encode("utf-8"))
    from_file = Dictionary(min_count=2, word_ngrams=2, bucket=101).build(path)
    from_list = Dictionary(min_count=2, word_ngrams=2, bucket=101).build(LINES)
    assert from_file.words == from_list.words
    for a, b in zip(from_file.encode(path), from_list.encode(LINES)):
        assert np.array_equal(a, b)


def test_bad_input_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="minn must be <= maxn"):
        Dictionary(minn=5, maxn=3)
    with pytest.raises(ValueError, match="bucket must be > 0 for hashed n-grams"):
        Dictionary(word_ngrams=2, bucket=0)
    with pytest.raises(ValueError, match="min_count must be >= 1"):
        Dictionary(min_count=0)
    with pytest.raises(ValueError, match="label must be a non-empty prefix"):
        Dictionary(label="")
    with pytest.raises(RuntimeError, match="call build"):
        Dictionary().encode(["a"])
    with pytest.raises(ValueError, match="no lines"):
        Dictionary().build([])
    with pytest.raises(TypeError, match="line 1 must be a str"):
        Dictionary().build(["a", 3])
    with pytest.raises(ValueError, match="line 0 holds a newline at byte 1"):
        Dictionary().build(["a\nb"])
    assert Dictionary(bucket=0).build(["a b"]).input_rows == 3      # words alone need no buckets


def test_the_ids_are_fasttexts_own(tmp_path):
    fasttext = pytest.importorskip("fasttext")
    rng = np.random.default_rng(0)
    vocabulary = ["the", "cat", "sat", "on", "mat", "dog", "ran", "fast", "héllo", "naïve", "日本", "x"]
    lines = []
    for k in range(300):
        words = list(rng.choice(vocabulary, rng.integers(0, 10)))
        label = f"__label__{'abc'[k % 3]}"
        lines.append(" ".join([label] + words) if k % 7 else " ".join(words + [label, "__label__z"]))
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for word_ngrams, minn, maxn in ((1, 0, 0), (2, 0, 0), (3, 2, 4), (1, 3, 6)):
        model = fasttext.train_supervised(str(path), epoch=1, dim=4, wordNgrams=word_ngrams, minn=minn,
                                          maxn=maxn, bucket=1009, minCount=2, verbose=0)
        d = Dictionary(min_count=2, word_ngrams=word_ngrams, minn=minn, maxn=maxn, bucket=1009).build(path)
        counts = dict(zip(*model.get_words(include_freq=True)))
        assert d.nwords == len(counts) and [counts[w] for w in d.words] == d.word_counts.tolist()
        assert sorted(d.labels) == sorted(model.labels)
        # fastText's row of each of ours: words of equal count may be ordered otherwise
        rows = np.array([model.get_word_id(w) for w in d.words] + list(range(d.nwords, d.input_rows)))
        matrix = model.get_input_matrix()
        texts = lines + ["unseen words here", ""]
        ids, offsets, _, _ = d.encode(texts)
        for k, text in enumerate(texts):
            mine = matrix[rows[ids[offsets[k]:offsets[k + 1]]]].mean(axis=0)
            np.testing.assert_allclose(mine, model.get_sentence_vector(text), atol=1e-6)
        for word in vocabulary + ["unseen"]:
            assert sorted(rows[d.subword_ids(word)].tolist()) == sorted(model.get_subwords(word)[1].tolist())
