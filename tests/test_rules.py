"""fastad_cy/rules.h: the scalar rules the CPU loops and the CUDA kernels share."""
import os
import re

import pytest

from fastad.cuda import kernels


def enum_names(name):
    text = kernels.rules_header().read_text()
    body = re.search(r"enum %s \{(.*?)\};" % name, text, re.S)
    assert body is not None, f"rules.h has no enum {name}"
    without_comments = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    return tuple(item.strip() for item in without_comments.split(",") if item.strip())


@pytest.mark.parametrize("enum, prefix, table", [
    ("UnaryOp", "U_", kernels.UNARY_OPS),
    ("BinaryOp", "B_", kernels.BINARY_OPS),
])
def test_the_python_tables_follow_the_enums_of_rules_h(enum, prefix, table):
    # The device ops pass an op's index in the table as the enum value.
    assert tuple(prefix + op.upper() for op in table) == enum_names(enum)


def test_the_pointwise_losses_follow_their_enum():
    short = {"bce_with_logits": "BCE", "mse": "MSE", "huber": "HUBER"}
    assert tuple("P_" + short.get(loss, loss.upper()) for loss in kernels.POINTWISE_LOSSES) == \
        enum_names("PointwiseLoss")


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
    # fastad_cy/elementwise_loops.h specialises the loops of codes 0..31 (the code a constant, so
    # the rule vectorises); a code past them would fall back to the slow generic loop.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "fastad_cy", "elementwise_loops.h")) as f:
        text = f.read()
    specialised = len(re.findall(r"M\(\d+, S\)", text))
    assert len(kernels.UNARY_OPS) <= specialised, (
        f"{len(kernels.UNARY_OPS)} unary ops but loops for {specialised} codes: extend "
        f"FA_EACH_CODE in fastad_cy/elementwise_loops.h")


def test_every_binary_code_has_a_loop_of_its_own():
    # The binary loops of fastad_cy/elementwise_loops.h switch on the code with no generic
    # fallback: a code missing from FA_EACH_BINARY_CODE would leave its output unwritten.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "fastad_cy", "elementwise_loops.h")) as f:
        text = f.read()
    listed = re.findall(r"M\(B_(\w+), S\)", text)
    assert [name.lower() for name in listed] == list(kernels.BINARY_OPS)


def test_every_pointwise_loss_code_has_a_loop_of_its_own():
    # Like the binary loops, the loss loops of elementwise_loops.h have no generic fallback.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "fastad_cy", "elementwise_loops.h")) as f:
        text = f.read()
    listed = [name.lower() for name in re.findall(r"M\(P_(\w+), S\)", text)]
    assert listed == [name.replace("bce_with_logits", "bce") for name in kernels.POINTWISE_LOSSES]
