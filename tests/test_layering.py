"""The house's layers: each package imports only from the layers below it (the engine,
fastad/_engine, imports nothing of fastad above it, nor do its stubs), no module imports in a
circle, and the packages that hold compiled modules still find them from a source checkout."""
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fastad"
ENGINE = PACKAGE / "_engine"
IMPORTS_FASTAD = re.compile(r"^\s*(from\s+fastad(\.\w+)*\s+c?import\b|c?import\s+fastad(\.\w+)*\b)",
                            re.M)

# The layers, lowest first: a module may import modules of its own layer and of the layers
# below, never above. The helpers beside them (argument checks, files, progress) import no layer.
LAYERS = [
    ("fastad._engine",),
    ("fastad.ops",),
    ("fastad.optim",),
    ("fastad.training", "fastad.random", "fastad.features"),
    ("fastad.nn", "fastad.cuda", "fastad.gradcheck", "fastad.viz"),
    ("fastad.parallel",),
    ("fastad.models",),
    ("fastad", "fastad.data", "fastad.metrics", "fastad.__main__"),      # the public faces
]
HELPERS = ("fastad.checks", "fastad.io", "fastad.safetensors_format", "fastad.progress")


def layer_of(module):
    """The index in LAYERS of the longest prefix naming `module` (None for a helper)."""
    if module in HELPERS:
        return None
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                    best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    assert best is not None, f"{module} is in no layer of tests/test_layering.py"
    return best[0]


def test_no_engine_module_imports_the_fastad_package_above_it():
    sources = [p for suffix in ("pyx", "pxd", "pyi", "py") for p in ENGINE.glob(f"*.{suffix}")]
    assert any(p.name == "graph.pyx" for p in sources)
    offenders = [f"{path.name}: {match.group(0).strip()}" for path in sources
                 for match in IMPORTS_FASTAD.finditer(path.read_text())
                 if not re.search(r"fastad\._engine\b", match.group(0))]
    assert offenders == []


def test_the_scan_catches_late_imports_too():
    text = "def f():\n    from fastad.cuda import ops\n    import fastad\nfrom fastad._engine.graph cimport X\n"
    assert [m.group(0).strip() for m in IMPORTS_FASTAD.finditer(text)] == \
        ["from fastad.cuda import", "import fastad", "from fastad._engine.graph cimport"]


