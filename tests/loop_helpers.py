"""The Python loop that `fa.train` replaces, for tests that compare the two exactly."""


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
