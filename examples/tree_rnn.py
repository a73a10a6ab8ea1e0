"""A child-sum tree RNN over parse trees: one graph per tree shape, kept and replayed.

Data: the functions of the Python standard library, each parsed with `ast` into a tree
whose nodes are tokens (the node's type: If, Call, Name, ...). The model reads a tree
bottom-up, h = tanh(W emb(type) + U sum(h of the children) + b), and classifies the
function from its root's h: does it return a value, yield, both, or neither?

Every tree builds a graph of its own shape. `fa.GraphCache` builds each shape's graph
once and, for every later tree of that shape, copies the node types and the label into it
and replays it in compiled code; gradients and steps are those of a graph built anew.

Run: python examples/tree_rnn.py [--trees 3000] [--epochs 3] [--dim 32]
"""
import argparse
import ast
import os
import sysconfig
import time

# A model this small runs fastest on one BLAS thread (a value set by the user wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402

CLASSES = ("neither", "returns", "yields", "both")


def stdlib_functions(skip_dirs=("test", "tests", "site-packages"), kinds=(ast.FunctionDef,)):
    """The function definitions (the `ast` nodes of `kinds`) of the standard library's modules,
    in a fixed order: folders and files sorted by name, those in `skip_dirs` left out."""
    for dirpath, dirnames, filenames in os.walk(sysconfig.get_paths()["stdlib"]):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for filename in sorted(f for f in filenames if f.endswith(".py")):
            try:
                with open(os.path.join(dirpath, filename), encoding="utf-8") as f:
                    module = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            yield from (node for node in ast.walk(module) if isinstance(node, kinds))


def function_trees(limit, max_nodes=120):
    """(types, children, label) for up to `limit` standard-library functions of 5..max_nodes
    AST nodes, in post-order (children first); `children` is a tuple of tuples: the shape."""
    vocab, trees = {}, []
    for fn in stdlib_functions():
        types, children = [], []
        _post_order(fn, types, children, vocab)
        if 5 <= len(types) <= max_nodes:
            trees.append((np.array(types), tuple(children), function_class(fn)))
            if len(trees) == limit:
                return trees, len(vocab)
    return trees, len(vocab)


def _post_order(node, types, children, vocab):
    kids = tuple(_post_order(child, types, children, vocab) for child in ast.iter_child_nodes(node))
    types.append(vocab.setdefault(type(node).__name__, len(vocab)))
    children.append(kids)
    return len(types) - 1


def function_class(fn):
    """The class of a function (an index into CLASSES): whether it returns a value, yields,
    both or neither."""
    returns = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))
    yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn))
    return 2 * yields + returns


def root_state(xw, children, U, tanh=fa.tanh):
    """The root's state of a child-sum tree RNN: each node's h = tanh(xw[node] + (the sum of
    its children's h) @ U), the nodes in post-order (children first, the root last), `xw`
    holding every node's W emb(type) + b. Written with + and @ only, so the values of any
    array library serve, given its tanh."""
    h = []
    for i, kids in enumerate(children):
        pre = xw[i]
        if kids:
            total = h[kids[0]]
            for k in kids[1:]:
                total = total + h[k]
            pre = pre + total @ U
        h.append(tanh(pre))
    return h[-1]


def tree_logits(children, types, p):
    """The class scores (1, 4) of a tree of this shape whose node types are `types`."""
    xw = fa.embedding(p["emb"], types) @ p["W"] + p["b"]       # every node's W emb(type) + b
    return (root_state(xw, children, p["U"]) @ p["V"] + p["c"]).reshape(1, len(CLASSES))


def main(trees=3000, epochs=3, dim=32, lr=0.02, seed=0):
    data, n_types = function_trees(trees)
    split = len(data) * 4 // 5
    train, held_out = data[:split], data[split:]
    print(f"{len(data)} functions of the standard library: {len(train)} to train on, "
          f"{len(held_out)} held out; {n_types} node types; "
          f"{len({t[1] for t in data})} distinct tree shapes")
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(dim)
    p = {"emb": fa.Parameter(rng.normal(0, 1, (n_types, dim))), "W": fa.Parameter(rng.normal(0, scale, (dim, dim))),
         "U": fa.Parameter(rng.normal(0, scale, (dim, dim))), "b": fa.Parameter(np.zeros(dim)),
         "V": fa.Parameter(rng.normal(0, scale, (dim, len(CLASSES)))), "c": fa.Parameter(np.zeros(len(CLASSES)))}
    opt = fa.optim.SGD(list(p.values()), lr=lr)
    losses = fa.GraphCache(lambda shape, types, label: fa.nn.cross_entropy(tree_logits(shape, types, p), label))
    scores = fa.GraphCache(lambda shape, types: tree_logits(shape, types, p))
    history = {"train_loss": [], "accuracy": []}
    for epoch in range(1, epochs + 1):
        t0, total = time.perf_counter(), 0.0
        for k in rng.permutation(len(train)):
            types, shape, label = train[k]
            loss = losses(shape, types, np.array([label]))
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss.item()
        speed = len(train) / (time.perf_counter() - t0)
        with fa.no_grad():
            right = sum(int(np.argmax(scores(shape, types).value)) == label for types, shape, label in held_out)
        history["train_loss"].append(total / len(train))
        history["accuracy"].append(right / len(held_out))
        print(f"epoch {epoch}: loss {total / len(train):.3f}, held-out accuracy "
              f"{right / len(held_out):.1%} ({speed:,.0f} trees/s; {len(losses)} graphs kept, "
              f"{losses.nbytes / 2**20:.0f} MiB)")
    majority = max(np.bincount([t[2] for t in held_out], minlength=len(CLASSES))) / len(held_out)
    history["majority"] = majority
    print(f"always guessing the commonest class: {majority:.1%}")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=32)
    args = ap.parse_args()
    main(trees=args.trees, epochs=args.epochs, dim=args.dim)
