"""The Python loop that `fa.train` replaces, for tests that compare the two exactly, and a
plain training loop."""
import fastad as fa


def train_in_python(loss, optimizer, feeds, triples, lr_at=None):
    """For each triple in order: set the leaves (`feeds`, BPR's example_graph feeds), forward,
    backward, step, zero_grad; `lr_at(e)`, if given, sets the lr before example e. Returns the
    mean loss."""
    leaves = list(feeds(triples).keys())
    n = len(triples["users"])
    total = 0.0
    for e in range(n):
        if lr_at is not None:
            optimizer.lr = lr_at(e)
        for leaf, key in zip(leaves, ("users", "pos", "neg")):
            leaf.set_value(triples[key][e:e + 1])
        loss.forward()
        total += loss.item()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return total / n


def train_feeds_in_python(loss, optimizer, feeds):
    """The loop fa.train replaces over `feeds` ({leaf: array of one row per example}): set
    each leaf to its example's row, forward, backward, step, zero_grad."""
    n = len(next(iter(feeds.values())))
    for e in range(n):
        for leaf, rows in feeds.items():
            leaf.set_value(rows[e])
        loss.forward()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def assert_adam_halves_the_loss(loss, parameters, steps, lr=0.05):
    """`steps` rounds of forward, zero_grad, backward and an Adam(lr) step on `parameters`
    take `loss` below half its first value."""
    opt = fa.optim.Adam(parameters, lr=lr)
    first = loss.item()
    for _ in range(steps):
        loss.forward()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.forward().item() < first / 2
