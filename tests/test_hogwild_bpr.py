"""Hogwild training of the BPR model end to end: learning, shared optimizer state, no leaks."""
import numpy as np
import pytest

import fastad as fa

USERS, ITEMS = 300, 200


@pytest.fixture(scope="module")
def data():
    return fa.data.planted_preferences(USERS, ITEMS, n_train=60_000, n_test=5_000, rank=4, seed=3)


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("adagrad", 0.2)])
def test_two_workers_learn_the_planted_preferences(data, optimizer, lr):
    train, test = data
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    before = model.auc(test)
    seen = []
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        results = fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2,
                                 args=(shared, train, 2, optimizer, lr, 2),
                                 start_method="fork", progress=lambda done, rate: seen.append(done))
        after = fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test)
    assert [r["examples"] for r in results] == [60_000, 60_000]
    assert all(r["loss"][1] < r["loss"][0] for r in results)
    assert after > max(0.8, before + 0.25)
    assert seen and seen[-1] == 120_000


def test_workers_update_the_same_shared_rows(data):
    """Both workers' updates land in one table: training on two shards moves both shards' rows."""
    train, _ = data
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    U0 = model.U.value.copy()
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2, args=(shared, train, 2),
                       start_method="fork")
        U = shared["U"].numpy().copy()
    rank0_users = np.unique(train["users"][0::2])
    rank1_users = np.unique(train["users"][1::2])
    assert np.abs(U[rank0_users] - U0[rank0_users]).max() > 0
    assert np.abs(U[rank1_users] - U0[rank1_users]).max() > 0


def test_adagrad_state_is_shared_between_workers(data):
    train, _ = data
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2,
                       args=(shared, train, 2, "adagrad", 0.1), start_method="fork")
        sums = shared["U"].state_array("Adagrad.sum", 0.0)
        # rows seen by either worker accumulated squared gradients in the one shared array
        touched = np.unique(train["users"])
        assert np.all(sums[touched].sum(axis=1) > 0)
        del sums


def test_unknown_optimizer_is_reported_with_the_rank(data):
    train, _ = data
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        with pytest.raises(fa.hogwild.WorkerError, match=r"optimizer must be one of \[.adadelta., .adagrad., .adam., .ftrl., .sgd.\]"):
            fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2,
                           args=(shared, train, 2, "lbfgs"), start_method="fork")


def test_bad_epochs_are_named(data):
    train, _ = data
    model = fa.models.BPR(USERS, ITEMS, dim=8, seed=0)
    with fa.hogwild.InProcessArrays({"U": model.U.value, "V": model.V.value}) as shared:
        with pytest.raises(ValueError, match="bpr_hogwild_worker: epochs must be >= 0, got -1"):
            fa.models.bpr_hogwild_worker(0, shared, train, 1, epochs=-1)
        assert fa.models.bpr_hogwild_worker(0, shared, train, 1, epochs=0)["loss"] == []
