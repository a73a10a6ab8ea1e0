"""fastad: reverse-mode, define-by-run automatic differentiation for small and sparse models.

>>> import numpy as np, fastad as fa
>>> w = fa.Parameter(np.random.randn(4, 3))
>>> x = fa.Input(np.zeros((1, 4)))
>>> loss = (fa.tanh(x @ w) ** 2).sum()
>>> loss.backward()                      # gradients add into w.grad
>>> x.set_value(np.ones((1, 4))); loss.forward(); loss.backward()   # replay, no Python per node
"""
import sys
from pkgutil import extend_path

# A process started in a source checkout (its folder first on sys.path, no compiled modules
# there) still finds the compiled modules of the built or installed copy: every folder of
# this package on sys.path serves it, and so do those of its subpackages that hold compiled
# modules (each extends its own path the same way).
__path__ = extend_path(__path__, __name__)

from fastad._engine.graph import (Variable, Parameter, Input, IndexInput, no_grad, enable_grad,
                                  detect_anomaly, is_grad_enabled, is_anomaly_enabled,
                                  set_default_dtype, get_default_dtype, float32, float64, graph_nbytes)
from fastad.ops import (elementwise as _elementwise, reduction as _reduction, shape as _shape,
                        linalg as _linalg, sparse as _sparse, ranking as _ranking,
                        gather_dot as _gather_dot, conv as _conv)
# each op family's __all__: its ops in the fa. namespace (elementwise's from the manifest)
from fastad.ops.elementwise import *  # noqa: F403
from fastad.ops.reduction import *  # noqa: F403
from fastad.ops.shape import *  # noqa: F403
from fastad.ops.linalg import *  # noqa: F403
from fastad.ops.sparse import *  # noqa: F403
from fastad.ops.ranking import *  # noqa: F403
from fastad.ops.gather_dot import *  # noqa: F403
from fastad.ops.conv import *  # noqa: F403
from fastad.training.loop import predict, train
from fastad.gradcheck import finite_difference, gradcheck
from fastad.io import save, load
from fastad.viz import to_dot, render
from fastad.random import manual_seed
from fastad.progress import progress_bar
from fastad import optim, nn, io, data, metrics, models, cuda, features
# fa.hogwild is the name DESIGN.md and the docs use for fastad.parallel (the same module
# object), fa.distributed its Ray module and fa.text fastad.models.text; their earlier
# import paths (`from fastad.hogwild import share`) name the same modules.
from fastad import parallel as hogwild
from fastad.parallel import distributed
from fastad.models import text
sys.modules.update({f"{__name__}.hogwild": hogwild, f"{__name__}.distributed": distributed,
                    f"{__name__}.text": text})
from fastad.nn.attention import scaled_dot_product_attention
from fastad.training.graph_cache import GraphCache
from fastad.training.autobatch import autobatch, batch

__version__ = "0.1.0"

__all__ = [
    "Variable", "Parameter", "Input", "IndexInput", "no_grad", "enable_grad", "detect_anomaly",
    "is_grad_enabled", "is_anomaly_enabled", "set_default_dtype", "get_default_dtype", "float32", "float64",
    *(name for family in (_elementwise, _reduction, _shape, _linalg, _sparse, _ranking, _gather_dot, _conv)
      for name in family.__all__),
    "train", "predict", "finite_difference", "gradcheck", "save", "load", "to_dot", "render", "manual_seed",
    "optim", "nn", "io", "data", "metrics", "models", "hogwild", "distributed", "text", "cuda", "features",
    "scaled_dot_product_attention", "progress_bar", "GraphCache", "graph_nbytes", "autobatch", "batch",
]
