"""Parameter initialisers (`fa.nn.init`), in place, with torch.nn.init's formulas.

Fan convention: fastad multiplies `x @ W`, so a 2-D weight has shape
(fan_in, fan_out); for more dimensions fan_in = shape[0] * r and
fan_out = shape[1] * r with r = prod(shape[2:]). (torch stores (out, in):
its fans are these with the first two axes swapped.)

Every function takes `generator=`, a numpy Generator, for reproducible draws
(a fresh unseeded one when None), writes into the Parameter's value in place
and returns the Parameter.

>>> w = fa.Parameter(np.empty((784, 128)))
>>> fa.nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=np.random.default_rng(0))
"""
import math

import numpy as np

from fastad_cy.graph import Parameter
from fastad import random as fastad_random

__all__ = ["calculate_gain", "xavier_normal_", "xavier_uniform_", "kaiming_normal_",
           "kaiming_uniform_", "uniform_", "normal_", "zeros_", "ones_"]


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for `nonlinearity` (torch.nn.init.calculate_gain):
    1 for "linear"/"sigmoid", 5/3 for "tanh", sqrt(2) for "relu",
    sqrt(2 / (1 + slope**2)) for "leaky_relu" (slope = param, default 0.01),
    3/4 for "selu".

    >>> fa.nn.init.calculate_gain("tanh")
    1.6666666666666667
    """
    if nonlinearity in ("linear", "identity", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: the negative slope must be a number, got {slope!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; expected one of "
                     f"linear, identity, sigmoid, tanh, relu, leaky_relu, selu")


def _target(who, param, generator):
    if not isinstance(param, Parameter):
        raise TypeError(f"{who}: expected a fastad Parameter, got {type(param).__name__}")
    generator = fastad_random.generator(who, generator)
    value = param.value if param.device == "cpu" else param.numpy()
    return value, generator


def _write(param, value, contents):
    """Write `contents` into `_target`'s array and make it count (that array is the
    value itself on the CPU, a host copy of a device Parameter's value otherwise);
    returns the Parameter."""
    value[...] = contents
    if param.device != "cpu":
        param.set_value(value)
    return param


def _fans(who, shape):
    if len(shape) < 2:
        raise ValueError(f"{who}: fan_in and fan_out need a Parameter with at least 2 dimensions, "
                         f"got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[0] * receptive, shape[1] * receptive


def uniform_(param, a=0.0, b=1.0, generator=None):
    """Fill with draws from U(a, b).

    >>> fa.nn.init.uniform_(w, -0.1, 0.1, generator=np.random.default_rng(0))
    """
    value, rng = _target("uniform_", param, generator)
    if not a <= b:
        raise ValueError(f"uniform_: need a <= b, got a={a!r}, b={b!r}")
    return _write(param, value, rng.uniform(a, b, size=value.shape))


def normal_(param, mean=0.0, std=1.0, generator=None):
    """Fill with draws from N(mean, std**2).

    >>> fa.nn.init.normal_(emb, std=0.01, generator=np.random.default_rng(0))
    """
    value, rng = _target("normal_", param, generator)
    if not std >= 0:
        raise ValueError(f"normal_: std must be >= 0, got {std!r}")
    return _write(param, value, rng.normal(mean, std, size=value.shape))


def zeros_(param):
    """Fill with 0.

    >>> fa.nn.init.zeros_(bias)
    """
    return _write(param, _target("zeros_", param, None)[0], 0)


def ones_(param):
    """Fill with 1.

    >>> fa.nn.init.ones_(scale)
    """
    return _write(param, _target("ones_", param, None)[0], 1)


def xavier_uniform_(param, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).

    >>> fa.nn.init.xavier_uniform_(w, gain=fa.nn.init.calculate_gain("tanh"))
    """
    value, rng = _target("xavier_uniform_", param, generator)
    if value.size:
        fan_in, fan_out = _fans("xavier_uniform_", value.shape)
        bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))
        _write(param, value, rng.uniform(-bound, bound, size=value.shape))
    return param


def xavier_normal_(param, gain=1.0, generator=None):
    """Glorot normal: N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out)).

    >>> fa.nn.init.xavier_normal_(w)
    """
    value, rng = _target("xavier_normal_", param, generator)
    if value.size:
        fan_in, fan_out = _fans("xavier_normal_", value.shape)
        std = gain * math.sqrt(2.0 / (fan_in + fan_out))
        _write(param, value, rng.normal(0.0, std, size=value.shape))
    return param


def _kaiming_std(who, shape, a, mode, nonlinearity):
    fan_in, fan_out = _fans(who, shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{who}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(param, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with b = sqrt(3) * gain / sqrt(fan), fan = fan_in or
    fan_out per `mode`, gain = calculate_gain(nonlinearity, a).

    >>> fa.nn.init.kaiming_uniform_(w, nonlinearity="relu")
    """
    value, rng = _target("kaiming_uniform_", param, generator)
    if value.size:
        bound = math.sqrt(3.0) * _kaiming_std("kaiming_uniform_", value.shape, a, mode, nonlinearity)
        _write(param, value, rng.uniform(-bound, bound, size=value.shape))
    return param


def kaiming_normal_(param, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std**2) with std = gain / sqrt(fan) (see kaiming_uniform_).

    >>> fa.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    """
    value, rng = _target("kaiming_normal_", param, generator)
    if value.size:
        std = _kaiming_std("kaiming_normal_", value.shape, a, mode, nonlinearity)
        _write(param, value, rng.normal(0.0, std, size=value.shape))
    return param
