"""Pictures of graphs: `to_dot(v)` (Graphviz DOT text) and `render(v, path)`."""
import os
import shutil
import subprocess

from fastad._engine.graph import IndexInput, Input, Parameter, Variable

__all__ = ["to_dot", "render"]


def _label(node):
    if isinstance(node, Parameter):
        kind = f"Parameter {node.name}" if node.name else "Parameter"
    elif isinstance(node, IndexInput):
        kind = "IndexInput"
    elif isinstance(node, Input):
        kind = "Input"
    else:
        kind = node.op_name
    shape = "x".join(str(d) for d in node.shape) or "scalar"
    where = f" {node.device}" if node.device != "cpu" else ""
    return f"{kind}\\n{shape} {node.dtype.name}{where}"


def to_dot(root, name="fastad"):
    """The graph below `root` as Graphviz DOT text.

    One box per node with its op (or leaf kind), shape and dtype (and its
    device when it is on a GPU); Parameters
    are filled, nodes that need no gradient are grey, and the edges of
    gathers that send a sparse gradient to a Parameter are dashed and
    labelled "sparse grad". Each node appears once, however often it is used.

    >>> print(fa.to_dot((w * x).sum()))
    digraph fastad { ... }
    """
    if not isinstance(root, Variable):
        raise TypeError(f"to_dot: expected a fastad Variable, got {type(root).__name__}")
    ids, order, stack = {id(root): 0}, [root], [root]
    while stack:                                  # iterative: deep graphs are fine
        node = stack.pop()
        for parent in node.parents:
            if id(parent) not in ids:
                ids[id(parent)] = len(order)
                order.append(parent)
                stack.append(parent)
    lines = [f"digraph {name} {{", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    for node in order:
        attrs = f'label="{_label(node)}"'
        if isinstance(node, Parameter):
            attrs += ', style=filled, fillcolor="#cfe2ff"'
        elif not node.requires_grad:
            attrs += ', color="#888888", fontcolor="#888888"'
        lines.append(f"  n{ids[id(node)]} [{attrs}];")
    for node in order:
        for k, parent in enumerate(node.parents):
            sparse = node.op_name == "take" and k == 0 and isinstance(parent, Parameter)
            attrs = ' [style=dashed, label="sparse grad"]' if sparse else ""
            lines.append(f"  n{ids[id(parent)]} -> n{ids[id(node)]}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(root, path):
    """Draw the graph below `root` to `path` (.svg, .png or .pdf) with Graphviz.

    Needs the `dot` program of Graphviz on PATH (e.g. the `graphviz` system
    package); raises RuntimeError saying so when it is missing. Returns the path.

    >>> fa.render(loss, "graph.svg")
    'graph.svg'
    """
    fmt = os.path.splitext(str(path))[1].lstrip(".").lower()
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"render: path must end in .svg, .png or .pdf, got {path!r}")
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError("render: the Graphviz program 'dot' was not found on PATH; install "
                           "Graphviz (e.g. apt-get install graphviz), or write to_dot(v) to a "
                           ".dot file and render it elsewhere")
    result = subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=to_dot(root).encode(),
                            capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"render: dot failed: {result.stderr.decode(errors='replace').strip()}")
    return str(path)
