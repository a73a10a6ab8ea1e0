"""Quickstart: learn y = 3x + 5 by replaying one graph (wyrm's univariate regression).

The graph is built once; each step copies a new example into the Input
leaves (`set_value`) and replays it with `forward()`/`backward()`, which
runs no Python per node. Run: python examples/quickstart.py
"""
import numpy as np

import fastad as fa


def main(steps=2000, seed=0):
    rng = np.random.default_rng(seed)
    slope = fa.Parameter(np.zeros(1), name="slope")
    intercept = fa.Parameter(np.zeros(1), name="intercept")
    x = fa.Input(np.zeros(1))
    y = fa.Input(np.zeros(1))

    prediction = slope * x + intercept          # built once ...
    loss = fa.sum(fa.square(prediction - y))
    optimizer = fa.optim.SGD([slope, intercept], lr=0.1)

    for step in range(steps):                   # ... replayed for every example
        xv = rng.uniform(-1, 1)
        x.set_value([xv])
        y.set_value([3 * xv + 5])
        loss.forward()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 500 == 0:
            print(f"step {step:5d}  loss {loss.item():.6f}")

    print(f"learned slope {slope.item():.4f} (true 3), intercept {intercept.item():.4f} (true 5)")
    return slope.item(), intercept.item()


if __name__ == "__main__":
    main()
