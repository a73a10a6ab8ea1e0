"""A many-node fa.distributed run, simulated on this machine, beside one node's Hogwild.

`ray.cluster_utils.Cluster` starts NODES Ray nodes here (default 4), each with one CPU, so
each runs one worker (`fa.models.bpr_hogwild_worker`, fa.train, unchanged) and holds one
parameter shard of BPR's tables (k=32, 5,000 users x 1,000 items of planted rank-8
preferences, one epoch of per-example SGD from the same start). Workers on different
nodes share no memory: each node trains its own replica and syncs it with the shards, the
one on its node directly and the others through Ray calls, at the default sync interval.
Rows:

- Hogwild, 2 processes on this machine (the one-node reference);
- Ray on NODES simulated nodes;
- the same with one node (not the head) removed a third of the way through: its shard
  starts again on a live node from its checkpoint and the first worker to reach it seeds it
  with its replica; its worker, restarted (max_restarts=1), trains its part of the epoch
  again from the start once a CPU is free;
- PyTorch-BigGraph's scheme: U and V in NODES partitions each (the shards' rows), the
  examples split into NODES x NODES buckets (`fa.data.partition_triples`, negatives drawn
  within the bucket's item partition), handed out by `fa.distributed.buckets` so that no
  two workers hold a partition at once, the partitioned tables held a bucket at a time
  (`share(partitioned=...)`); beside it, one node's Hogwild on those same bucketed
  examples; and users alone partitioned, V whole.

Each row gives the test AUC and the run's seconds. The nodes share this machine's cores, so
examples/s say nothing about a real cluster and are not compared.
Run: python bench/distributed_nodes.py [--quick] [--nodes N]
"""
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402

import fastad as fa  # noqa: E402
from fastad import distributed  # noqa: E402

USERS, ITEMS, DIM, LR = 5_000, 1_000, 32, 0.1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bucket_worker(rank, shared, parts, lr, axes):
    """BPR over the buckets of `parts` on `axes`, one pass, each bucket's examples with
    fa.train."""
    model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    opt = fa.optim.SGD(model.parameters(), lr=lr)
    examples = 0
    for bucket in distributed.buckets(shared, axes):
        if len(parts[bucket]["users"]):
            fa.train(loss, opt, feeds(parts[bucket]), shuffle=True, seed=rank)
            examples += len(parts[bucket]["users"])
    return examples


def _auc(shared, test):
    return fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test)


def hogwild_row(train, test, model, label=""):
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        start = time.perf_counter()
        fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2, args=(shared, train, 2, "sgd", LR),
                       start_method="fork")
        return {"workload": "BPR Hogwild, 2 processes, one node" + label,
                "seconds": time.perf_counter() - start, "auc": _auc(shared, test)}


def cluster_rows(train, test, model, nodes, bucketings):
    import ray
    from ray.cluster_utils import Cluster
    # Cluster records its address in /tmp/ray/ray_current_cluster, which every later
    # ray.init() on this machine would join: keep it to this run.
    ray._private.utils.write_ray_address = lambda *args, **kwargs: None
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        others = [cluster.add_node(num_cpus=1) for _ in range(nodes - 1)]
        cluster.wait_for_nodes()
        distributed._connect(cluster.address)
        args = (train, nodes, "sgd", LR)
        rows = []
        with distributed.share({"U": model.U.value, "V": model.V.value}, shards=nodes) as shared:
            # unmeasured: the first run on fresh nodes starts their Ray worker processes
            distributed.run(fa.models.bpr_hogwild_worker, workers=nodes, args=(shared,) + args)
        for label, parts, axes, examples in bucketings:
            with distributed.share({"U": model.U.value, "V": model.V.value}, shards=nodes,
                                   partitioned=[key for axis in axes for key in axis]) as shared:
                start = time.perf_counter()
                distributed.run(bucket_worker, workers=nodes, args=(shared, parts, LR, axes))
                rows.append({"workload": f"BPR Ray, {nodes} simulated nodes, {label}",
                             "seconds": time.perf_counter() - start, "auc": _auc(shared, test),
                             "examples": examples})
        for leave in (False, True):
            with tempfile.TemporaryDirectory() as folder, distributed.share(
                    {"U": model.U.value, "V": model.V.value}, shards=nodes,
                    checkpoint_dir=folder) as shared:
                timer = None
                if leave:
                    timer = threading.Timer(rows[-1]["seconds"] / 3, cluster.remove_node, (others[-1],))
                    timer.start()
                start = time.perf_counter()
                distributed.run(fa.models.bpr_hogwild_worker, workers=nodes, args=(shared,) + args,
                                max_restarts=1)
                seconds = time.perf_counter() - start
                if timer is not None:
                    timer.join()
                moved = 0
                for s in range(nodes):
                    try:
                        ray.get_actor(shared._block.moved_name(s))
                        moved += 1
                    except ValueError:
                        pass
                rows.append({"workload": f"BPR Ray, {nodes} simulated nodes" + (
                    ", one node removed a third of the way through" if leave else ""),
                    "seconds": seconds, "auc": _auc(shared, test), "moved": moved})
        return rows
    finally:
        ray.shutdown()
        cluster.shutdown()


def run(quick=False, nodes=4):
    """Rows: one node's Hogwild (on the examples and on the bucketed ones), then NODES
    simulated nodes: in buckets, whole, and with one leaving."""
    import ray
    if ray.is_initialized():          # a local instance of another benchmark: this one makes its own
        ray.shutdown()
    nodes = int(nodes)
    train, test = fa.data.planted_preferences(USERS, ITEMS, n_train=500_000 if quick else 1_000_000,
                                              n_test=20_000, rank=8, noise=0.5, seed=0)
    model = fa.models.BPR(USERS, ITEMS, dim=DIM, seed=1)
    parts = fa.data.partition_triples(train, USERS, ITEMS, parts=nodes, seed=0)
    bucketed = {key: np.concatenate([parts[b][key] for b in sorted(parts)]) for key in train}
    bucketings = [(f"{nodes} x {nodes} buckets (U and V partitioned)", parts, [["U"], ["V"]],
                   "bucketed"),
                  (f"{nodes} buckets of users (U partitioned, V whole)",
                   fa.data.partition_triples(train, USERS, None, parts=nodes), [["U"]], "as they are")]
    hog = hogwild_row(train, test, model)
    hog_bucketed = hogwild_row(bucketed, test, model, f", the {nodes} x {nodes} buckets' examples")
    rows = [hog, hog_bucketed] + cluster_rows(train, test, model, nodes, bucketings)
    for row in rows[2:]:
        base = hog_bucketed if row.get("examples") == "bucketed" else hog
        row["auc_vs"] = row["auc"] - base["auc"]
        row["target"] = "test AUC within 0.02 of one node's Hogwild"
    return rows


def report(rows):
    for r in rows:
        line = f"{r['workload']}: test AUC {r['auc']:.4f}, {r['seconds']:.1f} s"
        if r.get("moved"):
            line += f", {r['moved']} shard(s) moved"
        if "auc_vs" in r:
            line += f" | AUC {r['auc_vs']:+.4f} against one node's Hogwild (on the same examples)"
        print(line)


if __name__ == "__main__":
    cli(run, __doc__, report, nodes="simulated nodes (default 4)")
