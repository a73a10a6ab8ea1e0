"""Recurrent cells on a GPU: lstm_cell and gru_cell, composed of device ops.

On the CPU each cell is one fused node (fastad_cy/fused.pyx) because there a
node's overhead is what costs. On a GPU the cost is a kernel launch per op,
which a captured CUDA graph (fastad.cuda.capture) replays at once, so the
cells are written as the ops they are made of: the same formulas, one
obvious place. fastad_cy/fused.pyx checks the shapes first.
"""
import fastad_cy.elementwise as ew
from fastad_cy.linalg import matmul
from fastad_cy.shape import getitem, stack
from fastad.cuda.ops.common import same_device


def _gate(gates, k, H):
    return getitem(gates, (slice(None), slice(k * H, (k + 1) * H)))


def lstm_cell(x, h, c, weight_ih, weight_hh, bias, H):
    """hc (2, batch, H) = [h', c'] with PyTorch's gate order i, f, g, o."""
    same_device("lstm_cell", x, h, c, weight_ih, weight_hh, bias)
    gates = ew.add(matmul(x, weight_ih), bias)
    if h is not None:
        gates = ew.add(gates, matmul(h, weight_hh))
    i, f, g, o = (_gate(gates, k, H) for k in range(4))
    c_new = ew.mul(ew.sigmoid(i), ew.tanh(g))
    if c is not None:
        c_new = ew.add(ew.mul(ew.sigmoid(f), c), c_new)
    h_new = ew.mul(ew.sigmoid(o), ew.tanh(c_new))
    return stack([h_new, c_new], 0)


def gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh, H):
    """h' (batch, H) with PyTorch's gate order r, z, n."""
    same_device("gru_cell", x, h, weight_ih, weight_hh, bias_ih, bias_hh)
    gi = ew.add(matmul(x, weight_ih), bias_ih)
    gh = bias_hh if h is None else ew.add(matmul(h, weight_hh), bias_hh)
    gh_r, gh_z, gh_n = (getitem(gh, (Ellipsis, slice(k * H, (k + 1) * H))) for k in range(3))
    r = ew.sigmoid(ew.add(_gate(gi, 0, H), gh_r))
    z = ew.sigmoid(ew.add(_gate(gi, 1, H), gh_z))
    n = ew.tanh(ew.add(_gate(gi, 2, H), ew.mul(r, gh_n)))
    h_new = ew.mul(ew.sub(1.0, z), n)
    if h is not None:
        h_new = ew.add(h_new, ew.mul(z, h))
    return h_new
