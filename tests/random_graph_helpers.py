"""Random small graphs for the tests of fresh and kept graphs: a recipe of ops (random ops,
shapes, dtypes, shared subexpressions) built with fastad's functions or PyTorch's."""
import numpy as np
from hypothesis import strategies as st

import fastad as fa

UNARY = ("tanh", "sigmoid", "square", "neg")
BINARY = ("add", "sub", "mul")
SHAPES = ((3,), (2, 3))


def fa_ops():
    return {"tanh": fa.tanh, "sigmoid": fa.sigmoid, "square": fa.square, "neg": fa.neg,
            "add": fa.add, "sub": fa.sub, "mul": fa.mul, "sum": lambda v: v.sum(axis=-1, keepdims=True),
            "matmul": lambda v, w: v @ w, "row": lambda v: v[0] if v.ndim == 2 else v}


# A step: (op, i, j): the op on nodes i and j (j unused by one-input ops), indices taken modulo
# the nodes made so far, so shared subexpressions come for free. The leaves come first: two
# Parameters, an Input that takes no gradient, and a (3, 3) Parameter for matmul.
steps = st.lists(st.tuples(st.sampled_from(UNARY + BINARY + ("sum", "matmul", "row")),
                           st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=12)
recipes = st.fixed_dictionaries({
    "steps": steps, "shapes": st.tuples(st.sampled_from(SHAPES), st.sampled_from(SHAPES)),
    "f64": st.booleans(), "seed": st.integers(0, 2**16)})


def leaf_values(recipe):
    rng = np.random.default_rng(recipe["seed"])
    a_shape, b_shape = recipe["shapes"]
    return [rng.normal(size=a_shape) * 0.5, rng.normal(size=b_shape) * 0.5,
            rng.normal(size=(3,)) * 0.5, rng.normal(size=(3, 3)) * 0.5]


def build(recipe, leaves, ops):
    """The recipe's nodes (leaves first) and its root: the sum of the last node and a middle one
    (two uses), and a term of the first Parameter. An op whose operands cannot combine (shapes) is skipped."""
    nodes = list(leaves)
    for op, i, j in recipe["steps"]:
        u, v = nodes[i % len(nodes)], nodes[j % len(nodes)]
        if op in BINARY:
            try:
                np.broadcast_shapes(tuple(u.shape), tuple(v.shape))
            except ValueError:
                continue
            out = ops[op](u, v)
        elif op == "matmul":
            if tuple(u.shape)[-1:] != (3,):
                continue
            out = ops["matmul"](u, leaves[3])
        else:
            out = ops[op](u)
        nodes.append(out)
    last, middle = nodes[-1], nodes[len(nodes) // 2]
    root = ops["tanh"](last).sum() + ops["square"](middle).sum() + ops["sigmoid"](leaves[0]).sum()
    return nodes, root
