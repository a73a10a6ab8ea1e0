"""fa.features' ids are Vowpal Wabbit's: each line's ids, and each feature's id by name, equal
those VW 9 gives the same line with the same options (read back from its --invert_hash
model, which lists every feature it trained on with its id)."""
import io
import re

import pytest

from fastad.features import Hasher, read_csv, read_vw

pyvw = pytest.importorskip("vowpalwabbit.pyvw", reason="vowpalwabbit (VW 9) is not installed: pip install "
                           "vowpalwabbit, the test extra's reference of the hashing")

ENTRY = re.compile(r"^(.*):(\d+):(\S+)(?: .*)?$")      # name:id:weight [its update state]


def vw_ids(tmp_path, line, options):
    """[(name, id)] of the features VW trains on for `line` with `options`."""
    data, model = tmp_path / "one.vw", tmp_path / "inverted.txt"
    data.write_text(line + "\n")
    workspace = pyvw.Workspace(f"--quiet {options} --invert_hash {model} -d {data}")
    workspace.run_parser()
    workspace.finish()
    text = model.read_text()
    body = text[text.index("\nl2_state"):].splitlines()[2:]       # after the model's header
    return [(m.group(1), int(m.group(2))) for m in map(ENTRY.match, body) if m]


def our_ids(line, hasher):
    f = read_vw(io.BytesIO(line.encode() + b"\n"), hasher)
    return set(f.ids.tolist())


CASES = [
    ("plain", "1 | cat dog 7", "-b 18", Hasher(18)),
    ("namespaced", "1 |animal cat dog |color red", "-b 20", Hasher(20)),
    ("numeric names", "1 |n 1 22 333 | 4444", "-b 24", Hasher(24)),
    ("valued", "1 |a x:2.5 y:-1 |b:0.5 z:3", "-b 18", Hasher(18)),
    ("anonymous", "1 |a :2 :3 b", "-b 24", Hasher(24)),
    ("no constant", "1 |a x", "-b 18 --noconstant", Hasher(18, constant=False)),
    ("quadratic", "1 |a x y:2 |bee p q", "-b 20 -q ab", Hasher(20, quadratic=["ab"])),
    ("quadratic, other order", "1 |a x y:2 |b p q", "-b 20 -q ba", Hasher(20, quadratic=["ba"])),
    ("quadratic with itself", "1 |a x y z", "-b 20 -q aa", Hasher(20, quadratic=["aa"])),
    ("quadratic twice", "1 |a x |b p", "-b 20 -q ba -q ab", Hasher(20, quadratic=["ba", "ab"])),
    ("cubic", "1 |a x y |b p |c u v", "-b 22 --cubic abc", Hasher(22, cubic=["abc"])),
    ("cubic, repeated", "1 |a x y:2 z |b p q", "-b 20 --cubic baa", Hasher(20, cubic=["baa"])),
    ("ngram", "1 |w a b c d", "-b 18 --ngram 3", Hasher(18, ngram=3)),
    ("skips", "1 |w a b c d |x e f", "-b 18 --ngram w2 --skips w1", Hasher(18, ngram={"w": 2}, skips={"w": 1})),
    ("ngram then cross", "1 |w a b |x e", "-b 22 --ngram w2 -q wx", Hasher(22, ngram={"w": 2}, quadratic=["wx"])),
    ("bits 32", "1 |a x y |b z", "-b 32 --sparse_weights -q ab", Hasher(32, quadratic=["ab"])),
]


@pytest.mark.parametrize("line, options, hasher", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ids_equal_vw_s(tmp_path, line, options, hasher):
    assert our_ids(line, hasher) == {i for _, i in vw_ids(tmp_path, line, options)}


def test_each_feature_id_by_name(tmp_path):
    hasher = Hasher(20)
    named = dict(vw_ids(tmp_path, "1 |animal cat 12 |color:2 red:3 | dog", "-b 20"))
    assert named == {"animal^cat": hasher.hash("cat", "animal"), "animal^12": hasher.hash("12", "animal"),
                     "color^red": hasher.hash("red", "color"), "dog": hasher.hash("dog"),
                     "Constant": 11650396 & (2 ** 20 - 1)}


def test_character_ngrams_and_csv_columns_equal_the_vw_lines_they_stand_for(tmp_path):
    vw = {i for _, i in vw_ids(tmp_path, "1 |s news |p price:2.5 |n <jo joh ohn hn>", "-b 22 -q sn")}
    hasher = Hasher(22, quadratic=["sn"], char_ngrams={"n": 3})
    f = read_csv(io.BytesIO(b"y,site,price,name\n1,news,2.5,john\n"), hasher, label="y",
                 categorical={"site": "s", "name": "n"}, numeric={"price": "p"})
    assert set(f.ids.tolist()) == vw
