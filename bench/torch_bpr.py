"""PyTorch's per-example BPR loop, the comparator of bench/bpr.py and of the BPR
speed-up the README quotes.

PyTorch is optional and never a dependency of fastad: these functions import
it when called and raise ImportError when it is missing.
"""
import time

__all__ = ["torch_bpr_trainer", "torch_examples_per_second"]


def torch_bpr_trainer(n_users, n_items, dim=32, lr=0.05, threads=1, embeddings=None):
    """A PyTorch per-example BPR loop: `nn.Embedding(sparse=True)` + `optim.SGD`.

    Returns `step(triples, start, n)`, which trains on triples[start:start+n]
    one example at a time (the same loss as `fastad.models.BPR`) and returns n.
    It trains new embeddings, or `embeddings` (U, V) given (Hogwild's, in shared memory).

    >>> step = torch_bpr_trainer(1000, 500)
    >>> step(train, 0, 100)          # 100 examples, as fastad.train would run them
    100
    """
    import torch

    torch.set_num_threads(threads)
    U, V = embeddings or (torch.nn.Embedding(n_users, dim, sparse=True),
                          torch.nn.Embedding(n_items, dim, sparse=True))
    opt = torch.optim.SGD(list(U.parameters()) + list(V.parameters()), lr=lr)
    logsigmoid = torch.nn.functional.logsigmoid
    cache = {}

    def step(triples, start, n):
        key = id(triples)
        if key not in cache:
            cache.clear()
            cache[key] = [torch.from_numpy(triples[k]) for k in ("users", "pos", "neg")]
        users, pos, neg = cache[key]
        for e in range(start, start + n):
            margin = (U(users[e:e + 1]) * (V(pos[e:e + 1]) - V(neg[e:e + 1]))).sum(-1)
            loss = -logsigmoid(margin).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return n

    return step


def torch_examples_per_second(triples, n_users, n_items, dim=32, lr=0.05, n=2000):
    """PyTorch's per-example BPR throughput on one thread, timed over n examples.

    >>> torch_examples_per_second(train, 1000, 500, n=1000)    # examples per second
    """
    step = torch_bpr_trainer(n_users, n_items, dim, lr)
    step(triples, 0, min(100, n))                      # warm up
    start = time.perf_counter()
    step(triples, 0, n)
    return n / (time.perf_counter() - start)
