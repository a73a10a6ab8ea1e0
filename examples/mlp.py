"""MLP classifier with minibatch SGD on a graph built once and replayed.

Data: scikit-learn's bundled handwritten digits (`sklearn.datasets.load_digits`:
1,797 8x8 images, 10 classes, shipped inside the package, no download) when
scikit-learn is installed. Without it, a SYNTHETIC stand-in of the same shape
is generated and the output says so: 10 random 8x8 "prototype" images with
pixel values in [0, 16]; each example is one prototype, scaled by a random
factor in [0.6, 1.4], plus Gaussian pixel noise (sd 10), clipped to [0, 16].
The classes overlap, so it is not solved perfectly.

The training graph (Linear -> ReLU -> Linear -> cross-entropy) is built once
for a fixed batch size; `fa.train` replays it over each epoch's shuffled
minibatches in compiled code (each step: the minibatch into the Input and the
IndexInput, forward, backward, the optimizer's step). A second graph
over the whole held-out set, built under `fa.no_grad()` on the same
Parameters, measures accuracy.

Run: python examples/mlp.py [--epochs 20] [--batch 32] [--hidden 128]
"""
import argparse
import os
import time

# A model this small runs fastest on one BLAS thread, and a multi-threaded BLAS on a
# busy machine is slower still; set before numpy loads BLAS (a value set by the user wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402


def synthetic_digits(n=1797, seed=0):
    """(images (n, 64) in [0, 16], labels (n,)): the documented stand-in for load_digits."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0, 16, size=(10, 64))
    labels = rng.integers(0, 10, size=n)
    scale = rng.uniform(0.6, 1.4, size=(n, 1))
    images = np.clip(prototypes[labels] * scale + rng.normal(0, 10, size=(n, 64)), 0, 16)
    return images, labels


def load_data(seed=0):
    """(x_train, y_train, x_test, y_test, description); pixels standardised, 20% held out."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        images, labels = synthetic_digits(seed=seed)
        name = ("SYNTHETIC digits (scikit-learn is not installed): 10 noisy prototype images, "
                "see the module docstring")
    else:
        digits = load_digits()
        images, labels = digits.data, digits.target
        name = "scikit-learn's bundled handwritten digits (load_digits)"
    order = np.random.default_rng(seed).permutation(len(labels))
    images, labels = images[order], labels[order].astype(np.int64)
    n_test = len(labels) // 5
    x_train, x_test = images[n_test:], images[:n_test]
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
    return ((x_train - mean) / std, labels[n_test:], (x_test - mean) / std, labels[:n_test],
            f"{name}: {len(labels) - n_test} train / {n_test} held out, {images.shape[1]} features")


def main(epochs=20, batch=32, hidden=128, lr=0.05, momentum=0.9, seed=0):
    """Train and report; returns {"loss": [per epoch], "accuracy": [held-out, per epoch], "synthetic": bool}."""
    x_train, y_train, x_test, y_test, description = load_data(seed)
    print(description)
    rng = np.random.default_rng(seed)
    model = fa.nn.Sequential(fa.nn.Linear(x_train.shape[1], hidden, generator=rng), fa.relu,
                             fa.nn.Linear(hidden, 10, generator=rng))
    x = fa.Input(np.zeros((batch, x_train.shape[1])))
    y = fa.IndexInput(np.zeros(batch, dtype=np.int64))
    loss = fa.nn.cross_entropy(model(x), y)                   # the training graph, built once
    with fa.no_grad():
        test_logits = model(fa.Input(x_test))                 # the evaluation graph
    optimizer = fa.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    history = {"loss": [], "accuracy": [], "synthetic": description.startswith("SYNTHETIC")}
    steps_per_epoch = len(y_train) // batch                    # the last partial batch is dropped
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        rows = rng.permutation(len(y_train))[:steps_per_epoch * batch].reshape(steps_per_epoch, batch)
        # the epoch's minibatches, replayed in compiled code: set_value, forward, backward, step
        [mean_loss] = fa.train(loss, optimizer, {x: x_train[rows], y: y_train[rows]})
        predictions = test_logits.forward().numpy().argmax(axis=1)
        accuracy = float(np.mean(predictions == y_test))
        history["loss"].append(mean_loss)
        history["accuracy"].append(accuracy)
        rate = steps_per_epoch * batch / (time.perf_counter() - start)
        print(f"epoch {epoch:3d}: train loss {history['loss'][-1]:.4f}  held-out accuracy "
              f"{accuracy:6.1%}  ({rate:,.0f} examples/s)")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    main(a.epochs, a.batch, a.hidden, seed=a.seed)
