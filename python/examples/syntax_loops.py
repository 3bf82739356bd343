"""Python loops and branches on kiln arrays, traced into kernels with ``@kiln.syntax`` (Dr.Jit's
``@dr.syntax``): each lane runs its own number of iterations, in one kernel, and gradients flow
through.

Run: ``python python/examples/syntax_loops.py [lanes]`` (kiln installed, e.g. ``pip install ./python``).
"""

import sys
import time

import kiln


@kiln.syntax
def collatz_steps(n):
    """Steps of the Collatz map until 1, per lane (a different trip count in every lane)."""
    steps = kiln.zeros(kiln.UInt32, len(n))
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@kiln.syntax
def newton_sqrt(a, tol=1e-12):
    """sqrt(a) by Newton's method, iterating each lane until it converges."""
    x = kiln.maximum(a, 1.0)
    delta = x
    while kiln.abs(delta) > tol * x:
        delta = 0.5 * (a / x - x)
        x = x + delta
    return x


def collatz_py(v):
    steps = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        steps += 1
    return steps


def main():
    lanes = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    n = kiln.arange(kiln.UInt32, lanes) + 1
    collatz_steps(n).eval()  # compile once
    t = time.perf_counter()
    steps = collatz_steps(n)
    steps.eval()
    kiln_s = time.perf_counter() - t
    few = min(lanes, 20_000)
    t = time.perf_counter()
    want = [collatz_py(v) for v in range(1, few + 1)]
    py_s = (time.perf_counter() - t) * lanes / few
    assert steps.tolist()[:few] == want
    print(f"Collatz over {lanes} starting values: most steps {int(kiln.max(steps).tolist()[0])};"
          f" kiln {kiln_s * 1e3:.1f} ms, pure Python about {py_s * 1e3:.0f} ms"
          f" ({py_s / kiln_s:.0f}x)")

    a = kiln.Float64([0.25, 2.0, 9.0, 1e6])
    kiln.enable_grad(a)
    r = newton_sqrt(a)
    kiln.backward(kiln.sum(r))
    print("sqrt by Newton:", [round(v, 12) for v in r.tolist()])
    print("d sqrt/da through the loop:", [round(v, 12) for v in kiln.grad(a).tolist()],
          "(exact: 0.5/sqrt(a) =", [round(0.5 / v ** 0.5, 12) for v in [0.25, 2.0, 9.0, 1e6]], ")")
    s = kiln.stats()
    print(f"{s['kernels_compiled']} kernels compiled, {s['launches']} launches")


if __name__ == "__main__":
    main()
