"""`fa.nn.functional`: the functional forms of the layers and losses, with
PyTorch's names (`import fastad.nn.functional as F`)."""

from fastad.ops.conv import (adaptive_avg_pool2d, avg_pool1d, avg_pool2d, batch_norm, conv1d,
                            conv2d, max_pool1d, max_pool2d)
from fastad.ops.elementwise import (elu, gelu, hardtanh, leaky_relu, logsigmoid, relu, sigmoid,
                                   silu, softplus, tanh)
from fastad._engine.graph import IndexInput, Variable
from fastad.ops.losses import (bce_with_logits, binary_cross_entropy, cosine_embedding, cross_entropy,
                              gaussian_nll, hinge, hinge_embedding, huber, kl_div, margin_ranking,
                              mse, multi_margin, nll_loss, poisson_nll, smooth_l1, soft_margin,
                              triplet_margin)
from fastad.ops.dropout import TrainingFlag, dropout as _dropout
from fastad.ops.linalg import linear
from fastad.ops.reduction import log_softmax, softmax
from fastad.ops.sparse import embedding, embedding_bag
from fastad import random as fastad_random
from fastad.checks import check_number

__all__ = ["relu", "leaky_relu", "gelu", "elu", "silu", "hardtanh", "tanh", "sigmoid", "softplus",
           "logsigmoid", "softmax", "log_softmax",
           "dropout", "cross_entropy", "nll_loss", "bce_with_logits", "mse", "huber", "kl_div",
           "smooth_l1", "binary_cross_entropy", "poisson_nll", "gaussian_nll", "margin_ranking",
           "hinge_embedding", "cosine_embedding", "triplet_margin", "multi_margin", "soft_margin", "hinge", "conv1d",
           "conv2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d",
           "batch_norm", "embedding", "embedding_bag", "linear"]


def check_dropout_rate(who, p):
    """`p` as a float in [0, 1), or TypeError/ValueError naming `who`."""
    return check_number(who, "p", p, at_least=0, below=1)


def check_float_variable(who, x, name=None, expected="a float fastad Variable"):
    """TypeError "`who`: expected `expected`, got <x's type>" ("`who`: `name` must be
    `expected`, ..." with a name) unless x is a float fastad Variable (the layers' and
    dropout's check of what they are called on; the message is made only on failure)."""
    if not isinstance(x, Variable) or isinstance(x, IndexInput):
        what = f"expected {expected}" if name is None else f"{name} must be {expected}"
        raise TypeError(f"{who}: {what}, got {type(x).__name__}")


def dropout(x, p=0.5, training=True, generator=None):
    """Inverted dropout of `x` (see `fa.nn.Dropout`); the input itself when not training or p = 0.

    Each forward of the graph (its build, `forward()`, every example of
    `fa.train`) draws a new mask, from a stream started from `generator` (a
    numpy Generator) or fastad's random source (`fa.manual_seed`). To switch a
    built graph between training and eval, use the `fa.nn.Dropout` module.
    """
    check_dropout_rate("dropout", p)
    check_float_variable("dropout", x, expected="a float Variable")
    if not training or p == 0:
        return x
    seed = fastad_random.generator("dropout", generator).bit_generator.random_raw(4)
    return _dropout(x, p, TrainingFlag(True), seed)
