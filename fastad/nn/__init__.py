"""Neural-network building blocks (`fa.nn`): Module and layers, losses, initialisers (`fa.nn.init`).

A Module registers the Parameters and sub-Modules assigned to its attributes,
so `parameters()`, `state_dict()` and `load_state_dict()` see them under dotted
names ("encoder.weight"). Calling a module calls its `forward`.

>>> class TwoLayer(fa.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.hidden = fa.nn.Linear(4, 8)
...         self.out = fa.nn.Linear(8, 1)
...         self.drop = fa.nn.Dropout(0.1, seed=0)
...     def forward(self, x):
...         return self.out(self.drop(fa.tanh(self.hidden(x))))
"""
from fastad.nn import init, functional
from fastad.nn.module import Module, Sequential, ModuleList, ModuleDict, Dropout, IncompatibleKeys
from fastad.nn.activations import (ReLU, LeakyReLU, GELU, ELU, SiLU, Hardtanh, Tanh, Sigmoid, Softplus, LogSigmoid, Softmax,
                                   LogSoftmax, Identity, Flatten)
from fastad.nn.layers import Linear, Embedding, EmbeddingBag, LSTMCell, GRUCell, LSTM, GRU, LayerNorm
from fastad.nn.attention import MultiheadAttention
from fastad.nn.conv import (Conv1d, Conv2d, MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d,
                            AdaptiveAvgPool2d, BatchNorm1d, BatchNorm2d)
from fastad.ops.losses import (cross_entropy, nll_loss, bce_with_logits, mse, huber, kl_div, smooth_l1,
                              binary_cross_entropy, poisson_nll, gaussian_nll, margin_ranking,
                              hinge_embedding, cosine_embedding, triplet_margin, multi_margin, soft_margin,
                              hinge)
from fastad.ops.elementwise import (relu, leaky_relu, gelu, elu, silu, hardtanh, tanh, sigmoid,
                                   softplus, logsigmoid)
from fastad.ops.reduction import softmax, log_softmax

__all__ = ["init", "functional", "Module", "Sequential", "ModuleList", "ModuleDict", "Dropout",
           "ReLU", "LeakyReLU", "GELU", "ELU", "SiLU", "Hardtanh", "Tanh", "Sigmoid", "Softplus",
           "LogSigmoid", "Softmax", "LogSoftmax",
           "Identity", "Flatten", "IncompatibleKeys", "Linear", "Embedding", "EmbeddingBag",
           "LSTMCell", "GRUCell", "LSTM", "GRU", "LayerNorm", "MultiheadAttention", "Conv1d",
           "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d",
           "BatchNorm1d", "BatchNorm2d", "cross_entropy", "nll_loss",
           "bce_with_logits", "mse", "huber", "kl_div", "smooth_l1", "binary_cross_entropy", "poisson_nll",
           "gaussian_nll", "margin_ranking", "hinge_embedding", "cosine_embedding", "triplet_margin",
           "multi_margin", "soft_margin", "hinge", "relu", "leaky_relu", "gelu", "elu", "silu", "hardtanh", "tanh", "sigmoid", "softplus",
           "logsigmoid", "softmax", "log_softmax"]
