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


def assert_constant_and_input_table_grads_match(results):
    """results: [(value, a constant table's gradient, an Input table's (requires_grad)
    gradient) of the composed ops, the same of the fused node]: the fused node's are the
    composed ones exactly, the constant's reading as zeros and the Input's not."""
    (value, constant_grad, input_grad), (fused_value, fused_constant_grad, fused_input_grad) = results
    np.testing.assert_array_equal(fused_value, value)
    np.testing.assert_array_equal(fused_constant_grad, constant_grad)
    assert not np.any(fused_constant_grad)
    np.testing.assert_array_equal(fused_input_grad, input_grad)
    assert np.any(fused_input_grad)
