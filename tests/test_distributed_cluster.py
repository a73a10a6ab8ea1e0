"""fastad.distributed joining a cluster by address: a two-node Ray cluster started on this
machine, and an address where nothing answers."""
import contextlib
import os
import socket
import threading

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


@contextlib.contextmanager
def cluster_of(*node_cpus):
    """A Ray cluster on this machine: a head of one CPU and a node of each of `node_cpus`
    CPUs; their workers import this checkout. Yields (cluster, the added nodes)."""
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
            nodes = [cluster.add_node(num_cpus=cpus) for cpus in node_cpus]
            cluster.wait_for_nodes()
            yield cluster, nodes
        finally:
            ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def two_nodes():
    """A head and a second node of one CPU each."""
    with cluster_of(1) as (cluster, _):
        yield cluster


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


def test_a_shard_whose_node_leaves_starts_again_elsewhere_from_its_checkpoint(tmp_path):
    """Three nodes, a shard on each; the two workers run on the two nodes with CPUs. Once both
    have pushed half their updates and merged each other's, the third node leaves: its shard
    starts again on a live node from its checkpoint (made at the start, before any push),
    the first worker to reach it seeds it with its replica, and the run ends with every
    update in place."""
    with cluster_of(1, 0) as (cluster, (_, leaving)), distributed.share(
            {"w": np.zeros((6, 2))}, shards=3, checkpoint_dir=tmp_path / "ckpt",
            address=cluster.address) as shared:      # the last node: a shard and no worker
        moved = [s for s, place in enumerate(shared._block.places) if place[0] == leaving.node_id]
        assert len(moved) == 1

        def leave_midway():
            jobs.wait_for(str(tmp_path / "merged-0"))
            jobs.wait_for(str(tmp_path / "merged-1"))
            cluster.remove_node(leaving)
            open(tmp_path / "moved", "w").close()

        thread = threading.Thread(target=leave_midway)
        thread.start()
        assert distributed.run(jobs.add_halves_around_a_move, workers=2,
                               args=(shared, 200, str(tmp_path)), sync_every=20) == [0, 1]
        thread.join()
        np.testing.assert_array_equal(shared["w"].numpy(), np.full((6, 2), 200.0))
        mover = ray.get_actor(shared._block.moved_name(moved[0]))
        node = ray.get(mover.place.remote())[0]
        assert node != leaving.node_id and node in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
