"""The type stubs (the .pyi beside each compiled module) describe what the compiled modules really define.

For every compiled module: the stub's public names are the module's public names;
each public function and method takes the parameters (names, kinds, defaults) that
Cython's embedded signature gives; each class has the stub's bases and public members.
With mypy installed, tests/typing_sample.py type-checks against the stubs.
"""
import ast
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every compiled module, by dotted name (fastad/ops/linalg.pyx: fastad.ops.linalg)
MODULES = sorted(os.path.relpath(os.path.join(folder, f[:-4]), ROOT).replace(os.sep, ".")
                 for folder, _, files in os.walk(os.path.join(ROOT, "fastad")) for f in files
                 if f.endswith(".pyx"))


def source(name, suffix):
    """The path of module `name`'s file with `suffix` (".pyi", ".pyx")."""
    return os.path.join(ROOT, *name.split(".")) + suffix


class Marker:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


NO_DEFAULT = Marker("<required>")       # a parameter without a default
ANY_DEFAULT = Marker("...")             # a stub default written as `...`


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def stub_tree(name):
    """The stub's module, with the bodies of the fastad stubs it star-imports (the generated
    stubs of the op manifest's ops, fastad/ops/generate.py) in place of those imports."""
    tree = ast.parse(read(source(name, ".pyi")))
    body = []
    for node in tree.body:
        if (isinstance(node, ast.ImportFrom) and node.names[0].name == "*"
                and node.module.startswith("fastad.")):
            body += stub_tree(node.module).body
        else:
            body.append(node)
    tree.body = body
    return tree


def public(name):
    return not name.startswith("_")


def stub_names(tree):
    """Names a stub defines or explicitly re-exports (`from m import x as x`)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.asname == a.name)
    return {n for n in names if public(n)}


def python_imports(pyx_source):
    """Names bound by the .pyx's Python-level imports (`cimport` binds no Python name)."""
    names = set()
    for module, alias in re.findall(r"^import\s+([\w.]+)(?:\s+as\s+(\w+))?", pyx_source, re.M):
        names.add(alias or module.split(".")[0])
    for group in re.findall(r"^from\s+[\w.]+\s+import\s+(\([^)]*\)|[^\n]*)", pyx_source, re.M):
        for item in group.strip("()").split(","):
            if item.strip():
                names.add(item.split(" as ")[-1].strip())
    return names


def runtime_names(name):
    module = importlib.import_module(name)
    imported = python_imports(read(source(name, ".pyx")))
    return {n for n in dir(module) if public(n) and n not in imported}


def stub_params(func):
    """[(name, default)] of a stub def, without self; `*args`/`**kw` keep their stars."""
    a = func.args
    positional = a.posonlyargs + a.args
    defaults = [NO_DEFAULT] * (len(positional) - len(a.defaults)) + list(a.defaults)
    defaults += a.kw_defaults
    params = []
    for arg, default in zip(positional + a.kwonlyargs, defaults):
        if default is None or default is NO_DEFAULT:     # ast gives None for a bare keyword-only
            value = NO_DEFAULT
        elif isinstance(default, ast.Constant) and default.value is Ellipsis:
            value = ANY_DEFAULT
        else:
            value = ast.literal_eval(default)
        params.append((arg.arg, value))
    if a.vararg:
        params.insert(len(positional), ("*" + a.vararg.arg, NO_DEFAULT))
    if a.kwarg:
        params.append(("**" + a.kwarg.arg, NO_DEFAULT))
    return [p for p in params if p[0] != "self"]


def signature_params(sig):
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [(stars.get(p.kind, "") + p.name,
             NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)
            for p in sig.parameters.values() if p.name != "self"]


def text_signature_params(text):
    """Parameters of an embedded signature such as `SGD(params, lr, momentum=0.0)`."""
    func = ast.parse(f"def f{text[text.index('('):]}: pass").body[0]
    return stub_params(func)


def runtime_params(obj):
    try:
        return signature_params(inspect.signature(obj))
    except (ValueError, TypeError):      # Cython exposes no signature object: read the embedded one
        text = obj.__text_signature__ or obj.__doc__.splitlines()[0]
        return text_signature_params(text)


def same_params(stub, runtime):
    """Equal names and kinds; equal defaults, except that a stub's `...` matches any default."""
    if [n for n, _ in stub] != [n for n, _ in runtime]:
        return False
    for (_, s), (_, r) in zip(stub, runtime):
        if s is ANY_DEFAULT:
            if r is NO_DEFAULT:
                return False
        elif s is NO_DEFAULT or r is NO_DEFAULT:
            if s is not r:
                return False
        elif s != r:
            return False
    return True


def is_property(func):
    return any((isinstance(d, ast.Name) and d.id == "property")
               or (isinstance(d, ast.Attribute) and d.attr == "setter") for d in func.decorator_list)


def class_stubs():
    """{(module, class name): ClassDef} for every class in every stub."""
    return {(name, node.name): node for name in MODULES for node in stub_tree(name).body
            if isinstance(node, ast.ClassDef)}


CLASS_STUBS = class_stubs()


def stub_mro(cls):
    """The stub ClassDefs of cls and of its compiled bases, in the runtime MRO's order."""
    return [CLASS_STUBS[(k.__module__, k.__name__)] for k in cls.__mro__ if k.__module__ in MODULES]


def public_classes(name):
    """(stub ClassDef, the compiled class) for each public class of module `name`'s stub."""
    module = importlib.import_module(name)
    return [(node, getattr(module, node.name)) for node in stub_tree(name).body
            if isinstance(node, ast.ClassDef) and public(node.name)]


def stub_members(node):
    names = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign):
            names.add(item.target.id)
    return names


