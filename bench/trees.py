"""Real trees for the tree-structured benchmarks: the ASTs of the Python standard library's
functions, each node's type its token, labelled by what the function returns (read as
examples/tree_rnn.py reads them, with async functions too and idlelib left out)."""
import ast

import numpy as np

from common import example

tree_rnn_example = example("tree_rnn")


def function_trees(limit, min_nodes=5, max_nodes=200):
    """Up to `limit` trees, in a fixed order: (types, children, label) per function of the
    standard library whose AST has min_nodes..max_nodes nodes. `types` holds each node's
    token id in post-order (a node after its children, the root last), `children[i]` the
    post-order positions (a tuple of tuples: hashable) of node i's children; the label is 0..3: whether the function
    returns a value and whether it yields. Also returns the token vocabulary."""
    vocab, trees = {}, []
    for fn in tree_rnn_example.stdlib_functions(skip_dirs=("test", "tests", "site-packages", "idlelib"),
                                                kinds=(ast.FunctionDef, ast.AsyncFunctionDef)):
        tree = _post_order(fn, vocab, max_nodes)
        if tree is not None and len(tree[0]) >= min_nodes:
            trees.append(tree + (tree_rnn_example.function_class(fn),))
            if len(trees) == limit:
                return trees, vocab
    return trees, vocab


def _post_order(fn, vocab, max_nodes):
    types, children = [], []
    stack = [(fn, iter(list(ast.iter_child_nodes(fn))), [])]
    while stack:
        node, it, done = stack[-1]
        child = next(it, None)
        if child is not None:
            stack.append((child, iter(list(ast.iter_child_nodes(child))), []))
            continue
        stack.pop()
        types.append(vocab.setdefault(type(node).__name__, len(vocab)))
        children.append(tuple(done))
        if len(types) > max_nodes:
            return None
        if stack:
            stack[-1][2].append(len(types) - 1)
    return np.array(types, dtype=np.int64), tuple(children)


def shape_of(tree):
    """The tree's structure without its tokens: trees of one shape build the same graph."""
    return tuple(len(c) for c in tree[1])
