"""Fitting a model with ``kiln.opt`` (Dr.Jit's optimizers): the amplitude, decay and frequency
of a damped oscillation recovered from noisy samples with Adam, the training step frozen with
the optimizer as an argument (``loss.backward()`` and ``opt.step()`` inside, a learning-rate
schedule outside) and checked against the same training run unfrozen.

Run: ``python python/examples/fit_with_adam.py [samples] [steps]`` (kiln installed, e.g.
``pip install ./python``).
"""

import math
import sys
import time

import kiln
from kiln.opt import Adam

TRUE = {"amp": 1.7, "decay": 0.35, "freq": 2.4}


def model(opt, t):
    return opt["amp"] * kiln.exp(-opt["decay"] * t) * kiln.cos(opt["freq"] * t)


def train_step(t, y, opt):
    """One gradient step; returns the loss before it."""
    r = model(opt, t) - y
    loss = kiln.mean(r * r)
    kiln.backward(loss)
    opt.step()
    return loss


def make_optimizer():
    opt = Adam(lr=0.05)
    opt["amp"] = kiln.Float32(1.0)
    opt["decay"] = kiln.Float32(0.1)
    opt["freq"] = kiln.Float32(2.0)
    return opt


def main(samples=100_000, steps=300):
    t = kiln.linspace(kiln.Float32, 0.0, 10.0, samples)
    noise = kiln.PCG32(samples).next_float32() - 0.5
    y = TRUE["amp"] * kiln.exp(-TRUE["decay"] * t) * kiln.cos(TRUE["freq"] * t) + 0.1 * noise
    kiln.eval(t, y)

    runs = {}
    for name, step in [("frozen", kiln.freeze(train_step)), ("plain", train_step)]:
        opt = make_optimizer()
        for i in range(steps):
            if i == 1:  # the first call traces (and compiles, the first time): timed apart
                kiln.sync()
                start = time.perf_counter()
            opt.set_learning_rate(0.05 * 0.5 * (1 + math.cos(math.pi * i / steps)))  # cosine schedule
            loss = step(t, y, opt)
        final = float(loss.numpy()[0])
        secs = time.perf_counter() - start
        runs[name] = (secs, final, {k: float(v.numpy()[0]) for k, v in opt.items()})
        if name == "frozen":
            print(f"frozen step: {step.n_recordings} recording, {step.n_replays} replays")

    for name, (secs, final, params) in runs.items():
        fitted = ", ".join(f"{k} {v:.4f} (true {TRUE[k]})" for k, v in params.items())
        print(f"{name:>6}: {steps} Adam steps over {samples} samples, steps 2..{steps} in "
              f"{secs * 1e3:.1f} ms ({secs / (steps - 1) * 1e6:.0f} us/step), final loss {final:.6f}: {fitted}")
    same = runs["frozen"][2] == runs["plain"][2]
    print(f"frozen and plain runs agree bit for bit: {same}")
    return same


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    if not main(*args):
        sys.exit(1)