# ------------------------------------------------------------------ tests

def test_every_compiled_module_has_a_stub_and_the_packages_are_marked_typed():
    assert "fastad._engine.graph" in MODULES and "fastad.optim.optimizers" in MODULES
    for name in MODULES:
        assert os.path.isfile(source(name, ".pyi")), f"{source(name, '.pyi')} is missing"
    assert os.path.isfile(os.path.join(ROOT, "fastad", "py.typed"))   # marks its subpackages too


def test_the_stubs_and_markers_are_package_data():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    for package in {name.rpartition(".")[0] for name in MODULES}:
        assert "*.pyi" in package_data[package], package
    assert "py.typed" in package_data["fastad"]


def test_python_imports_reads_import_statements_only():
    source = ("import numpy as np\nimport contextlib\nfrom math import prod\n"
              "from a.b import (x,\n    y as z)\ncimport numpy as cnp\n"
              "from fastad._engine.graph cimport Variable\nAxisError = np.exceptions.AxisError\n")
    assert python_imports(source) == {"np", "contextlib", "prod", "x", "z"}


@pytest.mark.parametrize("name", MODULES)
def test_stub_defines_exactly_the_public_names_of_the_module(name):
    in_stub, at_runtime = stub_names(stub_tree(name)), runtime_names(name)
    assert in_stub == at_runtime, (f"{name}'s stub: missing {sorted(at_runtime - in_stub)}, "
                                   f"not in the module {sorted(in_stub - at_runtime)}")


@pytest.mark.parametrize("name", MODULES)
def test_stub_functions_take_the_compiled_parameters(name):
    module = importlib.import_module(name)
    functions = [n for n in stub_tree(name).body if isinstance(n, ast.FunctionDef) and public(n.name)]
    for func in functions:
        stub, runtime = stub_params(func), runtime_params(getattr(module, func.name))
        assert same_params(stub, runtime), f"{name}.{func.name}: stub {stub}, compiled {runtime}"


@pytest.mark.parametrize("name", MODULES)
def test_stub_classes_have_the_compiled_bases_members_and_methods(name):
    for node, cls in public_classes(name):
        where = f"{name}.{node.name}"
        bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases]
        assert bases == [b.__name__ for b in cls.__bases__ if b is not object], where
        declared = set().union(*(stub_members(k) for k in stub_mro(cls)))
        in_stub, at_runtime = {m for m in declared if public(m)}, {m for m in dir(cls) if public(m)}
        assert in_stub == at_runtime, (f"{where}: missing {sorted(at_runtime - in_stub)}, "
                                       f"not in the class {sorted(in_stub - at_runtime)}")
        for item in node.body:
            if not isinstance(item, ast.FunctionDef) or not public(item.name):
                continue
            attr = inspect.getattr_static(cls, item.name)
            if is_property(item):
                assert inspect.isdatadescriptor(attr), f"{where}.{item.name} is not a property"
            else:
                stub, runtime = stub_params(item), runtime_params(getattr(cls, item.name))
                if any(isinstance(d, ast.Name) and d.id == "classmethod" for d in item.decorator_list):
                    assert inspect.ismethod(getattr(cls, item.name)), f"{where}.{item.name} is not a classmethod"
                    stub = stub[1:]         # cls: bound at runtime
                assert same_params(stub, runtime), f"{where}.{item.name}: stub {stub}, compiled {runtime}"
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and public(item.target.id):
                assert inspect.isdatadescriptor(inspect.getattr_static(cls, item.target.id)), where


def constructor_signature(cls):
    """The embedded `Name(...)` signature of the nearest class in cls's MRO that has one."""
    for k in cls.__mro__:
        first = (k.__doc__ or "").splitlines()[0] if k.__doc__ else ""
        if first.startswith(k.__name__ + "("):
            return k, first
    return None, None


@pytest.mark.parametrize("name", MODULES)
def test_stub_constructors_take_the_compiled_parameters(name):
    for node, cls in public_classes(name):
        owner, text = constructor_signature(cls)
        stub_inits = [(k.name, item) for k in stub_mro(cls) for item in k.body
                      if isinstance(item, ast.FunctionDef) and item.name == "__init__"]
        if owner is None:
            assert not stub_inits, f"{name}.{node.name}: the stub declares an __init__ the class lacks"
            continue
        assert stub_inits and stub_inits[0][0] == owner.__name__, (
            f"{name}.{node.name}: its constructor is {owner.__name__}'s; the stub's is "
            f"{stub_inits[0][0] if stub_inits else 'missing'}")
        stub, runtime = stub_params(stub_inits[0][1]), text_signature_params(text)
        assert same_params(stub, runtime), f"{name}.{node.name}(): stub {stub}, compiled {runtime}"


def test_same_params_compares_names_kinds_and_defaults():
    stub = text_signature_params("f(a, b=1, *rest, c=..., **kw)")
    assert same_params(stub, text_signature_params("f(a, b=1, *rest, c=None, **kw)"))
    assert not same_params(stub, text_signature_params("f(a, b=2, *rest, c=None, **kw)"))
    assert not same_params(stub, text_signature_params("f(a, b=1, *rest, c, **kw)"))
    assert not same_params(stub, text_signature_params("f(a, b=1, *, rest, c=None, **kw)"))
    assert not same_params(stub, text_signature_params("f(x, b=1, *rest, c=None, **kw)"))


def test_typing_sample_type_checks_against_the_stubs(tmp_path):
    pytest.importorskip("mypy")
    cache = tmp_path / "mypy"       # a fresh cache: the run must not depend on pytest's cache plugin
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(cache),
         os.path.join("tests", "typing_sample.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
