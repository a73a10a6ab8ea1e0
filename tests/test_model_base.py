"""fa.models.Model: every ready model saves and loads one way, its settings as JSON and its
state in one fa.save file, read back without pickle, the class checked."""
import json
import os

import numpy as np
import pytest
from model_helpers import MODELS, TEXTS, fitted

import fastad as fa
from fastad.models.base import Model


def arrays_of(model):
    """Everything a model learned or was given, as arrays by name."""
    if isinstance(model, fa.models.Recommender):
        return dict(model.state_dict(), liked=model.liked.toarray())
    if isinstance(model, fa.models.Word2Vec):
        return {"vectors": model.vectors, "output": model.output, "counts": model.counts}
    return {"input": model.input, "input_rows": model.input_rows, "output": model.output}


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return fitted(request.param)


def test_every_ready_model_derives_from_the_one_base_and_keeps_no_save_or_load_of_its_own():
    for name in MODELS:
        cls = getattr(fa.models, name)
        assert issubclass(cls, Model)
        own = [klass.__name__ for klass in cls.__mro__ if klass is not Model
               for method in ("save", "load") if method in vars(klass)]
        assert own == [], f"{name}: {own} define their own save or load"


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_a_saved_model_loads_back_equal(model, tmp_path, suffix):
    path = tmp_path / f"model{suffix}"
    model.save(path)
    back = type(model).load(path)
    assert type(back) is type(model) and back.settings() == model.settings()
    for name, array in arrays_of(model).items():
        np.testing.assert_array_equal(arrays_of(back)[name], array, err_msg=name)
    if isinstance(model, fa.models.Recommender):
        np.testing.assert_array_equal(back.recommend([0, 1], k=3)[0], model.recommend([0, 1], k=3)[0])
    elif isinstance(model, fa.models.Word2Vec):
        assert back.words == model.words and back.corpus_count == model.corpus_count
        np.testing.assert_array_equal(back.wv["walk"], model.wv["walk"])
    else:
        np.testing.assert_array_equal(back.predict_proba(TEXTS[:4]), model.predict_proba(TEXTS[:4]))


def test_the_file_holds_the_class_the_settings_as_json_and_the_state(model, tmp_path):
    model.save(tmp_path / "model.npz")
    saved = fa.load(tmp_path / "model.npz")
    assert sorted(saved) == ["model", "settings", "state"]
    assert saved["model"] == type(model).__name__
    assert json.loads(saved["settings"]) == model.settings()


def test_the_settings_are_the_constructors_keyword_arguments(model):
    rebuilt = type(model)(**model.settings(), **model._arrays()) if isinstance(
        model, fa.models.Recommender) else type(model)(**model.settings())
    assert rebuilt.settings() == model.settings()
    assert json.loads(json.dumps(model.settings())) == model.settings()


@pytest.mark.parametrize("saved_as, loaded_as", [("Word2Vec", "TextClassifier"), ("FastText", "Word2Vec"),
                                                 ("Word2Vec", "FastText"), ("BPR", "TwoTower"),
                                                 ("TextClassifier", "BPR")])
def test_a_file_of_another_class_is_a_value_error_naming_it_and_its_class(tmp_path, saved_as, loaded_as):
    path = tmp_path / f"a-{saved_as}.npz"
    fitted(saved_as).save(path)
    with pytest.raises(ValueError, match=rf"{loaded_as}.load: .*a-{saved_as}.npz is not a saved "
                                         rf"{loaded_as} \(it holds a {saved_as}\)"):
        getattr(fa.models, loaded_as).load(path)


@pytest.mark.parametrize("content, reason", [
    ({"weights": {}}, "no entry 'settings'"),
    ({"model": "Word2Vec", "state": {}}, "no entry 'settings'"),
    ({"model": "Word2Vec", "settings": "{not json", "state": {}}, "Expecting property name"),
    ({"model": "Word2Vec", "settings": json.dumps({"dim": 4, "colour": "red"}), "state": {}}, "colour"),
    ({"model": "Word2Vec", "settings": json.dumps({"dim": 4}), "state": {}}, "no entry 'words'"),
])
def test_a_file_that_is_no_saved_model_is_a_value_error_naming_it(tmp_path, content, reason):
    path = tmp_path / "other.npz"
    fa.save(content, path)
    with pytest.raises(ValueError, match=rf"Word2Vec.load: .*other.npz is not a saved Word2Vec \(.*{reason}"):
        fa.models.Word2Vec.load(path)


EARLIER = os.path.join(os.path.dirname(__file__), "data", "saved_before_one_format")


