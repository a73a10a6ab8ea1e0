"""fastad/ops/rules.h: the scalar rules the CPU loops and the CUDA kernels share, and the op
codes it takes from the op manifest (fastad/ops/manifest.py, through generate.py)."""
import os
import re

import pytest

from fastad.cuda import kernels
from fastad.ops import generate, manifest


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name):
    with open(os.path.join(ROOT, "fastad", "ops", name)) as f:
        return f.read()


def enum_names(name):
    body = re.search(r"enum %s \{(.*?)\};" % name, read("op_codes.h"), re.S)
    assert body is not None, f"op_codes.h has no enum {name}"
    return tuple(item.strip() for item in body.group(1).split(",") if item.strip())


def test_the_generated_files_are_those_of_the_manifest():
    # setup.py writes them before Cython runs; a stale one means a build without setup.py
    for name, text_of in generate.OUTPUTS.items():
        text = read(name)
        assert text.startswith(("/* " + generate.GENERATED_HEADER, "# " + generate.GENERATED_HEADER,
                                '"""' + generate.GENERATED_HEADER)), name
        assert text == text_of(), f"fastad/ops/{name} is stale: run python fastad/ops/generate.py"


def test_the_generated_files_are_not_tracked_sources():
    with open(os.path.join(ROOT, ".gitignore")) as f:
        ignored = set(f.read().split())
    assert {f"fastad/ops/{name}" for name in generate.OUTPUTS} <= ignored


@pytest.mark.parametrize("enum, family, table", [
    ("UnaryOp", "unary", kernels.UNARY_OPS),
    ("BinaryOp", "binary", kernels.BINARY_OPS),
    ("PointwiseLoss", "loss", kernels.POINTWISE_LOSSES),
])
def test_the_python_tables_follow_the_enums(enum, family, table):
    # The device ops pass an op's index in the table as the enum value.
    ops = manifest.TABLES[family]
    assert tuple(op["name"] for op in ops) == table
    assert tuple(generate.code(family, op) for op in ops) == enum_names(enum)


def test_rules_h_takes_its_op_codes_from_the_manifest():
    rules = read("rules.h")
    assert '#include "op_codes.h"' in rules
    assert not re.search(r"\benum\s+(UnaryOp|BinaryOp|PointwiseLoss)\b", rules)


def test_every_kernel_program_carries_the_rules_once():
    for family in kernels.FAMILIES:
        source = kernels.program_source(family)
        assert source.count("enum UnaryOp {") == 1, family


def test_no_cuda_source_restates_a_rule():
    rules = ("unary_value", "unary_slope", "binary_value", "loss_value", "sgd_element",
             "adam_element", "enum UnaryOp", "enum PointwiseLoss")
    for path in kernels.source_dir().glob("*.cu"):
        text = path.read_text()
        for rule in rules:
            assert not re.search(r"\b%s\b" % rule.replace(" ", r"\s+"), text), \
                f"{path.name} defines its own {rule}"


def test_every_unary_code_has_a_loop_of_its_own():
    # fastad/ops/elementwise_loops.h specialises the loops of codes 0..31 (the code a constant, so
    # the rule vectorises); a code past them would fall back to the slow generic loop.
    specialised = len(re.findall(r"M\(\d+, S\)", read("elementwise_loops.h")))
    assert len(kernels.UNARY_OPS) <= specialised, (
        f"{len(kernels.UNARY_OPS)} unary ops but loops for {specialised} codes: extend "
        f"FA_EACH_CODE in fastad/ops/elementwise_loops.h")


@pytest.mark.parametrize("macro, enum", [("FA_EACH_BINARY_CODE", "BinaryOp"),
                                         ("FA_EACH_LOSS_CODE", "PointwiseLoss")])
def test_every_binary_and_loss_code_has_a_loop_of_its_own(macro, enum):
    # The binary and loss loops of elementwise_loops.h switch on the code with no generic
    # fallback: a code missing from these lists would leave its output unwritten.
    listed = re.search(r"#define %s\(M, S\) (.*)" % macro, read("op_codes.h")).group(1)
    assert tuple(re.findall(r"M\((\w+), S\)", listed)) == enum_names(enum)
    assert f"#define {macro}" not in read("elementwise_loops.h")
    assert f"switch (op) {{ {macro}(" in read("elementwise_loops.h")
