"""Checks shared by the tests of fused nodes against the ops they fuse."""
import numpy as np


def assert_fused_matches_composed(results, shape, f64):
    """results: [(value, shape, *grads) of the composed ops, the same of the fused node];
    the fused node's value and gradients must be the composed ones bit for bit."""
    (value, composed_shape, *grads), (fused_value, fused_shape, *fused_grads) = results
    assert fused_shape == composed_shape == shape
    np.testing.assert_array_equal(fused_value, value)
    assert fused_value.dtype == (np.float64 if f64 else np.float32)
    for grad, fused in zip(grads, fused_grads):
        if grad is None:
            assert fused is None
        else:
            np.testing.assert_array_equal(fused, grad)
