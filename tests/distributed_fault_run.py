"""Run one shard-kill scenario of test_distributed.py in its own process and print the outcome
as JSON: killing an actor with tasks in flight can trip an internal check of Ray's own
(ray 2.60: "Tried to complete task that was not pending"), which ends the whole driver
process; run here, that ends this process only, and the test can tell it apart.

Usage: python distributed_fault_run.py SHARD_RESTARTS STEPS FOLDER
"""
import json
import os
import sys

import numpy as np
import ray

from fastad import distributed
from fastad.parallel import WorkerError

import distributed_workers as jobs

def main(shard_restarts, steps, folder):
    here = os.path.dirname(os.path.abspath(__file__))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([os.path.dirname(here), here])}})
    meet = os.path.join(folder, "meet")
    os.makedirs(meet)
    outcome = {"error": None}
    with distributed.share({"w": np.zeros((4, 2))}, shards=2, checkpoint_dir=os.path.join(folder, "ckpt"),
                           shard_restarts=shard_restarts) as shared:
        try:
            results = distributed.run(jobs.kill_a_shard_midway, workers=2,
                                      args=(shared, steps, meet, 0.005), sync_every=10,
                                      node_replicas=False)
        except WorkerError as e:
            outcome["error"] = str(e)
        else:
            outcome["checkpointed"] = results[0][1].tolist()
            outcome["final"] = shared["w"].numpy().tolist()
    ray.shutdown()
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
