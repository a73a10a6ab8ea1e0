"""Graph pictures: DOT text and rendering."""
import shutil

import numpy as np
import pytest

import fastad as fa


def graph():
    E = fa.Parameter(np.zeros((5, 3)), name="E")
    x = fa.Input(np.ones((2, 3)))
    rows = E[fa.IndexInput([1, 2])]
    return fa.sum(fa.tanh(rows * x) + rows)


def test_to_dot_lists_every_node_once_with_shapes_and_sparse_edges():
    dot = fa.to_dot(graph())
    assert dot.startswith("digraph fastad {") and dot.rstrip().endswith("}")
    assert dot.count("Parameter E\\n5x3 float32") == 1
    assert dot.count("[style=dashed, label=\"sparse grad\"]") == 1
    assert "IndexInput\\n2 float32" not in dot and "IndexInput\\n2 int64" in dot
    assert "sum\\nscalar float32" in dot
    nodes = [line for line in dot.splitlines() if "[label=" in line]
    assert len(nodes) == 8        # E, ids, take, x, mul, tanh, add, sum
    assert dot.count(" -> ") == 8


def test_to_dot_handles_deep_graphs_and_rejects_non_variables():
    w = fa.Parameter(np.ones(1))
    v = w
    for _ in range(5000):
        v = v * 1.0
    assert fa.to_dot(v).count(" -> ") == 5000
    with pytest.raises(TypeError, match="Variable"):
        fa.to_dot(np.ones(2))


def test_render_writes_an_svg_or_says_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match=".svg, .png or .pdf"):
        fa.render(graph(), tmp_path / "g.gif")
    if shutil.which("dot") is None:
        with pytest.raises(RuntimeError, match="Graphviz program 'dot' was not found"):
            fa.render(graph(), tmp_path / "g.svg")
    else:
        out = fa.render(graph(), tmp_path / "g.svg")
        assert open(out).read().lstrip().startswith(("<?xml", "<svg"))
