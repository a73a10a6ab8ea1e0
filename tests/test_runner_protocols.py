"""The runner's protocols (runner.ModelDescription, WorkerGraph, DeviceWorkerGraph): every
model's training follows them, and a worker refuses what does not, naming what it lacks."""
import numpy as np
import pytest
from model_helpers import LIKES, MODELS, fitted

import fastad as fa
from fastad.models import runner
from fastad.models.recsys.bpr import _ShardGraph, _TripleShards
from fastad.models.recsys.recommender import _FitGraph, _Fitting
from fastad.models.text.fasttext import _SubwordCorpus
from fastad.models.text.text_classifier import _ExampleGraph, _Examples
from fastad.models.text.word2vec import _Corpus, _WindowGraph


@pytest.fixture
def workers_built(monkeypatch):
    """(description, graph) of every worker built while the test runs."""
    built = []
    make = runner._Worker.__init__

    def recording(self, model, weights, settings, rank=0):
        make(self, model, weights, settings, rank)
        built.append((model, self.graph))

    monkeypatch.setattr(runner._Worker, "__init__", recording)
    return built


def test_every_models_description_and_graph_follow_the_protocols(workers_built):
    for name in MODELS:
        fitted(name)
    triples = fa.data.sample_triples(LIKES, n=50, seed=0)
    with fa.hogwild.share({"U": np.zeros((60, 4), np.float32), "V": np.zeros((40, 4), np.float32)}) as shared:
        fa.models.bpr_hogwild_worker(0, shared, triples, workers=1)
    kinds = {(type(model), type(graph)) for model, graph in workers_built}
    assert kinds == {(_Fitting, _FitGraph), (_Corpus, _WindowGraph), (_Examples, _ExampleGraph),
                     (_TripleShards, _ShardGraph), (_SubwordCorpus, _WindowGraph)}
    for model, graph in workers_built:
        assert isinstance(model, runner.ModelDescription) and isinstance(graph, runner.WorkerGraph)
        # the graphs of the models that fit on a GPU draw batches on the host for it
        device = isinstance(graph, runner.DeviceWorkerGraph)
        assert device == isinstance(graph, (_FitGraph, _WindowGraph))


@pytest.mark.parametrize("owner, member", [(_FitGraph, "epoch_loss"), (_FitGraph, "epoch_data"),
                                           (_Fitting, "worker_graph")])
def test_a_graph_or_description_missing_a_member_is_refused_when_a_worker_starts(monkeypatch, owner, member):
    monkeypatch.delattr(owner, member)
    protocol = "ModelDescription" if owner is _Fitting else "WorkerGraph"
    with pytest.raises(TypeError, match=rf"BPR.fit: .* must be a runner.{protocol}; a {owner.__name__} "
                                        rf"lacks {member}"):
        fa.models.BPR(60, 40, dim=4).fit(LIKES)


def test_a_device_fit_asks_for_a_device_graph():
    settings = runner.RunSettings(who="bpr_hogwild_worker", batch=1, device="cuda")
    weights = {"U": np.zeros((6, 2), np.float32), "V": np.zeros((4, 2), np.float32)}
    triples = fa.data.sample_triples(LIKES[:6, :4], n=5, seed=0)
    message = (r"bpr_hogwild_worker: the model's worker_graph\(\) must be a runner.DeviceWorkerGraph; "
               r"a _ShardGraph lacks device_feeds, device_sampler")
    with pytest.raises(TypeError, match=message):
        runner._Worker(_TripleShards(triples, 0), weights, settings)


def test_the_runner_refuses_a_model_that_is_no_description():
    settings = runner.RunSettings(who="Mine.fit", batch=1)
    with pytest.raises(TypeError, match=r"Mine.fit: the model must be a runner.ModelDescription; a dict "
                                        r"lacks worker_graph"):
        runner.EpochRunner({}, {}, settings)