def test_without_a_device_package_the_engine_asks_for_device_support():
    # The engine knows no device: with none registered, a device request says what is missing.
    code = ("import numpy as np, fastad._engine.graph as g\n"
            "g.register_backend(None)\n"
            "try:\n"
            "    g.Parameter(np.ones(2), device='cuda')\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "no device support is registered" in out.stdout


def test_variable_operators_come_from_the_op_families():
    # The op modules register Variable's operators with the engine when fastad.ops is imported.
    code = ("import numpy as np, fastad._engine.graph as g\n"
            "x = g.Input(np.array([1.0, 2.0]))\n"
            "print(float(((x + 1.0) * x - x / 2.0).sum().value), (x @ x).value, x[1].value)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["6.5", "5.0", "2.0"]


@pytest.mark.parametrize("name, module, member", [("hogwild", "fastad.parallel", "share"),
                                                  ("distributed", "fastad.parallel.distributed", "run"),
                                                  ("text", "fastad.models.text", "Dictionary")])
def test_the_public_modules_keep_their_import_paths(name, module, member):
    """fa.hogwild, fa.distributed and fa.text are modules of the packages below; their own
    import paths (`from fastad.hogwild import share`) still name them."""
    import importlib

    import fastad as fa
    assert importlib.import_module(f"fastad.{name}") is getattr(fa, name) is importlib.import_module(module)
    run = subprocess.run([sys.executable, "-c", f"from fastad.{name} import {member}; print({member}.__module__)"],
                         capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith(module), run.stderr


def test_a_source_checkout_first_on_the_path_still_finds_the_compiled_modules(tmp_path):
    # A process started in a source checkout has its fastad/ first on sys.path, without the
    # compiled modules: they come from the copy that was built or installed (here, this one).
    import fastad._engine.graph
    built = Path(fastad._engine.graph.__file__).resolve().parents[2]
    shutil.copytree(PACKAGE, tmp_path / "fastad",
                    ignore=lambda folder, names: [n for n in names if n.endswith((".so", ".pyd", ".c"))])
    code = ("import os, numpy as np, fastad, fastad._engine.graph as g\n"
            "print(os.path.abspath(fastad.__file__), float((g.Input(np.array([1.0, 2.0])) + 1.0).sum().value))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(built)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(tmp_path / "fastad" / "__init__.py"), "5.0"]   # the checkout's package


# ------------------------------------------------------------- the module graph
# Every import edge between fastad's modules, read from the sources (.pyx, .pxd, .pyi, .py):
# `cimport`, `import`, `from ... (c)import`, and importlib's `import_module("...")`, at any
# depth (a lazy import inside a function is an edge too). A string naming a package prefix
# ("fastad.ops." + name) is an edge to every module under it. Importing a module of another
# package first runs that package's __init__: an edge to it too.
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
    """{module name: [its source files]} for fastad/ (a .pyx, its .pxd and its .pyi are one
    module)."""
    paths = [p for suffix in ("pyx", "pxd", "pyi", "py") for p in PACKAGE.rglob(f"*.{suffix}")]
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


def packages_entered(importer, target, modules):
    """The packages whose __init__ importing `target` runs from `importer`: those above
    target that do not hold importer (the root package, the public face, excepted)."""
    parts = target.split(".")
    for n in range(2, len(parts)):
        package = ".".join(parts[:n])
        if package in modules and not (importer == package or importer.startswith(package + ".")):
            yield package


def module_graph(modules):
    """{module: set of modules it imports}, within fastad/."""
    graph = {}
    for name, paths in modules.items():
        targets = set()
        for path in paths:
            for target in imported_names(DOCSTRING.sub("", path.read_text())):
                if target in modules:
                    targets.add(target)
                elif target.rpartition(".")[0] in modules:    # `from X import name`: X
                    targets.add(target.rpartition(".")[0])
                elif target.endswith("."):    # a prefix: every module under it
                    targets.update(m for m in modules if m.startswith(target))
        edges = set(targets)
        for target in targets:
            edges.update(packages_entered(name, target, modules))
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


@pytest.fixture(scope="module")
def graph():
    return module_graph(module_sources())


def test_no_module_circle_in_fastad(graph):
    assert "fastad._engine.graph" in graph and "fastad.nn.layers" in graph
    graph = {name: targets - {"fastad"} for name, targets in graph.items()}   # the public face
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_every_module_imports_only_its_layer_and_those_below(graph):
    offenders = sorted(f"{name} -> {target}" for name, targets in graph.items()
                       for target in targets
                       if layer_of(name) is not None and layer_of(target) is not None
                       and layer_of(target) > layer_of(name))
    assert offenders == []


def test_the_helpers_import_no_layer(graph):
    offenders = sorted(f"{name} -> {target}" for name in HELPERS for target in graph.get(name, ())
                       if target not in HELPERS)
    assert offenders == []


PARALLEL = "fastad.parallel"


def private_reaches(path, siblings):
    """Where the module at `path` uses another module of fastad.parallel (`siblings`) other
    than through its public names: `sibling._name`, `from fastad.parallel.sibling import
    _name`, or an assignment to `sibling.name` (a monkeypatch)."""
    tree = ast.parse(path.read_text())
    aliases = {}                 # local name -> sibling module
    reaches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == PARALLEL:
            aliases.update((a.asname or a.name, a.name) for a in node.names if a.name in siblings)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PARALLEL + "."):
            reaches += [f"from {node.module} import {a.name}" for a in node.names
                        if a.name.startswith("_")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            if node.attr.startswith("_"):
                reaches.append(f"{node.value.id}.{node.attr}")
            elif isinstance(node.ctx, ast.Store):
                reaches.append(f"{node.value.id}.{node.attr} = ...")
    return reaches


def test_the_parallel_modules_use_one_another_only_through_public_names():
    folder = PACKAGE / "parallel"
    siblings = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert {"segments", "arrays", "workers", "lockstep", "distributed"} <= siblings
    offenders = {p.name: private_reaches(p, siblings) for p in folder.glob("*.py")}
    assert {name: reaches for name, reaches in offenders.items() if reaches} == {}


def test_the_public_names_check_finds_a_private_reach(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from fastad.parallel import segments, workers as w\n"
                      "from fastad.parallel.arrays import _handles, share\n"
                      "segments._path('x')\nw.report = print\nsegments.view(1, 2, 3)\n")
    assert sorted(private_reaches(module, {"segments", "workers", "arrays"})) == [
        "from fastad.parallel.arrays import _handles", "segments._path", "w.report = ..."]


def test_the_layer_check_fails_on_an_import_from_above():
    graph = {"fastad.ops.sparse": {"fastad.models.recsys.bpr"}, "fastad.models.recsys.bpr": set()}
    assert [(name, target) for name, targets in graph.items() for target in targets
            if layer_of(target) > layer_of(name)] == [("fastad.ops.sparse", "fastad.models.recsys.bpr")]


def test_the_module_graph_reads_every_import_form():
    text = ("from fastad._engine.graph cimport (Variable,\n    finish)\nimport fastad as fa\n"
            "cimport numpy as cnp\nfrom fastad.cuda import ops as _ops, optim\n"
            "def f():\n    import fastad.nn.layers\n    importlib.import_module(\"fastad.ops.\" + name)\n"
            "    importlib.import_module('fastad.metrics')\n")
    names = set(imported_names(text))
    assert {"fastad._engine.graph.Variable", "fastad", "numpy", "fastad.cuda.ops", "fastad.cuda.optim",
            "fastad.nn.layers", "fastad.ops.", "fastad.metrics"} <= names
    assert module_graph({"m": [], "m.sub": [], "n": []}) == {"m": set(), "m.sub": set(), "n": set()}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    graph["c"] = set()
    assert find_cycle(graph) is None
    modules = {"p": [], "p.q": [], "p.q.r": [], "p.s": []}
    assert set(packages_entered("p.s", "p.q.r", modules)) == {"p.q"}
    assert set(packages_entered("p.q.x", "p.q.r", modules)) == set()
