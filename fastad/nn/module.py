"""Module, Sequential and Dropout: the containers every model is built from."""
from collections import namedtuple

import numpy as np

from fastad.ops.dropout import TrainingFlag, dropout as dropout_with_flag
from fastad._engine.graph import Input, Parameter
from fastad import random as fastad_random
from fastad.checks import check_seed
from fastad.nn.functional import check_dropout_rate, check_float_variable

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of models and layers.

    Subclasses call `super().__init__()` first, then assign Parameters and
    Modules as attributes; `forward(...)` computes the output and `module(...)`
    calls it. `training` is True until `eval()`.

    Example::

        class Classifier(fa.nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = fa.nn.Linear(784, 128)
                self.out = fa.nn.Linear(128, 10)
            def forward(self, x):                       # x: (batch, 784) -> (batch, 10)
                return self.out(fa.relu(self.hidden(x)))

        model = Classifier()
        fa.save(model.state_dict(), "model.npz")
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if params is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                     f"assigning the Parameter or Module {name!r}")
        else:
            params.pop(name, None)
            self._modules.pop(name, None)
            if name in self._buffers:
                if not isinstance(value, Input):
                    raise TypeError(f"{type(self).__name__}: {name!r} is a buffer; assign an "
                                    f"fa.Input (a buffer moved with .to()), got {type(value).__name__}")
                self._buffers[name] = value
            elif isinstance(value, Parameter):
                params[name] = value
            elif isinstance(value, Module):
                self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for registry in ("_parameters", "_modules", "_buffers"):
            self.__dict__.get(registry, {}).pop(name, None)
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def children(self):
        """The direct sub-Modules, in assignment order, each once (as torch's children()).

        >>> [type(m).__name__ for m in model.children()]
        """
        return list({id(m): m for m in self._modules.values()}.values())

    def modules(self):
        """This Module and every sub-Module below it (each once), depth first.

        >>> drops = [m for m in model.modules() if isinstance(m, fa.nn.Dropout)]
        """
        return [module for _, module in self.named_modules()]

    def named_modules(self):
        """[(dotted name, Module)] for this Module ("") and every one below it, each once,
        depth first (torch.nn.Module.named_modules).

        >>> [name for name, m in model.named_modules() if isinstance(m, fa.nn.Linear)]
        """
        return _first_names((prefix[:-1], module) for prefix, module in self._prefixed_modules())

    def apply(self, fn):
        """Call fn(module) on every sub-Module, then on this one, as torch's apply does (each
        child's subtree in assignment order, children before their parent; a Module that
        sits in two places is visited in each), for initialising weights; returns self.

        >>> model.apply(lambda m: fa.nn.init.zeros_(m.bias) if isinstance(m, fa.nn.Linear) else None)
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad=True):
        """Set `requires_grad` on every Parameter below (False freezes them: backward computes
        no gradient for them and optimizers leave them alone); returns self. As with
        `Parameter.requires_grad`, only before a graph is built on them: else RuntimeError,
        and no Parameter changes.

        >>> model.encoder.requires_grad_(False)       # then build the training graph
        """
        changed = []
        try:
            for p in self.parameters():
                if p.requires_grad != requires_grad:
                    p.requires_grad = requires_grad
                    changed.append(p)
        except (RuntimeError, TypeError):
            for p in changed:
                p.requires_grad = not p.requires_grad
            raise
        return self

    def named_parameters(self):
        """[(dotted name, Parameter)] for every Parameter below this Module, each
        once (a Parameter shared by two sub-Modules keeps its first name; a
        Module's own Parameters come before its sub-Modules').

        >>> [(name, p.shape) for name, p in model.named_parameters()]
        """
        return _first_names((prefix + name, p) for prefix, module in self._prefixed_modules()
                            for name, p in module._parameters.items())

    def _prefixed_modules(self):
        """(dotted prefix, Module) for this Module and every one below it, depth first, a
        Module's own entry before its sub-Modules' in assignment order."""
        stack = [("", self)]
        while stack:
            prefix, module = stack.pop()
            yield prefix, module
            stack.extend(reversed([(prefix + name + ".", child)
                                   for name, child in module._modules.items()]))

    def register_buffer(self, name, data, dtype=None):
        """Keep `data` as state that is not trained (BatchNorm's running averages):
        an `fa.Input` at attribute `name`, in `state_dict()` after the Parameters,
        filled by `load_state_dict()` and moved by `to()`.

        >>> self.register_buffer("running_mean", np.zeros(16))
        """
        if not isinstance(name, str) or not name.isidentifier() or name in self._parameters \
                or name in self._modules:
            raise ValueError(f"{type(self).__name__}.register_buffer: {name!r} must be a new "
                             f"attribute name")
        self._buffers[name] = None
        setattr(self, name, Input(data, dtype=dtype))

    def named_buffers(self):
        """[(dotted name, Input)] for every buffer below this Module, in
        named_parameters()'s order of Modules.

        >>> dict(model.named_buffers())["norm.running_var"].value
        """
        return [(prefix + name, b) for prefix, module in self._prefixed_modules()
                for name, b in module._buffers.items()]

    def parameters(self):
        """The Parameters below this Module, each once, in named_parameters() order.

        >>> opt = fa.optim.Adam(model.parameters(), lr=1e-3)
        """
        return [p for _, p in self.named_parameters()]

    def state_dict(self):
        """{dotted name: copy of the Parameter's value}, then the buffers' (see register_buffer).

        >>> fa.save({"model": model.state_dict()}, "model.npz")
        """
        return {name: p.numpy() for name, p in self.named_parameters() + self.named_buffers()}

    def load_state_dict(self, state_dict, strict=True):
        """Copy the arrays of `state_dict` into the Parameters (and buffers) of the same
        names, in place (graphs built on them see the new values after `forward()`).

        The values may be numpy arrays, CuPy arrays, or PyTorch tensors (read
        as `tensor.detach().cpu().numpy()`, found by those methods: fastad does
        not import torch), so `model.load_state_dict(torch_model.state_dict())`
        loads a PyTorch model with the same names; fastad's layers have
        PyTorch's names and layouts. With strict=True (default) the names must
        match exactly; with strict=False missing and unexpected names are
        skipped. Shapes must always match. Everything is checked before
        anything is copied. Returns IncompatibleKeys(missing_keys, unexpected_keys).

        >>> model.load_state_dict(fa.load("model.npz")["model"])
        >>> model.load_state_dict(torch_model.state_dict())
        """
        who = f"{type(self).__name__}.load_state_dict"
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"{who}: expected a dict of arrays, got {type(state_dict).__name__}")
        own = dict(self.named_parameters() + self.named_buffers())
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        if strict and (missing or unexpected):
            raise ValueError(f"{who}: the names do not match: missing {missing}, "
                             f"unexpected {unexpected} (strict=False skips them)")
        updates = []
        for name, p in own.items():
            if name not in state_dict:
                continue
            arr = _host_array(state_dict[name])
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{who}: {name!r} holds {arr.dtype} data, expected numbers")
            if arr.shape != p.shape:
                hint = (" (its transpose: a checkpoint saved before fastad kept weights as "
                        "PyTorch's (out, in)? load its transpose)"
                        if arr.ndim == 2 and arr.shape[::-1] == p.shape else "")
                raise ValueError(f"{who}: {name!r} has shape {arr.shape} in the state dict, "
                                 f"but the Parameter has shape {p.shape}{hint}")
            if not np.can_cast(arr.dtype, p.dtype, casting="same_kind"):
                raise TypeError(f"{who}: {name!r} holds {arr.dtype} data, which does not cast "
                                f"safely to the Parameter's {p.dtype}")
            updates.append((p, arr))
        for p, arr in updates:
            p.set_value(arr)
        return IncompatibleKeys(missing, unexpected)

    def zero_grad(self):
        """Clear the gradient of every Parameter below this Module.

        >>> model.zero_grad()
        """
        for p in self.parameters():
            p.zero_grad()

    def train(self, mode=True):
        """Set training mode (Dropout active) on this Module and all below; returns self.

        >>> model.train()
        """
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self):
        """Evaluation mode (Dropout is the identity): train(False); returns self.

        >>> model.eval()
        """
        return self.train(False)

    def to(self, device):
        """Move every Parameter and buffer below this Module to `device` ("cpu", "cuda",
        "cuda:N"), in place; returns self. Each Parameter attribute is replaced by
        its copy on the device (`p.to(device)`; one shared by several Modules stays
        shared). Make the optimizer after moving the model, as its Parameters change.

        >>> model = MyModel().to("cuda")
        >>> opt = fa.optim.Adam(model.parameters(), lr=1e-3)
        """
        moved = {}
        for module in self.modules():
            for name, p in list(module._parameters.items()):
                if id(p) not in moved:
                    moved[id(p)] = p.to(device)
                setattr(module, name, moved[id(p)])
            for name, b in list(module._buffers.items()):
                setattr(module, name, b.to(device))
        return self

    def extra_repr(self):
        """The text inside this Module's parentheses in repr()."""
        return ""

    def __repr__(self):
        lines = [f"  ({name}): " + repr(child).replace("\n", "\n  ")
                 for name, child in self._modules.items()]
        if not lines:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


def _first_names(named):
    """The (name, object) pairs of `named` in order, each object once, under its first name."""
    first = {}
    for name, obj in named:
        first.setdefault(id(obj), (name, obj))
    return list(first.values())


def _host_array(value):
    """A state dict's value as a numpy array: a PyTorch tensor through
    detach().cpu().numpy(), a CuPy array through get(), anything else np.asarray."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        return np.asarray(value.detach().cpu().numpy())
    if hasattr(value, "__cuda_array_interface__") and hasattr(value, "get"):
        return value.get()
    return np.asarray(value)


class _WithArguments(Module):
    """A function of x and further arguments as a Module: `arguments` names those,
    in the function's order. __init__ checks them now, not at the first call (by
    `check`: a call on a scalar input unless a subclass says otherwise) and keeps
    them as attributes; forward passes them on; the repr lists them."""

    function = None
    arguments = ()

    def __init__(self, *values):
        super().__init__()
        self.check(*values)
        for name, value in zip(self.arguments, values):
            setattr(self, name, value)

    def check(self, *values):
        type(self).function(Input(0.0), *values)

    def forward(self, x):
        return type(self).function(x, *(getattr(self, name) for name in self.arguments))

    def extra_repr(self):
        return ", ".join(f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"
                         for name, value in ((n, getattr(self, n)) for n in self.arguments))


class Sequential(Module):
    """Calls its layers in order: `Sequential(layer0, layer1, ...)(x)`.

    A layer is a Module (registered under its position, so its Parameters are
    named "0.weight", "2.bias", ...) or any callable taking and returning a
    Variable, such as `fa.tanh`.

    >>> model = fa.nn.Sequential(first, fa.tanh, fa.nn.Dropout(0.2), second)
    """

    def __init__(self, *layers):
        super().__init__()
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Sequential: layer {i} is a {type(layer).__name__}, "
                                f"expected a Module or a callable")
            if isinstance(layer, Module):
                setattr(self, str(i), layer)
        self._layers = list(layers)

    def forward(self, x):
        for layer in self._layers:
            x = layer(x)
        return x

    def __len__(self):
        return len(self._layers)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*self._layers[index])
        return self._layers[index]

    def __iter__(self):
        return iter(self._layers)

    def __repr__(self):
        lines = [f"  ({i}): " + (repr(layer) if isinstance(layer, Module)
                                 else getattr(layer, "__name__", repr(layer))).replace("\n", "\n  ")
                 for i, layer in enumerate(self._layers)]
        return "Sequential(\n" + "\n".join(lines) + "\n)" if lines else "Sequential()"


class Dropout(Module):
    """Inverted dropout: `Dropout(p=0.5, seed=None)`.

    Multiplies its input by a mask of Bernoulli(1 - p) draws divided by 1 - p,
    so the expected output is the input. The mask is a node of the graph that
    draws anew on every forward (the build, each `forward()` replay, each
    example of `fa.train`), from a stream started from `seed` (or fastad's
    random source, `fa.manual_seed`). The mode is read on every forward too:
    after `eval()` a graph built in training mode passes its input through
    unchanged, and after `train()` it drops again. For p = 0 it returns the
    input itself.

    >>> drop = fa.nn.Dropout(0.25, seed=0)
    >>> y = drop(h)                 # training: about a quarter of h zeroed, the rest * 4/3
    >>> drop.eval(); y.forward()    # the same graph, now the identity
    """

    def __init__(self, p=0.5, seed=None):
        super().__init__()
        self.p = check_dropout_rate("Dropout", p)
        seed = check_seed("Dropout", seed)
        self._rng = np.random.default_rng(seed) if seed is not None else fastad_random.generator("Dropout")

    @property
    def training(self):
        return self._flag.training

    @training.setter
    def training(self, mode):
        # Module.__init__ sets the mode before this class's __init__ runs: the flag comes first.
        if "_flag" not in self.__dict__:
            object.__setattr__(self, "_flag", TrainingFlag())
        self._flag.training = bool(mode)

    def forward(self, x):
        check_float_variable("Dropout", x, expected="a float Variable")
        if self.p == 0:
            return x
        return dropout_with_flag(x, self.p, self._flag, self._rng.bit_generator.random_raw(4))

    def extra_repr(self):
        return f"p={self.p}"


class ModuleList(Module):
    """A list of Modules, registered under their positions ("0.weight", "1.bias", ...).

    >>> layers = fa.nn.ModuleList([fa.nn.Linear(4, 4) for _ in range(3)])
    >>> for layer in layers: h = fa.tanh(layer(h))
    """

    def __init__(self, modules=()):
        super().__init__()
        self._items = []
        self.extend(modules)

    def append(self, module):
        """Add `module` at the end; returns self."""
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList: expected a Module, got {type(module).__name__}")
        setattr(self, str(len(self._items)), module)
        self._items.append(module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(self._items[index])
        return self._items[index]

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleList is not callable: iterate over it and call its modules")


class ModuleDict(Module):
    """A dict of Modules, registered under their keys ("encoder.weight", ...).

    >>> heads = fa.nn.ModuleDict({"age": fa.nn.Linear(8, 1), "genre": fa.nn.Linear(8, 20)})
    >>> outputs = {name: head(h) for name, head in heads.items()}
    """

    def __init__(self, modules=None):
        super().__init__()
        for name, module in (modules or {}).items():
            self[name] = module

    def __setitem__(self, name, module):
        if not isinstance(name, str) or not name or "." in name or name.startswith("_"):
            raise KeyError(f"ModuleDict: keys must be non-empty strings without '.' that do not "
                           f"start with '_', got {name!r}")
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict: {name!r} must be a Module, got {type(module).__name__}")
        setattr(self, name, module)

    def __getitem__(self, name):
        return self._modules[name]

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleDict is not callable: call its modules by key")
