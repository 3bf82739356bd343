"""The Python front against the same workloads written in Rust, in one run: each row is the median
time through ``import kiln`` divided by the median of ``examples/python_parity.rs`` (run here
first, with cargo), with the issue's target. Dr.Jit's tracing and frozen replay are measured too
when ``drjit`` is importable (``bench/peers/run.sh`` makes a virtual environment with it).

    python bench/python/parity.py            # from the repository root, kiln installed
"""

import json
import os
import statistics
import subprocess
import sys
import time

import kiln

N = 10_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_ms(reps, f):
    f()
    f()
    t = []
    for _ in range(reps):
        s = time.perf_counter()
        f()
        t.append((time.perf_counter() - s) * 1e3)
    return statistics.median(t)


def rust_figures():
    out = subprocess.run(
        ["cargo", "run", "--release", "--quiet", "--example", "python_parity"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def chain(x):
    v = x
    for _ in range(25):
        v = v * 1.0001 + 0.5
        v = v - x
        v = kiln.sqrt(kiln.abs(v))
    return v


def python_figures():
    x = kiln.arange(kiln.Float32, N) / float(N)
    y = kiln.ones(kiln.Float32, N)
    kiln.eval(x, y)
    r = {}
    r["saxpy"] = median_ms(15, lambda: (x * 2.0 + y).eval())
    r["fused chain"] = median_ms(15, lambda: (kiln.tanh(x * x + 1.0) * kiln.exp(-x) + kiln.sqrt(kiln.abs(x))).eval())

    def mc():
        rng = kiln.PCG32(N)
        a, b, c = rng.next_float32(), rng.next_float32(), rng.next_float32()
        kiln.count(a * a + b * b + c * c < 1.0)

    r["monte carlo"] = median_ms(11, mc)
    side = 2048
    u = kiln.TensorXf(kiln.arange(kiln.Float32, side * side) / float(side * side), (side, side))
    u.array.eval()
    lap = kiln.stencil(lambda a: a[0, 1] + a[0, -1] + a[1, 0] + a[-1, 0] - 4.0 * a[0, 0])
    r["laplacian stencil"] = median_ms(15, lambda: lap(u).array.eval())
    lanes = 10_000
    x0 = kiln.TensorXf(kiln.arange(kiln.Float32, lanes) / float(lanes), (lanes,))
    x0.array.eval()
    r["scan final"] = median_ms(11, lambda: kiln.lax.scan(lambda c, _: (c * 0.999 + 0.001, None), x0, None,
                                                           length=1000)[0].array.eval())

    def f(a, b):
        return a * 1.1 + b, kiln.sin(b)

    frozen = kiln.freeze(f)
    fa = kiln.arange(kiln.Float32, 1024) / 1024.0
    fb = kiln.ones(kiln.Float32, 1024)
    kiln.eval(fa, fb)
    r["frozen replay"] = median_ms(201, lambda: frozen(fa, fb))
    small = kiln.arange(kiln.Float32, 1000)
    small.eval()

    def trace():
        for _ in range(100):
            chain(small)

    r["trace ns/op"] = median_ms(21, trace) * 1e6 / (100 * 100)
    return r


def drjit_figures():
    try:
        import drjit as dr
        from drjit.llvm import Float
    except ImportError:
        return {}
    small = dr.arange(Float, 1000)
    dr.eval(small)

    def dchain(x):
        v = x
        for _ in range(25):
            v = v * 1.0001 + 0.5
            v = v - x
            v = dr.sqrt(dr.abs(v))
        return v

    def trace():
        for _ in range(100):
            dchain(small)

    out = {"trace ns/op": median_ms(21, trace) * 1e6 / (100 * 100)}

    @dr.freeze
    def f(a, b):
        return a * 1.1 + b, dr.sin(b)

    fa, fb = dr.arange(Float, 1024) / 1024.0, dr.ones(Float, 1024)
    dr.eval(fa, fb)

    def replay():
        o = f(fa, fb)
        dr.eval(o)

    out["frozen replay"] = median_ms(201, replay)
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--drjit":
        print(json.dumps(drjit_figures()))
        return
    rust = rust_figures()
    py = python_figures()
    peer = {}
    venv = os.environ.get("DRJIT_PYTHON", "/tmp/peers-venv/bin/python")
    if os.path.exists(venv):
        try:
            peer = json.loads(subprocess.run([venv, __file__, "--drjit"], check=True, capture_output=True,
                                             text=True).stdout.strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001 - a peer that is not there is reported, not fatal
            print(f"(Dr.Jit not measured: {e})")
    print(f"host: {rust['host']}, backend {kiln.backend()}")
    print(f"{'workload':<20} {'Python':>10} {'Rust':>10} {'ratio':>7}  target")
    for k in ["saxpy", "fused chain", "monte carlo", "laplacian stencil", "scan final", "frozen replay"]:
        ratio = py[k] / rust[k]
        goal = 1.2 if k == "frozen replay" else 1.1
        unit = "ms"
        print(f"{k:<20} {py[k]:>8.3f}{unit} {rust[k]:>8.3f}{unit} {ratio:>6.2f}x  <= {goal}x "
              f"{'MET' if ratio <= goal else 'MISSED'}")
    t = py["trace ns/op"]
    print(f"{'trace per op':<20} {t:>8.0f}ns {rust['trace ns/op']:>8.0f}ns {t / rust['trace ns/op']:>6.2f}x  "
          f"<= 1000 ns {'MET' if t <= 1000 else 'MISSED'}")
    if peer:
        d = peer["trace ns/op"]
        print(f"{'  Dr.Jit tracing':<20} {d:>8.0f}ns  kiln/Dr.Jit {t / d:.2f}x")
        fr = peer["frozen replay"]
        print(f"{'  Dr.Jit replay':<20} {fr:>8.3f}ms  Dr.Jit/kiln {fr / py['frozen replay']:.1f}x  >= 10x "
              f"{'MET' if fr / py['frozen replay'] >= 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
