"""Dropout masks on a GPU: drawn on the host by a CPU mask of the same stream
(fastad/ops/dropout.pyx) on every forward, then copied into the device buffer."""
from fastad.ops.dropout import dropout_mask as host_dropout_mask
from fastad._engine.graph import function_node
from fastad.cuda.ops.common import copy_from_host
from fastad.cuda.storage import DeviceStorage


class DropoutMask:
    """The mask node's passes: forward copies the host mask's next draw; no gradient."""

    def __init__(self, host_mask):
        self.host_mask = host_mask

    def forward(self, node):
        copy_from_host(node.value, self.host_mask.draw())

    def backward(self, node):
        pass


def dropout_mask(x, p, flag, seed):
    """A mask node of x's shape and dtype on x's device (no inputs, no gradient)."""
    host = host_dropout_mask(x.shape, x.dtype, p, flag, seed)
    storage = DeviceStorage.empty(x.device, x.shape, x.dtype)
    return function_node("dropout_mask", (), tuple(x.shape), x.dtype, DropoutMask(host), storage,
                         redraws=True)
