"""fastad's op manifest: every elementwise op and pointwise loss, declared once.

Plain data, without imports: setup.py reads it (through fastad/ops/generate.py)
before numpy or any compiled code exists. From it the build writes
- fastad/ops/op_codes.h and op_codes.pxd: the enums UnaryOp, BinaryOp and PointwiseLoss
  (an op's code is its index in its table) and the lists of codes the CPU loops unroll;
- fastad/ops/elementwise_ops.pxi/.pyi and losses_ops.pxi/.pyi: the functions (and their
  stubs) of the ops whose `builder` is "generated", the code -> name tables, `__all__`.
At run time fastad/cuda/kernels.py takes its op tables from here, and fastad/__init__.py
its elementwise names (through `__all__`). Each op's rule, its value and slope, is
written once in fastad/ops/rules.h, which the CPU loops and the CUDA kernels share.
docs/contributing.md says how to add an op.

Each family names its enum, the prefix of its codes, its CPU node, its device
implementation and the kernels an op of it launches. Each op is a dict:
  name     the op's name: its code is the family's prefix + NAME (unless `code` says),
           and the device path passes it (fastad/cuda/kernels.py)
  public   the public function it serves (fa.<public>; fa.nn.<public> for a loss), or
           absent for a code that only serves another op's function
  builder  "generated": the build writes the function from `doc` and `example`;
           "hand": written in the family's module (it checks arguments of its own)
  doc      the generated docstring's first line
  example  (argument, value) of the generated docstring's example
  symbol   a binary op's operator, in its generated docstring
  args     a loss's two operand names, in its generated signature
  kernels  the kernels its function launches, where not its family's
"""

FAMILIES = {
    "unary": {
        "enum": "UnaryOp", "prefix": "U_", "cpu_node": "fastad.ops.elementwise.Unary",
        "device": "fastad.cuda.ops.elementwise.unary", "kernels": ("unary_forward", "unary_backward"),
    },
    "binary": {
        "enum": "BinaryOp", "prefix": "B_", "cpu_node": "fastad.ops.elementwise.Binary",
        "device": "fastad.cuda.ops.elementwise.binary",
        "kernels": ("binary_forward", "binary_backward", "reduce_sum", "fill"),
    },
    "loss": {
        "enum": "PointwiseLoss", "prefix": "P_", "cpu_node": "fastad.ops.losses.PairLoss",
        "device": "fastad.cuda.ops.losses.pair_loss",
        "kernels": ("fill", "pointwise_loss_forward", "loss_finish", "pointwise_loss_backward"),
    },
}

# A comparison is a binary op with a 0/1 value and no gradient: only a forward kernel.
_COMPARISON = ("binary_forward",)

UNARY_OPS = (
    {"name": "neg", "public": "neg", "builder": "generated", "doc": "-x, elementwise.",
     "example": ("[1.0, -2.0]", "[-1., 2.]")},
    {"name": "exp", "public": "exp", "builder": "generated", "doc": "e**x, elementwise.",
     "example": ("[0.0, 1.0]", "[1.    , 2.7183]")},
    {"name": "log", "public": "log", "builder": "generated",
     "doc": "Natural logarithm, elementwise (NaN/-inf outside x > 0, as numpy).",
     "example": ("[1.0, 2.0]", "[0.    , 0.6931]")},
    {"name": "tanh", "public": "tanh", "builder": "generated", "doc": "Hyperbolic tangent, elementwise.",
     "example": ("[0.0, 1.0]", "[0.    , 0.7616]")},
    {"name": "sigmoid", "public": "sigmoid", "builder": "generated",
     "doc": "1 / (1 + e**-x), elementwise, stable for large |x|.",
     "example": ("[0.0, 1.0]", "[0.5   , 0.7311]")},
    {"name": "relu", "public": "relu", "builder": "generated",
     "doc": "max(x, 0), elementwise; its gradient at 0 is 0.", "example": ("[-1.0, 2.0]", "[0., 2.]")},
    {"name": "softplus", "public": "softplus", "builder": "generated",
     "doc": "log(1 + e**x), elementwise, without overflow.",
     "example": ("[0.0, 1.0]", "[0.6931, 1.3133]")},
    {"name": "logsigmoid", "public": "logsigmoid", "builder": "generated",
     "doc": "log(sigmoid(x)), elementwise, without overflow.",
     "example": ("[0.0, 1.0]", "[-0.6931, -0.3133]")},
    {"name": "sqrt", "public": "sqrt", "builder": "generated", "doc": "Square root, elementwise.",
     "example": ("[4.0, 9.0]", "[2., 3.]")},
    {"name": "square", "public": "square", "builder": "generated", "doc": "x * x, elementwise.",
     "example": ("[-1.0, 2.0]", "[1., 4.]")},
    {"name": "abs", "public": "abs", "builder": "generated", "doc": "|x|, elementwise; its gradient at 0 is 0.",
     "example": ("[-1.0, 2.0]", "[1., 2.]")},
    # a number exponent; a Variable one is the binary pow
    {"name": "pow", "public": "pow", "builder": "hand",
     "kernels": ("unary_forward", "unary_backward", "binary_forward", "binary_backward", "reduce_sum",
                 "fill")},
    {"name": "leaky_relu", "public": "leaky_relu", "builder": "hand"},
    {"name": "gelu", "public": "gelu", "builder": "hand"},
    {"name": "gelu_tanh"},                        # gelu(x, approximate="tanh")
    {"name": "elu", "public": "elu", "builder": "hand"},
    {"name": "silu", "public": "silu", "builder": "generated",
     "doc": "x * sigmoid(x) (also called swish), elementwise.",
     "example": ("[-1.0, 1.0]", "[-0.2689,  0.7311]")},
    # hardtanh's two sides, p the bound: clip's values, a gradient only strictly inside
    {"name": "hardtanh_min", "public": "hardtanh", "builder": "hand"},
    {"name": "hardtanh_max"},
    # a Variable and a Python number p (x + 2, 2 - x, ...): no constant node needed
    {"name": "add_scalar"},
    {"name": "rsub_scalar"},
    {"name": "mul_scalar"},
    {"name": "div_scalar"},
    {"name": "rdiv_scalar"},
    # clip's two sides, p the bound; NaN stays NaN
    {"name": "clamp_min", "public": "clip", "builder": "hand"},
    {"name": "clamp_max"},
    {"name": "softsign", "public": "softsign", "builder": "generated", "doc": "x / (1 + |x|), elementwise.",
     "example": ("[-1.0, 3.0]", "[-0.5 ,  0.75]")},
    {"name": "floor", "public": "floor", "builder": "generated",
     "doc": "The largest integer <= x, elementwise (a float); its gradient is 0, as PyTorch's.",
     "example": ("[-1.5, 2.7]", "[-2.,  2.]")},
)