@pytest.mark.parametrize("name, file", [("BPR", "bpr"), ("TwoTower", "tt"), ("Word2Vec", "w2v"),
                                        ("FastText", "ft"), ("TextClassifier", "tc")])
def test_a_file_saved_before_the_one_format_still_loads(name, file):
    """Files written by each model's own save of the code before the one format (commit
    9c84f64: BPR(10, 8, dim=4, biases=True) and TwoTower fitted on planted interactions,
    Word2Vec, FastText(bucket=50) and TextClassifier(bucket=50, word_ngrams=2) on a few
    sentences, dim 8, one epoch each)."""
    path = os.path.join(EARLIER, f"{file}.npz")
    saved = fa.load(path)
    model = getattr(fa.models, name).load(path)
    assert type(model) is getattr(fa.models, name)
    if isinstance(model, fa.models.Recommender):
        for weight, array in saved["weights"].items():
            np.testing.assert_array_equal(model.state_dict()[weight], array, err_msg=weight)
        assert model.dim == 4 and model.liked.nnz == saved["liked"]["indices"].size
        assert model.recommend([0, 1], k=3)[0].shape == (2, 3)
    elif isinstance(model, fa.models.Word2Vec):
        assert model.settings()["dim"] == 8 and model.words == json.loads(saved["words"])
        n = len(model.words)          # a FastText keeps the rows of the buckets its words use
        kept = np.r_[:n, n + model.ngram_buckets] if name == "FastText" else slice(None)
        np.testing.assert_array_equal(model.vectors, saved["vectors"][kept])
        assert model.wv["a"].shape == (8,) and model.corpus_count == saved["corpus"]["count"]
    else:
        np.testing.assert_array_equal(model.input, saved["input"])
        assert model.predict(["a b c"])[0][0] in (("__label__x",), ("__label__y",))
    if name != "FastText":
        other = "Word2Vec" if name == "TextClassifier" else "TextClassifier"
        with pytest.raises(ValueError, match=rf"{other}.load: .*{file}.npz is not a saved {other}"):
            getattr(fa.models, other).load(path)


def test_a_state_that_does_not_fit_its_settings_is_refused(tmp_path):
    model = fitted("Word2Vec")
    model.save(tmp_path / "w2v.npz")
    saved = fa.load(tmp_path / "w2v.npz")
    saved["settings"] = json.dumps(dict(model.settings(), dim=5))
    fa.save(saved, tmp_path / "w2v.npz")
    with pytest.raises(ValueError, match=rf"w2v.npz is not a saved Word2Vec \(it holds {len(model.words)} "
                                         rf"words but vectors of shape \({len(model.words)}, 4\)"):
        fa.models.Word2Vec.load(tmp_path / "w2v.npz")


def test_load_never_unpickles(model, tmp_path, monkeypatch):
    model.save(tmp_path / "model.npz")
    loads = []
    numpy_load = np.load

    def checked_load(*args, **kwargs):
        loads.append(kwargs.get("allow_pickle", False))
        return numpy_load(*args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("load unpickled")

    monkeypatch.setattr(np, "load", checked_load)
    monkeypatch.setattr("pickle.load", refuse)
    monkeypatch.setattr("pickle.loads", refuse)
    type(model).load(tmp_path / "model.npz")
    assert loads == [False]
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, model=np.array([type(model).__name__], dtype=object))
    with pytest.raises(ValueError, match="pickled.npz"):
        type(model).load(pickled)


def test_an_untrained_model_is_not_saved(tmp_path):
    for model, error in ((fa.models.Word2Vec(), RuntimeError), (fa.models.TextClassifier(), RuntimeError),
                         (fa.models.BPR(factors=4), ValueError)):
        who = f"{type(model).__name__}.save"
        with pytest.raises(error, match=rf"{who}: the model (is not trained|has no factors)"):
            model.save(tmp_path / "never.npz")
    assert not list(tmp_path.iterdir())


class _Counter(Model):
    def __init__(self, size, rate=0.5, *, alias=None):
        self.size = size
        if rate is not None:
            self.rate = rate


def test_the_default_settings_are_the_positional_or_keyword_parameters_read_from_attributes():
    assert _Counter(3, rate=0.25, alias="x").settings() == {"size": 3, "rate": 0.25}


def test_the_default_settings_name_a_parameter_kept_under_no_attribute():
    with pytest.raises(NotImplementedError, match=r"_Counter: the default settings\(\) .* none for \['rate'\]"):
        _Counter(3, rate=None).settings()
