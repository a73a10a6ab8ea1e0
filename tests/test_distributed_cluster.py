"""fastad.distributed joining a cluster by address: a two-node Ray cluster started on this
machine, and an address where nothing answers."""
import os
import socket

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="fastad.distributed needs Ray: pip install 'fastad[distributed]'")
from ray.cluster_utils import Cluster  # noqa: E402

import fastad as fa  # noqa: E402
from fastad import distributed  # noqa: E402

import distributed_workers as jobs  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))


def unused_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_address_fails_at_once_and_starts_nothing():
    if ray.is_initialized():
        ray.shutdown()
    address = f"127.0.0.1:{unused_port()}"
    with pytest.raises(ConnectionError, match=f"cannot reach a Ray cluster at address='{address}': "
                                              f"nothing answered"):
        distributed.share({"w": np.zeros(2)}, address=address)
    with pytest.raises(ConnectionError, match="cannot reach a Ray cluster at address='ray://"):
        distributed.run(jobs.add_ones, address=f"ray://{address}")
    with pytest.raises(TypeError, match="address must be a str"):
        distributed.share({"w": np.zeros(2)}, address=6379)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def two_nodes():
    """A head and a second node of one CPU each; their workers import this checkout."""
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([REPO, TESTS]))
        # Cluster writes its address to /tmp/ray/ray_current_cluster, which every other
        # ray.init() on this machine would then join: keep it to this test.
        patch.setattr(ray._private.utils, "write_ray_address", lambda *args, **kwargs: None)
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()


def test_a_two_node_cluster_trains_with_a_shard_and_a_worker_on_each_node(two_nodes):
    train, test = fa.data.planted_preferences(300, 150, n_train=30_000, n_test=5_000, rank=4, seed=0)
    model = fa.models.BPR(300, 150, dim=16, seed=1)
    with distributed.share({"U": model.U.value, "V": model.V.value}, shards=2,
                           address=two_nodes.address) as shared:
        nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(nodes) == 2
        assert {ray.get(shard.place.remote())[0] for shard in shared._block.shards} == nodes
        assert sorted(distributed.run(jobs.node_of, workers=2)) == sorted(nodes)
        assert distributed.run(jobs.bpr_train_worker, workers=2, args=(shared, train, 2, 0.2),
                               sync_every=250) == [0, 1]
        auc = fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test)
    assert auc > 0.85
