"""What the autobatch tests check: a batch's losses and gradients against the examples built
one by one (tests/test_autobatch.py, tests/test_autobatch_recurrent.py)."""
import numpy as np

import fastad as fa


def gradients(params):
    """{name: a copy of the Parameter's gradient (zeros where it has none)}."""
    return {k: np.array(p.grad) if p.grad is not None else np.zeros(p.shape)
            for k, p in params.items()}


def eager(items, loss_of, params):
    """Each item's loss, and the gradients of their sum, built one item at a time (the
    gradients are zeroed after)."""
    losses = []
    for item in items:
        loss = loss_of(item)
        loss.backward()
        losses.append(loss.item())
    grads = gradients(params)
    for p in params.values():
        p.zero_grad()
    return losses, grads


def assert_batch_matches_eager(items, loss_of, params):
    """Recorded under fa.autobatch and batched, the items' losses equal theirs built one by
    one, and the batch's gradients their sum (float64)."""
    losses, grads = eager(items, loss_of, params)
    with fa.autobatch():
        recorded = [loss_of(item) for item in items]
        total = fa.batch(recorded)
    total.backward()
    np.testing.assert_allclose(total.item(), sum(losses), rtol=1e-12)
    np.testing.assert_allclose([r.item() for r in recorded], losses, rtol=1e-12)
    for k, g in gradients(params).items():
        np.testing.assert_allclose(g, grads[k], rtol=1e-10, atol=1e-12, err_msg=k)
