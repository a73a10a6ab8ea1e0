"""A small convolutional network on scikit-learn's 8x8 handwritten digits.

Data: `sklearn.datasets.load_digits` (1,797 8x8 images, 10 classes, bundled
with scikit-learn, no download); 20% is held out. Get scikit-learn with
`pip install scikit-learn` (or `pip install fastad[test]`).

Model: Conv2d(1, 16, 3, padding=1) -> BatchNorm2d -> ReLU -> MaxPool2d(2) ->
Conv2d(16, 32, 3, padding=1) -> ReLU -> MaxPool2d(2) -> Flatten ->
Linear(128, 10), trained with Adam on minibatches. The training graph is built
once for a fixed batch size and replayed (`set_value`, `forward`, `backward`);
a second graph over the held-out set, built in eval mode under `fa.no_grad()`
on the same Parameters (and BatchNorm's running averages), measures accuracy.
It runs on a GPU when fastad sees one (`--device cpu` to stay on the CPU).

Run: python examples/cnn.py [--epochs 15] [--batch 32] [--device cuda]
"""
import argparse
import os
import time

# A model this small runs fastest on one BLAS thread; set before numpy loads BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402


def load_digit_images(seed=0):
    """(x_train, y_train, x_test, y_test) as (n, 1, 8, 8) standardised images and labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("examples/cnn.py needs scikit-learn for its digits data set: "
                         "pip install scikit-learn") from None
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    images = digits.images[order].reshape(-1, 1, 8, 8) / 16.0
    labels = digits.target[order].astype(np.int64)
    n_test = len(labels) // 5
    mean, std = images[n_test:].mean(), images[n_test:].std()
    images = (images - mean) / std
    return images[n_test:], labels[n_test:], images[:n_test], labels[:n_test]


class DigitCNN(fa.nn.Module):
    """Two conv/pool stages and a linear classifier over 8x8 one-channel images."""

    def __init__(self, generator=None):
        super().__init__()
        self.features = fa.nn.Sequential(
            fa.nn.Conv2d(1, 16, 3, padding=1, generator=generator), fa.nn.BatchNorm2d(16),
            fa.nn.ReLU(), fa.nn.MaxPool2d(2),
            fa.nn.Conv2d(16, 32, 3, padding=1, generator=generator), fa.nn.ReLU(),
            fa.nn.MaxPool2d(2), fa.nn.Flatten())
        self.classifier = fa.nn.Linear(32 * 2 * 2, 10, generator=generator)

    def forward(self, x):
        return self.classifier(self.features(x))


def main(epochs=15, batch=32, lr=0.01, seed=0, device=None, train_size=None):
    """Train and report; returns {"loss": [per epoch], "accuracy": [held-out, per epoch]}.

    device: "cpu", "cuda", ...; None picks a GPU when one is present.
    train_size: use only the first train_size training images (for quick checks).
    """
    if device is None:
        device = "cuda" if fa.cuda.is_available() else "cpu"
    x_train, y_train, x_test, y_test = load_digit_images(seed)
    if train_size is not None:
        x_train, y_train = x_train[:train_size], y_train[:train_size]
    print(f"digits: {len(y_train)} train / {len(y_test)} held out, 8x8 images; device {device}")
    rng = np.random.default_rng(seed)
    model = DigitCNN(generator=rng).to(device)
    # Built on a real batch: building computes a forward, which moves BatchNorm's running averages.
    x = fa.Input(x_train[:batch], device=device)
    y = fa.IndexInput(y_train[:batch], device=device)
    loss = fa.nn.cross_entropy(model(x), y)                  # the training graph, built once
    model.eval()
    with fa.no_grad():
        test_logits = model(fa.Input(x_test, device=device))  # the evaluation graph
    model.train()
    optimizer = fa.optim.Adam(model.parameters(), lr=lr)

    history = {"loss": [], "accuracy": []}
    steps_per_epoch = len(y_train) // batch                   # the last partial batch is dropped
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        order = rng.permutation(len(y_train))
        total = 0.0
        for s in range(steps_per_epoch):
            rows = order[s * batch:(s + 1) * batch]
            x.set_value(x_train[rows])
            y.set_value(y_train[rows])
            loss.forward()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
        predictions = test_logits.forward().numpy().argmax(axis=1)
        accuracy = float(np.mean(predictions == y_test))
        history["loss"].append(total / steps_per_epoch)
        history["accuracy"].append(accuracy)
        rate = steps_per_epoch * batch / (time.perf_counter() - start)
        print(f"epoch {epoch:3d}: train loss {history['loss'][-1]:.4f}  held-out accuracy "
              f"{accuracy:6.1%}  ({rate:,.0f} images/s)")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: a GPU if present)")
    a = ap.parse_args()
    main(a.epochs, a.batch, a.lr, a.seed, a.device)
