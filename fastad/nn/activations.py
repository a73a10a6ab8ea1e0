"""Activation functions as Modules (`fa.nn.ReLU()`, ...), for `Sequential` and for
models that keep their layers as attributes, with PyTorch's names; plus
`Identity` and `Flatten`. Each calls the function of the same name in `fa`."""
from fastad.ops.elementwise import (elu, gelu, hardtanh, leaky_relu, logsigmoid, relu, sigmoid, silu,
                                   softplus, tanh)
from fastad.ops.reduction import log_softmax, softmax
from fastad.ops.shape import reshape
from fastad.checks import check_int
from fastad.nn.module import Module, _WithArguments

__all__ = ["ReLU", "LeakyReLU", "GELU", "ELU", "SiLU", "Hardtanh", "Tanh", "Sigmoid", "Softplus", "LogSigmoid", "Softmax", "LogSoftmax",
           "Identity", "Flatten"]


class _Pointwise(Module):
    function = None

    def forward(self, x):
        return type(self).function(x)


class ReLU(_Pointwise):
    """max(x, 0): `fa.relu` as a Module."""
    function = relu


class Tanh(_Pointwise):
    """`fa.tanh` as a Module."""
    function = tanh


class Sigmoid(_Pointwise):
    """`fa.sigmoid` as a Module."""
    function = sigmoid


class Softplus(_Pointwise):
    """log(1 + exp(x)): `fa.softplus` as a Module."""
    function = softplus


class LogSigmoid(_Pointwise):
    """`fa.logsigmoid` as a Module."""
    function = logsigmoid


class LeakyReLU(_WithArguments):
    """x for x > 0, else negative_slope * x: `fa.leaky_relu` as a Module."""
    function, arguments = leaky_relu, ("negative_slope",)

    def __init__(self, negative_slope=0.01):
        super().__init__(negative_slope)


class GELU(_WithArguments):
    """x * Phi(x): `fa.gelu` as a Module (`approximate="tanh"` for PyTorch's tanh form)."""
    function, arguments = gelu, ("approximate",)

    def __init__(self, approximate="none"):
        super().__init__(approximate)


class ELU(_WithArguments):
    """x for x > 0, else alpha * (exp(x) - 1): `fa.elu` as a Module."""
    function, arguments = elu, ("alpha",)

    def __init__(self, alpha=1.0):
        super().__init__(alpha)


class SiLU(_Pointwise):
    """x * sigmoid(x): `fa.silu` as a Module."""
    function = silu


class Hardtanh(_WithArguments):
    """x clamped into [min_val, max_val]: `fa.hardtanh` as a Module."""
    function, arguments = hardtanh, ("min_val", "max_val")

    def __init__(self, min_val=-1.0, max_val=1.0):
        super().__init__(min_val, max_val)


class Softmax(Module):
    """`fa.softmax(x, axis)` as a Module (`dim` is accepted as PyTorch's name for axis)."""

    function = softmax

    def __init__(self, axis=-1, dim=None):
        super().__init__()
        self.axis = check_int(type(self).__name__, "axis" if dim is None else "dim",
                              axis if dim is None else dim, minimum=None)

    def forward(self, x):
        return type(self).function(x, axis=self.axis)

    def extra_repr(self):
        return f"axis={self.axis}"


class LogSoftmax(Softmax):
    """`fa.log_softmax(x, axis)` as a Module."""

    function = log_softmax


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    def forward(self, x):
        return x


class Flatten(Module):
    """Keeps the first axis (the batch) and flattens the rest: (n, a, b) -> (n, a * b)."""

    def forward(self, x):
        if len(x.shape) < 1:
            raise ValueError(f"Flatten: expected an input with a batch axis, got shape {x.shape}")
        return reshape(x, (x.shape[0], -1))
