"""Hand-written derivatives and Dr.Jit's AD calls from Python: a ``kiln.CustomOp`` (a stable
softplus whose derivative is written by hand) used in a fit, a forward pass from several arrays
at once (``enqueue`` + ``traverse``), ``backward_to`` a chosen array, and ``isolate_grad``.

Run: ``python python/examples/custom_gradients.py [lanes]`` (kiln installed, e.g.
``pip install ./python``).
"""

import sys
import time

import numpy as np

import kiln


class Softplus(kiln.CustomOp):
    """log(1 + exp(x)), stable for large |x|, with its derivative sigmoid(x) written by hand."""

    def eval(self, x):
        self.x = x
        return kiln.maximum(x, 0.0) + kiln.log(1.0 + kiln.exp(-kiln.abs(x)))

    def sigmoid(self):
        return 1.0 / (1.0 + kiln.exp(-self.x))

    def backward(self):
        self.set_grad_in("x", self.grad_out() * self.sigmoid())

    def forward(self):
        self.set_grad_out(self.grad_in("x") * self.sigmoid())


def fit(lanes):
    """Fit y = softplus(a·t + b) to noisy data by gradient descent through the custom op."""
    rng = np.random.default_rng(1)
    t = rng.uniform(-4.0, 4.0, lanes)
    y = np.logaddexp(0.0, 1.7 * t - 0.4) + rng.normal(0.0, 0.01, lanes)
    T, Y = kiln.Float64(t), kiln.Float64(y)
    a, b = kiln.Float64(0.5), kiln.Float64(0.0)
    start = time.perf_counter()
    for _ in range(300):
        kiln.enable_grad(a, b)
        loss = kiln.mean((kiln.custom(Softplus, a * T + b) - Y) ** 2)
        kiln.backward(loss)
        a = kiln.detach(a) - 0.1 * kiln.grad(a)
        b = kiln.detach(b) - 0.1 * kiln.grad(b)
    kiln.eval(a, b)
    ms = (time.perf_counter() - start) * 1e3 / 300
    print(f"softplus fit over {lanes} lanes: a = {float(a[0]):.4f} (1.7), b = {float(b[0]):.4f} (-0.4), "
          f"loss {float(loss[0]):.2e}, {ms:.2f} ms per step (value, custom backward, update)")
    return float(a[0]), float(b[0])


def passes():
    """One forward pass from two seeds, a backward pass to one chosen array, an isolated pass."""
    x, w = kiln.Float64([0.3, -1.2, 2.0]), kiln.Float64(1.5)
    kiln.enable_grad(x, w)
    y = kiln.custom(Softplus, x * w)
    kiln.set_grad(x, 1.0)
    kiln.set_grad(w, 0.5)
    kiln.enqueue(kiln.ADMode.Forward, x, w)
    kiln.traverse(kiln.ADMode.Forward)  # d y along (dx = 1, dw = 0.5), tangents adding up
    sig = 1.0 / (1.0 + np.exp(-np.array([0.3, -1.2, 2.0]) * 1.5))
    want = sig * (1.5 * 1.0 + np.array([0.3, -1.2, 2.0]) * 0.5)
    print("directional derivative:", np.round(kiln.grad(y).numpy(), 6), " by hand:", np.round(want, 6))

    kiln.clear_grad(x, w, y)
    z = kiln.sum(y * y)
    kiln.set_grad(z, 1.0)
    gx = kiln.backward_to(x)  # only x gets a gradient; w keeps none
    print("backward_to(x):", np.round(gx.numpy(), 6), " w's gradient:", kiln.grad(w).numpy())

    h = x * 2.0
    with kiln.isolate_grad():
        kiln.backward(kiln.sum(h * h))
        inside = kiln.grad(x).numpy().copy()
    print("isolate_grad: x's gradient inside", inside, "after", kiln.grad(x).numpy())


if __name__ == "__main__":
    lanes = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    fit(lanes)
    passes()
