"""The examples run with small arguments and learn (so they cannot silently rot)."""
import importlib.util
import math
import os
import sys

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example(name):
    """Import examples/<name>.py, undoing its OPENBLAS_NUM_THREADS default for later tests."""
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    return module


@pytest.fixture(scope="module")
def char_lstm():
    return load_example("char_lstm")


@pytest.fixture(scope="module")
def mlp():
    return load_example("mlp")


def test_char_lstm_learns(char_lstm, capsys):
    history = char_lstm.main(epochs=2, chars=12_000, seq_len=16, batch=2, hidden=24, lr=1e-2)
    uniform = history["uniform_loss"]
    assert uniform == pytest.approx(math.log(len(char_lstm.ALPHABET)))
    assert history["train_loss"][1] < history["train_loss"][0] < uniform
    assert history["valid_loss"][-1] < uniform - 1.0          # far better than guessing
    out = capsys.readouterr().out
    assert "standard-library modules" in out and "chars/s" in out and "epoch 2:" in out


def test_char_lstm_rejects_a_corpus_too_small_for_one_chunk(char_lstm):
    with pytest.raises(ValueError, match="too few held out for one chunk of 32 x 4"):
        char_lstm.main(epochs=1, chars=1_000)


def test_char_lstm_batches_pair_each_character_with_the_next(char_lstm):
    codes = np.arange(23)
    chunks = list(char_lstm.batches(codes, seq_len=4, batch=2))
    assert len(chunks) == 2                         # streams of 11: two chunks of 4 fit
    x, y = chunks[1]
    assert x.shape == (4, 2) and y.shape == (8,)
    np.testing.assert_array_equal(x[:, 0], [4, 5, 6, 7])
    np.testing.assert_array_equal(x[:, 1], [15, 16, 17, 18])
    np.testing.assert_array_equal(y.reshape(4, 2), x + 1)


def test_char_lstm_corpus_and_sampling(char_lstm):
    text, n_modules = char_lstm.load_corpus(5_000)
    assert len(text) == 5_000 and n_modules >= 1
    assert set(text) <= set(char_lstm.ALPHABET)
    assert char_lstm.load_corpus(5_000)[0] == text                  # deterministic
    model = char_lstm.CharLSTM(len(char_lstm.ALPHABET), 4, 8, np.random.default_rng(0))
    line = char_lstm.sample(model, "def ", 20, 1.0, np.random.default_rng(1))
    assert line.startswith("def ") and len(line) <= 24 and "\n" not in line


def test_mlp_learns(mlp, capsys):
    history = mlp.main(epochs=3, batch=16, hidden=32)
    assert history["loss"][-1] < history["loss"][0]
    assert history["accuracy"][-1] > 0.6                       # chance is 0.1
    assert "held-out accuracy" in capsys.readouterr().out


def test_mlp_falls_back_to_documented_synthetic_data(mlp, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)     # import fails as if absent
    history = mlp.main(epochs=2, batch=32, hidden=32)
    assert history["synthetic"]
    assert "SYNTHETIC digits (scikit-learn is not installed)" in capsys.readouterr().out
    assert history["accuracy"][-1] > 0.6
    images, labels = mlp.synthetic_digits(n=50, seed=3)
    assert images.shape == (50, 64) and images.min() >= 0 and images.max() <= 16
    np.testing.assert_array_equal(labels, mlp.synthetic_digits(n=50, seed=3)[1])


def test_cnn_reaches_97_percent_on_held_out_digits(capsys):
    cnn = load_example("cnn")
    history = cnn.main(epochs=6, batch=32)
    assert history["accuracy"][-1] >= 0.97
    assert "held-out accuracy" in capsys.readouterr().out


def test_cnn_says_how_to_get_scikit_learn(monkeypatch):
    cnn = load_example("cnn")
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)     # import fails as if absent
    with pytest.raises(SystemExit, match="pip install scikit-learn"):
        cnn.main(epochs=1)


def test_quickstart_recovers_the_line():
    slope, intercept = load_example("quickstart").main(steps=600)
    assert slope == pytest.approx(3.0, abs=1e-3) and intercept == pytest.approx(5.0, abs=1e-3)


def test_recommender_learns_with_two_workers_and_saves_a_checkpoint(tmp_path, capsys):
    import fastad as fa

    path = tmp_path / "bpr.npz"
    history = load_example("recommender").main(["--workers", "2", "--epochs", "4", "--eval-users", "300",
                                                "--checkpoint", str(path)])
    assert len(history) == 5                                  # before training and after each epoch
    assert history[-1]["auc"] > 0.75 and history[0]["auc"] < 0.6
    assert history[-1]["precision@10"] > 5 * history[0]["precision@10"]
    state = fa.load(path)
    assert state["U"].shape == (5_000, 32) and state["V"].shape == (2_000, 32)
    out = capsys.readouterr().out
    assert "precision@10" in out and "test AUC" in out and "user 0's top 5" in out


def test_gensim_tutorial_runs_gensims_calls_unchanged(capsys):
    vector, sims = load_example("gensim_tutorial").main()
    assert vector.shape == (100,) and np.all(np.isfinite(vector))
    assert len(sims) == 10 and "computer" not in [word for word, _ in sims]
    assert "nearest 'computer'" in capsys.readouterr().out


def test_implicit_tutorial_runs_implicits_calls_and_learns(capsys):
    result = load_example("implicit_tutorial").main(["--users", "400", "--items", "120",
                                                     "--iterations", "15"])
    assert len(result["recommended"]) == 10 and not set(result["recommended"]) & result["liked"]
    assert result["related"][0] == 0                    # implicit's similar_items lists the item first
    assert result["hit_rate"] > 2 * 10 / 120            # well above chance (0.08)
    assert "held-out check" in capsys.readouterr().out


def test_lightfm_tutorial_runs_lightfms_calls_and_learns(capsys):
    result = load_example("lightfm_tutorial").main(["--users", "400", "--items", "160", "--epochs", "20"])
    assert result["precision@5"] > 2 * result["chance"]
    assert result["cold_hit"] > 2 * result["cold_chance"]      # new items found by their genre
    assert "test precision@5" in capsys.readouterr().out


def test_bilstm_tagger_learns_and_replays_a_graph_per_length(capsys):
    history = load_example("bilstm_tagger").main(sentences=600, epochs=2, hidden=16)
    assert history["train_loss"][1] < history["train_loss"][0]
    assert history["accuracy"][-1] > history["majority"] + 0.3
    out = capsys.readouterr().out
    assert "distinct lengths" in out and "graphs kept" in out and "epoch 2:" in out


def test_tree_rnn_learns_and_replays_kept_graphs(capsys):
    history = load_example("tree_rnn").main(trees=500, epochs=2, dim=16, lr=0.05)
    assert history["train_loss"][1] < history["train_loss"][0]
    assert history["accuracy"][-1] > history["majority"]
    out = capsys.readouterr().out
    assert "distinct tree shapes" in out and "graphs kept" in out and "epoch 2:" in out


@pytest.mark.parametrize("model, better_than", [("linear", 0.64), ("fm", 0.6)])
def test_click_prediction_learns_from_its_tsv(model, better_than, capsys):
    result = load_example("click_prediction").main(["--rows", "30000", "--model", model])
    assert result["auc"] > better_than                  # 0.5 is chance
    assert result["history"][1] < result["history"][0]   # the training loss falls
    assert "held-out AUC" in capsys.readouterr().out
