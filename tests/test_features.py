"""fa.features: VW's hashing (its parity with Vowpal Wabbit's own, where vowpalwabbit is
installed), the VW text, CSV/TSV and JSON-lines readers, chunks, the cache, and bad input."""
import io
import json
import os
import re

import numpy as np
import pytest

import fastad as fa
from fastad.features import Hasher, hash_name, iter_csv, iter_json, iter_vw, load, read_csv, read_json, read_vw
from fastad.features import reader


def vw(text, hasher=None, **kw):
    return read_vw(io.BytesIO(text.encode() if isinstance(text, str) else text), hasher, **kw)


def bags(f):
    return [f.ids[f.offsets[r]:f.offsets[r + 1]].tolist() for r in range(len(f))]


def bag_values(f):
    return [dict(zip(f.ids[f.offsets[r]:f.offsets[r + 1]].tolist(), f.values[f.offsets[r]:f.offsets[r + 1]].tolist()))
            for r in range(len(f))]


# ----------------------------------------------------------------- hashing

def test_murmurhash3_x86_32_reference_values():
    # MurmurHash3_x86_32's published test vectors (a name with a letter is murmur-hashed)
    assert hash_name("hello") == 0x248BFA47
    assert hash_name("The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert hash_name("a", 0x9747B28C) == 0x7FA09EA6
    assert hash_name("") == 0


def test_numeric_names_are_their_number_plus_the_seed_and_names_are_trimmed():
    assert hash_name("123", 5) == 128
    assert hash_name(" 12\t") == 12 == hash_name(b"12")
    assert hash_name("12a") == hash_name(" 12a ") != 12


def test_feature_ids_are_the_name_seeded_with_the_namespace_masked():
    h = Hasher(bits=10)
    f = vw("1 |a x y:2 |bee x | 7\n", Hasher(bits=10, constant=False))
    assert bags(f) == [[h.hash("x", "a"), h.hash("y", "a"), h.hash("x", "bee"), h.hash("7")]]
    assert h.hash("7") == 7 and h.hash("x", "a") == hash_name("x", hash_name("a")) & 1023


def test_names_of_every_length_end_at_each_separator():
    """A name ends at a space, a tab, ':' or '|' wherever it falls in the eight bytes that
    featurise.h scans at a time (names of 0 to 20 bytes, some not ASCII, at every offset)."""
    rng = np.random.default_rng(3)
    letters = list("abcdefgh") + ["é", "ñ"]
    h = Hasher(bits=24, constant=False)
    for _ in range(40):
        expected, parts = [], []
        for k in range(rng.integers(1, 12)):
            namespace = "ABCDEFGHIJKL"[k] + "".join(rng.choice(letters, rng.integers(0, 14)))  # own group
            parts.append("|" + namespace + rng.choice([" ", "\t"]))
            for _ in range(rng.integers(1, 5)):
                name = "".join(rng.choice(letters, rng.integers(1, 21)))
                value = rng.choice(["", ":2"])
                parts.append(name + value + rng.choice([" ", "\t", "  "]))
                expected.append((h.hash(name, namespace), 2.0 if value else 1.0))
        f = vw("1 " + "".join(parts).rstrip() + "\n", h)
        assert list(zip(f.ids.tolist(), f.values.tolist())) == expected
        f = vw("1 " + "".join(parts).rstrip().replace(" |", "|"), h)           # '|' right after a name
        assert f.ids.tolist() == [i for i, _ in expected]


def test_values_namespace_scale_and_zero_features():
    f = vw("1 |a:2 x y:3 z:0 |b w:-1.5e1\n", Hasher(constant=False))
    h = Hasher()
    assert bag_values(f) == [{h.hash("x", "a"): 2.0, h.hash("y", "a"): 6.0, h.hash("w", "b"): -15.0}]


def test_constant_feature_is_vw_s_constant():
    assert bags(vw("1 |a x\n", Hasher(bits=24)))[0][-1] == 11650396
    assert bags(vw("1 |a x\n", Hasher(bits=18)))[0][-1] == 11650396 & (2 ** 18 - 1)


def test_quadratic_and_cubic_crosses_hash_and_multiply():
    h = Hasher(bits=20)
    mask = 2 ** 20 - 1
    f = vw("1 |a x:2 |b p:3 |c q\n", Hasher(bits=20, quadratic=["ab"], cubic=["abc"], constant=False))
    ax, bp, cq = (hash_name(n, hash_name(s)) for n, s in (("x", "a"), ("p", "b"), ("q", "c")))
    pair = ((16777619 * ax) ^ bp) & 0xFFFFFFFF
    triple = ((16777619 * pair) ^ cq) & 0xFFFFFFFF
    assert bag_values(f) == [{h.hash("x", "a"): 2.0, h.hash("p", "b"): 3.0, h.hash("q", "c"): 1.0,
                              pair & mask: 6.0, triple & mask: 6.0}]


def test_a_namespace_crossed_with_itself_gives_each_pair_once():
    f = vw("1 |a x y z\n", Hasher(quadratic=["aa"], constant=False))
    assert len(f.ids) == 3 + 6                       # 3 features, 3 * 4 / 2 pairs
    f = vw("1 |a x y z\n", Hasher(cubic=["aaa"], constant=False))
    assert len(f.ids) == 3 + 10                      # triples i <= j <= k


def test_crosses_are_compiled_as_vw_does():
    assert Hasher(cubic=["aba"])._cubic == [tuple(b"aab")]
    assert Hasher(quadratic=["ba"])._quadratic == [tuple(b"ba")]
    assert Hasher(quadratic=["ba", "ab"])._quadratic == [tuple(b"ab")]


def test_ngrams_and_skipgrams_within_a_namespace():
    f = vw("1 |w a b c |x a b\n", Hasher(ngram={"w": 2}, constant=False))
    w = [hash_name(t, hash_name("w")) for t in "abc"]
    grams = [(w[0] * 27942141 + w[1]) & 0x3FFFF, (w[1] * 27942141 + w[2]) & 0x3FFFF]
    assert bags(f)[0] == [x & 0x3FFFF for x in w] + grams + [Hasher().hash(t, "x") for t in "ab"]
    skip = vw("1 |w a b c\n", Hasher(ngram={"w": 2}, skips={"w": 1}, constant=False))
    assert len(skip.ids) == 3 + 2 + 1                # + the 1-skip bigram a_c


def test_character_ngrams_are_the_grams_as_features():
    chars = vw("1 |n john\n", Hasher(char_ngrams={"n": 3}, constant=False))
    assert bags(chars) == bags(vw("1 |n <jo joh ohn hn>\n", Hasher(constant=False)))
    short = vw("1 |n é\n", Hasher(char_ngrams={"n": 5}, constant=False))   # shorter than n: the whole
    assert bags(short) == bags(vw("1 |n <é>\n", Hasher(constant=False)))
    utf8 = vw("1 |n añb\n", Hasher(char_ngrams={"n": 2}, constant=False))   # characters, not bytes
    assert bags(utf8) == bags(vw("1 |n <a añ ñb b>\n", Hasher(constant=False)))


def test_bits_32_gives_int64_ids():
    assert vw("1 |a x\n", Hasher(bits=31)).ids.dtype == np.int32
    f = vw("1 |a x\n", Hasher(bits=32))
    assert f.ids.dtype == np.int64 and f.ids[0] == hash_name("x", hash_name("a"))


def test_hasher_settings_round_trip_through_json():
    import json
    hasher = Hasher(bits=20, quadratic=["ab", ("words", "site")], cubic=["abc"], ngram={"w": 2}, skips=1,
                    char_ngrams={"n": 3}, constant=False)
    again = Hasher(**json.loads(json.dumps(hasher.settings())))
    assert again._compiled() == hasher._compiled() and again.settings() == hasher.settings()
    line = "1 |w a b c |site x |a y |b z |c q |n john\n"
    assert bags(vw(line, again)) == bags(vw(line, hasher))


def test_hasher_checks_its_arguments():
    with pytest.raises(ValueError, match="bits must be an int in"):
        Hasher(bits=33)
    with pytest.raises(ValueError, match="each of quadratic crosses 2"):
        Hasher(quadratic=["abc"])
    with pytest.raises(TypeError, match="list of crosses"):
        Hasher(quadratic="ab")
    with pytest.raises(ValueError, match=r"ngram\['w'\] must be an int"):
        Hasher(ngram={"w": 0})
    with pytest.raises(ValueError, match="must start with an ASCII"):
        Hasher(char_ngrams={"|x": 3})


# ----------------------------------------------------------------- VW's text format

def test_labels_importance_tags_and_unlabelled_lines():
    f = vw("1 2.5 'tag|a x\n-1 |a y\n\n|a z\n0 tag2| x\n  \n")
    np.testing.assert_array_equal(f.labels, [1, -1, np.nan, 0])     # "0 tag2|": tag2 is a tag
    np.testing.assert_array_equal(f.weights, [2.5, 1, 1, 1])
    assert f.offsets.tolist() == [0, 2, 4, 6, 8]


def test_offsets_values_and_dtypes():
    f = vw("1 |a x y z\n0 |b\n")
    assert f.offsets.dtype == np.int64 and f.values.dtype == np.float32 and f.labels.dtype == np.float32
    assert f.offsets.tolist() == [0, 4, 5]


def test_crlf_bom_and_no_final_newline():
    assert bags(vw(b"\xef\xbb\xbf1 |a x\r\n0 |a y")) == bags(vw("1 |a x\n0 |a y\n"))


def test_chunks_and_block_boundaries_give_the_same_arrays(monkeypatch):
    rng = np.random.default_rng(0)
    lines = [f"{rng.integers(2)} |w " + " ".join(f"t{rng.integers(50)}" for _ in range(rng.integers(0, 6)))
             + f" |p n:{rng.random():.3f}" for _ in range(200)]
    text = ("\n".join(lines) + "\n").encode()
    hasher = Hasher(quadratic=["wp"], ngram={"w": 2})
    whole = read_vw(io.BytesIO(text), hasher)
    monkeypatch.setattr(reader, "BLOCK", 7)                     # lines cut across blocks
    parts = list(iter_vw(io.BytesIO(text), hasher, chunk=33))
    assert [len(p) for p in parts] == [33] * 6 + [2]
    assert np.array_equal(np.concatenate([p.ids for p in parts]), whole.ids)
    assert np.array_equal(np.concatenate([p.labels for p in parts]), whole.labels)
    assert bags(whole) == [b for p in parts for b in bags(p)]


def test_the_last_take_hands_the_parsers_buffers_over():
    """A whole parse's arrays are the parser's own buffers, freed with the arrays (no copy);
    the parser parses on after it, from empty buffers."""
    f = vw("1 |a x y\n0 |b z\n")
    assert all(type(a.base).__name__ == "PyCapsule" for a in (f.offsets, f.values, f.labels, f.weights, f.fields))
    assert type(f.ids.base.base).__name__ == "PyCapsule"                  # a view of the uint32 ids
    h = Hasher(constant=False)
    parser = h.parser()
    for text, expected in ((b"1 |a x y\n", [[h.hash("x", "a"), h.hash("y", "a")]]), (b"0 |b z\n", [[h.hash("z", "b")]])):
        parser.feed(text, 0, True, 1 << 40, 1, False, "<test>")
        ids, offsets, values, labels, weights, fields = parser.take(last=True)
        assert [ids[offsets[r]:offsets[r + 1]].tolist() for r in range(len(labels))] == expected
        assert offsets[0] == 0 and values.tolist() == [1.0] * len(ids)


def test_a_path_source(tmp_path):
    path = tmp_path / "d.vw"
    path.write_text("1 |a x\n")
    assert bags(read_vw(path)) == bags(vw("1 |a x\n")) and bags(read_vw(str(path))) == bags(read_vw(path))


BAD_VW = [
    ("abc |a x", 1, "label 'abc' is not a number"),
    ("nan |a x", 1, "label 'nan' is not finite"),
    ("1 inf |a x", 3, "importance weight 'inf' is not finite"),
    ("1 -2 |a x", 3, "importance weight '-2' is negative"),
    ("1 2 3 |a x", 5, "more than `label importance`"),
    ("1 |a x:abc", 8, "feature 'x:abc': the value is not a number"),
    ("1 |a x:1e99", 8, "feature 'x:1e99': the value is not finite"),
    ("1 |a x:nan", 8, "feature 'x:nan': the value is not finite"),
    ("1 |:2 x", 4, r"a namespace value without a namespace name \('\|:'\)"),
    ("1 |a:z x", 6, "namespace 'a': its value 'z' is not a number"),
    ("1 a x", 6, "no '\\|'"),
]


@pytest.mark.parametrize("line, column, message", BAD_VW)
def test_a_malformed_line_names_the_line_and_column(line, column, message):
    text = f"1 |a ok\n\n{line}\n0 |a fine\n"
    with pytest.raises(ValueError, match=rf"line 3, column {column}: .*{message}"):
        vw(text)
    f = vw(text, on_error="skip")
    assert len(f) == 2 and f.skipped == 1 and f.labels.tolist() == [1, 0]


def test_invalid_utf8_names_the_line_and_byte():
    with pytest.raises(ValueError, match=r"line 2, column 7: invalid UTF-8 \(byte 0xff\)"):
        vw(b"1 |a x\n1 |a x\xff\n")
    for bad in (b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82"):      # overlong, surrogate, cut
        with pytest.raises(ValueError, match="invalid UTF-8"):
            vw(b"1 |a " + bad + b"\n")
    assert vw(b"1 |a \xe2\x82\xac\n", on_error="skip").skipped == 0     # a valid 3-byte character


def test_skipped_counts_per_chunk():
    parts = list(iter_vw(io.BytesIO(b"x |a\n1 |a\ny |a\n1 |a\n"), chunk=1, on_error="skip"))
    assert [len(p) for p in parts] == [1, 1] and sum(p.skipped for p in parts) == 2


def test_reader_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="on_error must be"):
        vw("1 |a x\n", on_error="ignore")
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        next(iter_vw(io.BytesIO(b""), chunk=0))
    with pytest.raises(TypeError, match="hasher must be"):
        vw("1 |a x\n", hasher=18)
    with pytest.raises(TypeError, match="text mode"):
        read_vw(io.StringIO("1 |a x\n"))


# ----------------------------------------------------------------- CSV / TSV

CSV = "click,site,price,title,w\n1,news,2.5,big red car,2\n0,shop,,small car,1\n"


def csv(text, hasher=None, **kw):
    spec = dict(label="click", weight="w", categorical={"site": "s"}, numeric={"price": "p"}, text={"title": "t"})
    spec.update(kw)
    return read_csv(io.BytesIO(text.encode() if isinstance(text, str) else text), hasher, **spec)


def test_csv_columns_are_the_vw_line_of_their_namespaces():
    f = csv(CSV, Hasher(quadratic=["st"]))
    g = vw("1 2 |s news |p price:2.5 |t big red car\n0 1 |s shop |t small car\n", Hasher(quadratic=["st"]))
    assert bag_values(f) == bag_values(g)
    assert f.labels.tolist() == [1, 0] and f.weights.tolist() == [2, 1]


def test_tsv_quoting_and_no_header():
    f = read_csv(io.BytesIO(b'1\t"a\tb ""q"""\n'), columns=["y", "name"], header=False, delimiter="\t",
                 label="y", categorical={"name": "n"}, hasher=Hasher(constant=False))
    assert bags(f) == [[Hasher().hash('a\tb "q"', "n")]]


def test_csv_character_ngrams_of_a_field():
    f = read_csv(io.BytesIO(b"y,name\n1,john\n"), Hasher(char_ngrams={"n": 3}, constant=False), label="y",
                 categorical={"name": "n"})
    assert bags(f) == bags(vw("1 |n <jo joh ohn hn>\n", Hasher(constant=False)))


BAD_CSV = [
    ("1,news,2.5,car,2,extra", "field 6", "6 fields, more than the 5 columns declared"),
    ("1,news,2.5,car", "column 'w' \\(field 5\\)", "4 fields, fewer than the 5 columns declared"),
    ("x,news,2.5,car,1", "column 'click' \\(field 1\\)", "label 'x' is not a number"),
    (",news,2.5,car,1", "column 'click' \\(field 1\\)", "the label is empty"),
    ("1,news,abc,car,1", "column 'price' \\(field 3\\)", "the value 'abc' is not a number"),
    ("1,news,inf,car,1", "column 'price' \\(field 3\\)", "the value 'inf' is not finite"),
    ("1,news,NaN,car,1", "column 'price' \\(field 3\\)", "the value 'NaN' is not finite"),
    ("1,news,1,car,nan", "column 'w' \\(field 5\\)", "importance weight 'nan' is not finite"),
    ("1,news,1,car,-1", "column 'w' \\(field 5\\)", "importance weight '-1' is negative"),
    ('1,"news,1,car,1', "column 'site' \\(field 2\\)", "without its closing quote"),
]


@pytest.mark.parametrize("line, where, message", BAD_CSV)
def test_a_malformed_csv_line_names_the_line_and_column(line, where, message):
    text = CSV + line + "\n1,a,1,b,1\n"
    with pytest.raises(ValueError, match=rf"<stream>: line 4, ({where}): .*{message}"):
        csv(text)
    f = csv(text, on_error="skip")
    assert len(f) == 3 and f.skipped == 1


def test_csv_invalid_utf8_and_spec_errors():
    with pytest.raises(ValueError, match=r"line 2, column 'title' \(field 4\): invalid UTF-8"):
        csv(b"click,site,price,title,w\n1,a,1,b\xff,1\n")
    with pytest.raises(ValueError, match="no column 'nope'"):
        csv(CSV, label="nope")
    with pytest.raises(ValueError, match="two roles"):
        csv(CSV, categorical={"click": "c"})
    with pytest.raises(ValueError, match="needs columns="):
        read_csv(io.BytesIO(b"1\n"), header=False)
    with pytest.raises(ValueError, match="delimiter must be one"):
        csv(CSV, delimiter=";;")


# ----------------------------------------------------------------- JSON lines

JSON_ROLES = dict(label="click", weight="w", categorical={"site": "s"}, numeric={"price": "p"}, text={"title": "t"})


def jsonl(text, hasher=None, **kw):
    return read_json(io.BytesIO(text.encode() if isinstance(text, str) else text), hasher or Hasher(bits=18),
                     **{**JSON_ROLES, **kw})


def test_json_lines_are_the_vw_line_of_their_namespaces():
    """Keys by name, in any order; escapes (a surrogate pair too) unescaped; a key no role
    names skipped whatever its value; a missing or null key gives nothing."""
    f = jsonl('{"title": "red shoes", "click": 1, "extra": {"a": [1, {"b": "x}"}]}, "site": "abc", '
              '"price": 2.5, "w": 2}\n'
              '{"click": 0, "site": 12, "price": null, "title": "caf\\u00e9 \\ud83d\\ude00"}\n'
              '\n'
              '  {"site": "x"}  \n')
    expected = vw("1 2 |s abc |p price:2.5 |t red shoes\n0 |s 12 |t café 😀\n|s x\n", Hasher(bits=18))
    assert sorted(map(sorted, bags(f))) == sorted(map(sorted, bags(expected)))
    assert bag_values(f)[0] == bag_values(expected)[0]
    np.testing.assert_array_equal(f.labels, [1, 0, np.nan])
    np.testing.assert_array_equal(f.weights, [2, 1, 1])
    chunks = list(iter_json(io.BytesIO(b'{"click": 1}\n' * 5), Hasher(), label="click", chunk=2))
    assert [len(c) for c in chunks] == [2, 2, 1]


BAD_JSON = [
    ('{"click": "x"}', "key 'click'", "the label 'x' is not a number"),
    ('{"click": 1, "click": 1}', "key 'click'", "the key is given twice"),
    ('{"site": [1]}', "key 'site'", "the value is an array"),
    ('{"price": "inf"}', "key 'price'", "the value 'inf' is not finite"),
    ('{"w": -1}', "key 'w'", "importance weight '-1' is negative"),
    ('{"click": tru}', "key 'click'", "the value 'tru' is not JSON"),
    ('{"click": "\\q"}', "key 'click'", "a bad escape in a string"),
    ('[1]', None, "a line is one JSON object"),
    ('{"click": 1,', None, "a key \\(a string\\) expected at byte 13"),
    ('{"click": 1 "a": 2}', None, "',' or '}' expected at byte 13"),
    ('{"click": 1} x', None, "text after the object at byte 14"),
    ('{"a": "open}', None, "a string without its closing quote"),
]


@pytest.mark.parametrize("line, key, message", BAD_JSON)
def test_a_malformed_json_line_names_the_line_and_key(line, key, message):
    text = '{"click": 1}\n' + line + '\n{"click": 0}\n'
    where = f", {key}" if key else ""
    with pytest.raises(ValueError, match=rf"<stream>: line 2{where}: .*{message}"):
        jsonl(text)
    f = jsonl(text, on_error="skip")
    assert len(f) == 2 and f.skipped == 1


def test_json_lines_invalid_utf8_and_spec_errors(tmp_path):
    with pytest.raises(ValueError, match=r"line 1: invalid UTF-8 \(byte 0xff"):
        jsonl(b'{"site": "a\xff"}\n')
    with pytest.raises(ValueError, match="name the keys to read"):
        read_json(io.BytesIO(b"{}\n"))
    with pytest.raises(ValueError, match="column 'click' is given two roles"):
        jsonl("{}\n", categorical={"click": "c"})
    path = tmp_path / "d.jsonl"
    path.write_text('{"click": 1, "site": "a"}\n')
    cached = read_json(path, Hasher(bits=12), label="click", categorical={"site": "s"}, cache=tmp_path / "c")
    again = read_json(path, Hasher(bits=12), label="click", categorical={"site": "s"}, cache=tmp_path / "c")
    assert bags(again) == bags(cached) == bags(vw("1 |s a\n", Hasher(bits=12)))


# ----------------------------------------------------------------- the cache

def test_cache_is_written_reused_and_rewritten(tmp_path, monkeypatch):
    data = tmp_path / "d.vw"
    data.write_text("1 |a x y\n0 |a z\n")
    cache = tmp_path / "d.cache"
    first = read_vw(data, Hasher(bits=20), cache=cache)
    assert cache.exists() and [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    calls = []
    real = reader.iter_vw
    monkeypatch.setattr(reader, "iter_vw", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = read_vw(data, Hasher(bits=20), cache=cache)           # read from the cache
    assert calls == [] and bags(again) == bags(first) and again.ids.dtype == first.ids.dtype
    other = read_vw(data, Hasher(bits=18), cache=cache)           # other settings: parsed again
    assert calls == [1] and other.bits == 18
    data.write_text("1 |a x y\n0 |a z\n1 |a w\n")                 # the source changed
    assert len(read_vw(data, Hasher(bits=18), cache=cache)) == 3 and calls == [1, 1]


def test_saved_features_load_without_pickle(tmp_path):
    f = vw("1 2 |a x\n0 |b y:3\n")
    f.save(tmp_path / "f.npz")
    with np.load(tmp_path / "f.npz", allow_pickle=False) as data:
        assert all(data[name].dtype != object for name in data.files)
    g = load(tmp_path / "f.npz")
    for name in ("ids", "offsets", "values", "labels", "weights"):
        np.testing.assert_array_equal(getattr(g, name), getattr(f, name))
    np.save(tmp_path / "other.npy", np.zeros(2))
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a saved Features"):
        load(tmp_path / "other.npz")


# ----------------------------------------------------------------- to a model

def test_the_bags_feed_a_bag_sampler_and_train():
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(300):
        y = int(rng.integers(2))
        words = [f"{'good' if y else 'bad'}{rng.integers(3)}"] + [f"w{rng.integers(20)}" for _ in range(3)]
        lines.append(f"{y} |w {' '.join(words)}")
    f = vw("\n".join(lines) + "\n", Hasher(bits=12))
    table = fa.Parameter(np.zeros((2 ** 12, 1), np.float32))
    longest = int(np.diff(f.offsets).max())
    ids, offsets = fa.IndexInput(np.zeros(longest, np.int64)), fa.IndexInput([0, 0])
    label = fa.Input(np.zeros((1, 1), np.float32))
    logit = fa.embedding_bag(table, ids, offsets, mode="sum", include_last_offset=True)
    loss = fa.nn.bce_with_logits(logit, label)
    sampler = fa.data.BagSampler(ids, offsets, f.ids, f.offsets, {label: f.labels.reshape(-1, 1, 1)})
    fa.train(loss, fa.optim.SGD([table], lr=0.5), sampler, epochs=3)
    good, bad = Hasher(bits=12).hash("good0", "w"), Hasher(bits=12).hash("bad0", "w")
    assert table.value[good, 0] > 0.5 > -0.5 > table.value[bad, 0]


def test_random_bytes_are_parsed_or_skipped_never_a_crash():
    rng = np.random.default_rng(3)
    alphabet = np.frombuffer(b"|: \t0123456789.-+eEabnix'\"\xff\xc3\xa9,", np.uint8)
    lines = [bytes(rng.choice(alphabet, size=rng.integers(1, 40))).replace(b"\n", b"") for _ in range(3000)]
    text = b"\n".join(lines) + b"\n"
    nonblank = sum(1 for line in lines if line.strip(b" \t\r"))
    f = vw(text, Hasher(quadratic=["ab"], ngram=2, char_ngrams={"a": 3}), on_error="skip")
    assert len(f) + f.skipped == nonblank and 0 < len(f) and 0 < f.skipped
    assert f.offsets[-1] == len(f.ids) and np.all(np.diff(f.offsets) >= 0) and np.all(np.isfinite(f.values))
    header = b"y,a,b\n"
    g = read_csv(io.BytesIO(header + text), label="y", categorical={"a": "a"}, numeric={"b": "b"},
                 on_error="skip")
    assert len(g) + g.skipped == sum(1 for line in lines if line.rstrip(b"\r")) and np.all(np.isfinite(g.labels))
    json_alphabet = np.frombuffer(b'{}[]":, \t0123456789.-eE\\unltrfaysbxq\xff\xc3\xa9', np.uint8)
    json_lines = [b'{"y": 1, "a": "x", ' + bytes(rng.choice(json_alphabet, size=rng.integers(1, 40))) for _ in range(3000)]
    json_lines = [line.replace(b"\n", b"").replace(b"\r", b"") for line in json_lines] + [b'{"y": 0, "a": "b", "b": 2}']
    j = read_json(io.BytesIO(b"\n".join(json_lines) + b"\n"), label="y", categorical={"a": "a"}, numeric={"b": "b"},
                  text={"c": "c"}, on_error="skip")
    assert len(j) + j.skipped == len(json_lines) and 0 < len(j) and 0 < j.skipped
    assert j.offsets[-1] == len(j.ids) and np.all(np.isfinite(j.values))


def test_a_source_is_a_path_or_a_binary_file():
    with pytest.raises(TypeError, match="source must be a path or a binary file, got int"):
        read_vw(3)


def test_values_are_the_float32_of_the_decimal():
    rng = np.random.default_rng(0)
    texts = ([f"{rng.random():.{rng.integers(1, 18)}f}" for _ in range(1000)]
             + [f"{rng.normal() * 10.0 ** int(rng.integers(-44, 38)):.{rng.integers(1, 12)}e}" for _ in range(1000)]
             + [str(rng.integers(-10 ** 6, 10 ** 6)) for _ in range(500)]
             + [repr(float(np.float32(rng.normal()))) for _ in range(500)] + ["+1.5E+3", "-0.0", ".5", "5."])
    f = vw("".join(f"1 |a x:{t}\n" for t in texts), Hasher(constant=False))
    expected = np.array([np.float32(float(t)) for t in texts])
    np.testing.assert_array_equal(f.values, expected[expected != 0])     # VW keeps no zero value


def test_csv_in_chunks_numbers_lines_after_the_header(monkeypatch):
    rows = "".join(f"{r % 2},s{r % 7},{r / 10},w{r % 5} w{r % 3},1\n" for r in range(50))
    spec = dict(label="click", weight="w", categorical={"site": "s"}, numeric={"price": "p"}, text={"title": "t"})
    whole = csv(CSV + rows)
    monkeypatch.setattr(reader, "BLOCK", 5)
    parts = list(iter_csv(io.BytesIO((CSV + rows).encode()), chunk=16, **spec))
    assert [len(p) for p in parts] == [16, 16, 16, 4]
    assert [b for p in parts for b in bags(p)] == bags(whole)
    with pytest.raises(ValueError, match="<stream>: line 40, column 'price'"):
        list(iter_csv(io.BytesIO((CSV + rows.replace("3.6,", "x,")).encode()), chunk=16, **spec))


def test_each_id_has_its_namespace_as_its_field(tmp_path):
    """Features.fields: a feature's namespace index, a cross's first namespace's, the
    constant feature's 128; the same from CSV and JSON columns; saved and loaded."""
    f = vw("1 |a x y |bc z\n0 |a q\n", Hasher(bits=10, quadratic=["ab"]))
    assert f.fields.dtype == np.uint8 and f.fields.tolist() == [97, 97, 98, 128, 97, 97, 97, 128]
    c = read_csv(io.BytesIO(b"y,s,t\n1,a,b c\n"), Hasher(bits=10, constant=False), label="y",
                 categorical={"s": "site"}, text={"t": "words"})
    assert c.fields.tolist() == [ord("s"), ord("w"), ord("w")]
    j = read_json(io.BytesIO(b'{"y": 1, "s": "a", "t": "b c"}\n'), Hasher(bits=10, constant=False), label="y",
                  categorical={"s": "site"}, text={"t": "words"})
    assert j.fields.tolist() == c.fields.tolist() and j.ids.tolist() == c.ids.tolist()
    f.save(tmp_path / "f.npz")
    assert load(tmp_path / "f.npz").fields.tolist() == f.fields.tolist()


def test_features_saved_before_fields_load_and_their_cache_is_parsed_again(tmp_path):
    """Format 1 (no fields) still loads; as a cache it is parsed again, for the fields."""
    data = tmp_path / "d.vw"
    data.write_text("1 |a x\n")
    f = read_vw(data, Hasher(bits=10), cache=tmp_path / "c.npz")
    record = json.loads(np.load(tmp_path / "c.npz")["record"].tobytes())
    arrays = {name: getattr(f, name) for name in ("ids", "offsets", "values", "labels", "weights")}
    old = dict(record, format=1)
    np.savez(tmp_path / "c.npz", **arrays, record=np.frombuffer(json.dumps(old).encode(), np.uint8))
    assert load(tmp_path / "c.npz").fields is None and bags(load(tmp_path / "c.npz")) == bags(f)
    again = read_vw(data, Hasher(bits=10), cache=tmp_path / "c.npz")
    assert again.fields.tolist() == f.fields.tolist()
    assert json.loads(np.load(tmp_path / "c.npz")["record"].tobytes())["format"] == 2
