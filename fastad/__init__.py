"""fastad: reverse-mode, define-by-run automatic differentiation for small and sparse models.

>>> import numpy as np, fastad as fa
>>> w = fa.Parameter(np.random.randn(4, 3))
>>> x = fa.Input(np.zeros((1, 4)))
>>> loss = (fa.tanh(x @ w) ** 2).sum()
>>> loss.backward()                      # gradients add into w.grad
>>> x.set_value(np.ones((1, 4))); loss.forward(); loss.backward()   # replay, no Python per node
"""
from fastad_cy.graph import (Variable, Parameter, Input, IndexInput, no_grad, enable_grad,
                             detect_anomaly, is_grad_enabled, is_anomaly_enabled,
                             set_default_dtype, get_default_dtype, float32, float64)
from fastad_cy import elementwise as _elementwise
from fastad_cy.elementwise import *  # noqa: F403 -- its __all__: the op manifest's ops, and where
from fastad_cy.reduction import sum, mean, max, logsumexp, softmax, log_softmax
from fastad_cy.reduction import min, norm, var, std, argmax, argmin, cumsum
from fastad_cy.shape import reshape, transpose, getitem, concat, stack
from fastad_cy.shape import expand_dims, squeeze, split, flip, tile
from fastad_cy.linalg import matmul, linear, vector_dot
from fastad_cy.linalg import einsum
from fastad_cy.sparse import take, take_along_axis, embedding, embedding_bag
from fastad_cy.model_losses import ranking_margin, ranking_loss, gather_dot, bag_dot
from fastad_cy.conv import (conv1d, conv2d, max_pool1d, max_pool2d, avg_pool1d, avg_pool2d,
                            adaptive_avg_pool2d)
from fastad_cy.train import train
from fastad.gradcheck import finite_difference, gradcheck
from fastad.io import save, load
from fastad.viz import to_dot, render
from fastad.random import manual_seed
from fastad.progress import progress_bar
from fastad import optim, nn, io, data, metrics, models, hogwild, distributed, cuda, text
from fastad.nn.attention import scaled_dot_product_attention
from fastad_cy.graph import graph_nbytes
from fastad.graph_cache import GraphCache
from fastad_cy.autobatch import autobatch, batch

__version__ = "0.1.0"

__all__ = [
    "Variable", "Parameter", "Input", "IndexInput", "no_grad", "enable_grad", "detect_anomaly",
    "is_grad_enabled", "is_anomaly_enabled", "set_default_dtype", "get_default_dtype", "float32", "float64",
    *_elementwise.__all__, "sum", "mean", "max", "logsumexp",
    "softmax", "log_softmax", "reshape", "transpose", "getitem", "concat", "stack", "matmul",
    "linear", "vector_dot", "take", "ranking_margin", "ranking_loss", "gather_dot", "bag_dot", "embedding", "embedding_bag", "conv1d", "conv2d", "max_pool1d",
    "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d", "train", "finite_difference",
    "gradcheck", "save", "load", "to_dot",
    "render", "manual_seed", "optim", "nn", "io", "data", "metrics", "models", "hogwild", "distributed", "text",
    "cuda", "scaled_dot_product_attention",
    "min", "norm", "var", "std", "argmax", "argmin", "cumsum", "expand_dims", "squeeze", "split",
    "flip", "tile", "einsum", "take_along_axis", "progress_bar", "GraphCache", "graph_nbytes",
    "autobatch", "batch",
]