BINARY_OPS = (
    {"name": "add", "public": "add", "builder": "generated", "symbol": "+",
     "doc": "a + b with numpy broadcasting (either side may be a number or an array)."},
    {"name": "sub", "public": "sub", "builder": "generated", "symbol": "-",
     "doc": "a - b with numpy broadcasting."},
    {"name": "mul", "public": "mul", "builder": "generated", "symbol": "*",
     "doc": "a * b with numpy broadcasting."},
    {"name": "div", "public": "div", "builder": "generated", "symbol": "/",
     "doc": "a / b with numpy broadcasting."},
    {"name": "pow"},                              # fa.pow, the unary op's function, builds it
    {"name": "maximum", "public": "maximum", "builder": "hand"},
    {"name": "minimum", "public": "minimum", "builder": "hand"},
    # comparisons: 1 or 0 in the value dtype, no gradient
    {"name": "greater", "public": "greater", "builder": "hand", "kernels": _COMPARISON},
    {"name": "greater_equal", "public": "greater_equal", "builder": "generated", "symbol": ">=",
     "example": ("[1.0, 2.0]", "[0., 1.]"), "kernels": _COMPARISON},
    {"name": "less", "public": "less", "builder": "generated", "symbol": "<",
     "example": ("[1.0, 2.0]", "[1., 0.]"), "kernels": _COMPARISON},
    {"name": "less_equal", "public": "less_equal", "builder": "generated", "symbol": "<=",
     "example": ("[1.0, 3.0]", "[1., 0.]"), "kernels": _COMPARISON},
    {"name": "equal", "public": "equal", "builder": "hand", "kernels": _COMPARISON},
    {"name": "not_equal", "public": "not_equal", "builder": "generated", "symbol": "!=",
     "example": ("[1.0, 2.0]", "[1., 0.]"), "kernels": _COMPARISON},
)

POINTWISE_LOSSES = (
    {"name": "bce_with_logits", "code": "P_BCE", "public": "bce_with_logits", "builder": "hand"},
    {"name": "mse", "public": "mse", "builder": "generated", "args": ("pred", "target"),
     "doc": "Squared error (pred - target)**2, elementwise; as torch.nn.functional.mse_loss.",
     "example": ("fa.nn.mse(fa.Parameter([1.0, 2.0]), [0.0, 0.0]).item()     # (1 + 4) / 2", "2.5")},
    {"name": "huber", "public": "huber", "builder": "hand"},
    {"name": "kl_div", "public": "kl_div", "builder": "hand"},
    {"name": "kl_div_log_target"},                # kl_div(log_target=True)
    {"name": "smooth_l1", "public": "smooth_l1", "builder": "hand"},
    {"name": "binary_cross_entropy", "public": "binary_cross_entropy", "builder": "hand"},
    {"name": "poisson_nll", "public": "poisson_nll", "builder": "hand"},
    {"name": "poisson_nll_full"},                 # poisson_nll's other cases
    {"name": "poisson_nll_rate"},
    {"name": "poisson_nll_rate_full"},
    # its first operand is input - target
    {"name": "gaussian_nll", "public": "gaussian_nll", "builder": "hand",
     "kernels": ("fill", "binary_forward", "binary_backward", "pointwise_loss_forward", "loss_finish",
                 "pointwise_loss_backward")},
    {"name": "soft_margin", "public": "soft_margin", "builder": "generated", "args": ("input", "target"),
     "doc": "log(1 + exp(-target * input)), elementwise; as torch.nn.functional.soft_margin_loss.",
     "example": ("fa.nn.soft_margin(fa.Parameter([0.0, 0.0]), [1.0, -1.0]).item()    # log(2)", "0.6931...")},
    {"name": "hinge", "public": "hinge", "builder": "generated", "args": ("input", "target"),
     "doc": "max(0, 1 - target * input), elementwise: the hinge loss of targets +-1 (scikit-learn's Hinge).",
     "example": ("fa.nn.hinge(fa.Parameter([0.5, 2.0]), [1.0, 1.0]).item()    # (0.5 + 0) / 2", "0.25")},
)

#: family -> its ops, in code order
TABLES = {"unary": UNARY_OPS, "binary": BINARY_OPS, "loss": POINTWISE_LOSSES}
