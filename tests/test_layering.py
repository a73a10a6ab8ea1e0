"""The engine (fastad_cy/) is the ground floor: it never imports the fastad package (nor do its stubs);
fastad.cuda registers its device support with the engine instead."""
import os
import re
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "fastad_cy"
IMPORTS_FASTAD = re.compile(r"^\s*(from\s+fastad(\.\w+)*\s+c?import\b|c?import\s+fastad(\.\w+)*\b)",
                            re.M)


def test_no_engine_module_imports_the_fastad_package():
    sources = sorted(ENGINE.glob("*.pyx")) + sorted(ENGINE.glob("*.pxd")) + sorted(ENGINE.glob("*.pyi"))
    assert sources
    offenders = [f"{path.name}: {match.group(0).strip()}" for path in sources
                 for match in IMPORTS_FASTAD.finditer(path.read_text())]
    assert offenders == []


def test_the_scan_catches_late_imports_too():
    text = "def f():\n    from fastad.cuda import ops\n    import fastad\nfrom fastad_cy.graph cimport X\n"
    assert [m.group(0).strip() for m in IMPORTS_FASTAD.finditer(text)] == \
        ["from fastad.cuda import", "import fastad"]


def test_the_engine_alone_asks_for_device_support():
    # A fresh process with only the engine imported: a device request says what is missing.
    code = ("import numpy as np, fastad_cy.graph as g\n"
            "try:\n"
            "    g.Parameter(np.ones(2), device='cuda')\n"
            "except RuntimeError as e:\n"
            "    print(e)\n"
            "import sys; assert not any(m == 'fastad' or m.startswith('fastad.') for m in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "no device support is registered" in out.stdout


def test_variable_operators_work_with_the_engine_alone():
    # The op modules register Variable's operators with the graph; importing fastad_cy imports them.
    code = ("import numpy as np, fastad_cy.graph as g\n"
            "x = g.Input(np.array([1.0, 2.0]))\n"
            "print(float(((x + 1.0) * x - x / 2.0).sum().value), (x @ x).value, x[1].value)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["6.5", "5.0", "2.0"]


def test_a_source_checkout_first_on_the_path_still_finds_the_compiled_modules(tmp_path):
    # A process started in a source checkout has its fastad_cy/ first on sys.path, without the
    # compiled modules: they come from the copy that was built or installed (here, this one).
    import fastad_cy.graph
    built = Path(fastad_cy.graph.__file__).resolve().parents[1]
    checkout = tmp_path / "fastad_cy"
    checkout.mkdir()
    for name in ("__init__.py", "ops_manifest.py"):
        (checkout / name).write_text((ENGINE / name).read_text())
    code = ("import os, numpy as np, fastad_cy, fastad_cy.graph as g\n"
            "print(os.path.abspath(fastad_cy.__file__), float((g.Input(np.array([1.0, 2.0])) + 1.0).sum().value))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(built)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(checkout / "__init__.py"), "5.0"]     # the checkout's package


# ------------------------------------------------------------- the module graph
# Every import edge between fastad_cy/ and fastad/ modules, read from the sources (.pyx, .pxd,
# .pyi, .py): `cimport`, `import`, `from ... (c)import`, and importlib's `import_module("...")`,
# at any depth (a lazy import inside a function is an edge too). A string naming a package
# prefix ("fastad_cy." + name) is an edge to every module under it.
ROOT = ENGINE.parent
FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+c?import\s+(\([^)]*\)|[^#\n]*)", re.M)
PLAIN_IMPORT = re.compile(r"^\s*c?import\s+([\w., ]+?)\s*(?:#.*)?$", re.M)
IMPORT_MODULE = re.compile(r"import_module\(\s*[\"']([\w.]+)[\"']")
DOCSTRING = re.compile(r"(\"\"\"|''')[\s\S]*?\1")      # examples in docstrings are no imports


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_sources():
    """{module name: [its source files]} for fastad_cy/ and fastad/ (a .pyx, its .pxd and its
    .pyi are one module)."""
    paths = [p for suffix in ("pyx", "pxd", "pyi", "py") for p in ENGINE.glob(f"*.{suffix}")]
    paths += list((ROOT / "fastad").rglob("*.py"))
    modules = {}
    for path in sorted(paths):
        modules.setdefault(module_name(path), []).append(path)
    return modules


def imported_names(text):
    """The dotted names a source imports (`from X import a` yields X.a: module_graph takes it
    for X when X.a is no module)."""
    for match in FROM_IMPORT.finditer(text):
        base = match.group(1)
        for item in re.sub(r"#[^\n]*", "", match.group(2)).strip("()").split(","):
            if item.split():
                yield f"{base}.{item.split()[0]}"
    for match in PLAIN_IMPORT.finditer(text):
        for item in match.group(1).split(","):
            yield item.split()[0] if item.split() else ""
    for match in IMPORT_MODULE.finditer(text):
        yield match.group(1)


def module_graph(modules):
    """{module: set of modules it imports}, both within fastad_cy/ and fastad/."""
    graph = {}
    for name, paths in modules.items():
        edges = set()
        for path in paths:
            for target in imported_names(DOCSTRING.sub("", path.read_text())):
                if target in modules:
                    edges.add(target)
                elif target.rpartition(".")[0] in modules:    # `from X import name`: X
                    edges.add(target.rpartition(".")[0])
                elif target.endswith("."):    # a prefix: every module under it
                    edges.update(m for m in modules if m.startswith(target))
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph):
    """One import circle as a list of modules (first == last), or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def test_no_module_circle_in_fastad_cy_or_fastad():
    graph = module_graph(module_sources())
    assert "fastad_cy.graph" in graph and "fastad.nn.layers" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_engine_module_depends_on_the_fastad_package():
    graph = module_graph(module_sources())
    offenders = sorted(f"{name} -> {target}" for name, targets in graph.items() if name.startswith("fastad_cy")
                       for target in targets if not target.startswith("fastad_cy"))
    assert offenders == []


def test_the_module_graph_reads_every_import_form():
    text = ("from fastad_cy.graph cimport (Variable,\n    finish)\nimport fastad as fa\n"
            "cimport numpy as cnp\nfrom fastad.cuda import ops as _ops, optim\n"
            "def f():\n    import fastad.nn.layers\n    importlib.import_module(\"fastad_cy.\" + name)\n"
            "    importlib.import_module('fastad.metrics')\n")
    names = set(imported_names(text))
    assert {"fastad_cy.graph.Variable", "fastad", "numpy", "fastad.cuda.ops", "fastad.cuda.optim",
            "fastad.nn.layers", "fastad_cy.", "fastad.metrics"} <= names
    assert module_graph({"m": [], "m.sub": [], "n": []}) == {"m": set(), "m.sub": set(), "n": set()}
    graph = module_graph({"a": [], "b": [], "c": []})
    graph.update(a={"b"}, b={"c"}, c={"a"})
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    graph["c"] = set()
    assert find_cycle(graph) is None
