"""Several Python threads using kiln at once: each gets the answers it gets alone, and the GIL is
released while kernels compile and run (another Python thread makes progress meanwhile)."""

import faulthandler
import threading
import time

import numpy as np

import kiln


def program(seed, n):
    """A mixed program: arithmetic, math, a gather, a scatter, a reduction and a gradient."""
    rng = kiln.PCG32(n, seed)
    x = rng.next_float64() * 4.0 - 2.0
    y = kiln.sin(x) * kiln.exp(-x * x) + kiln.sqrt(kiln.abs(x))
    idx = kiln.arange(kiln.UInt32, n)[::-1]
    g = kiln.gather(kiln.Float64, y, idx)
    h = kiln.zeros(kiln.Float64, 8)
    kiln.scatter_reduce(kiln.ReduceOp.Add, h, g, idx % 8)
    w = kiln.Float64(x)
    kiln.enable_grad(w)
    kiln.backward(kiln.sum(kiln.tanh(w) * w))
    return [float(kiln.sum(g)[0]), h.tolist(), w.grad.numpy().copy()]


def same(a, b):
    assert a[0] == b[0]
    assert a[1] == b[1]
    np.testing.assert_array_equal(a[2], b[2])


def test_threads_get_the_answers_they_get_alone():
    sizes = [1, 17, 1000, 4097, 50_000, 3, 256, 9999]
    alone = [program(s, n) for s, n in enumerate(sizes)]
    results = [None] * len(sizes)
    errors = []
    barrier = threading.Barrier(len(sizes))

    def run(i):
        try:
            barrier.wait()
            for _ in range(3):
                results[i] = program(i, sizes[i])
                same(results[i], alone[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for r, a in zip(results, alone):
        same(r, a)


def test_the_gil_is_released_while_kernels_run():
    n = 1 << 22
    x = kiln.PCG32(n).next_float32()
    kiln.eval(x)
    y = x
    for _ in range(60):
        y = kiln.sin(y) * 1.0001 + kiln.cos(y) * 0.5
    stamps = []
    started, done = threading.Event(), threading.Event()

    def spin():
        started.set()
        i = 0
        while not done.is_set():
            i += 1
            if i % 256 == 0:
                stamps.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    started.wait()
    t0 = time.perf_counter()
    kiln.eval(y)  # compiles and runs a 60-step chain over 4M lanes in one call
    t1 = time.perf_counter()
    done.set()
    t.join()
    # Python hands the GIL over every 5 ms at bytecode boundaries, so the other thread may run
    # just before and after the call; in its middle it can run only if kiln released the GIL
    lo, hi = t0 + 0.3 * (t1 - t0), t0 + 0.7 * (t1 - t0)
    assert t1 - t0 > 0.03, "the call was too short to tell"
    assert any(lo <= s <= hi for s in stamps), (t1 - t0, len(stamps))


def _run_threads(*targets, timeout=120):
    """Run each target on its own thread; fail (instead of hanging) if one does not finish."""
    done = []
    errors = []

    def wrap(i, f):
        try:
            f()
            done.append(i)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    # a deadlock that holds the GIL would block `join` too: past the timeout, print every
    # thread's stack and end the process (the run fails instead of hanging CI)
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        ts = [threading.Thread(target=wrap, args=(i, f), daemon=True) for i, f in enumerate(targets)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=timeout)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert not errors, errors
    assert sorted(done) == list(range(len(targets))), "a thread is stuck: deadlock"


def test_evaluating_ops_on_one_thread_while_another_records():
    # a recording holds the engine's evaluation lock while its Python body needs the GIL; ops
    # that evaluate (make_opaque, a scatter's target) wait for that lock without the GIL
    @kiln.freeze(warn_after=10**6)
    def f(x):
        y = x
        for _ in range(30):
            y = y * 1.0001 + 1
        return y

    def record():
        for n in range(1, 120):
            f(kiln.arange(kiln.Float32, n))

    def evaluate():
        for i in range(1000):
            t = kiln.zeros(kiln.Float32, 16)
            kiln.scatter(t, kiln.Float32(i), kiln.UInt32(i % 16))
            kiln.make_opaque(t)

    g = kiln.freeze(lambda x: x + 1, auto_opaque=False)  # makes its literal inputs opaque

    def literals():
        for i in range(1000):
            g(kiln.Float32(i))

    _run_threads(record, evaluate, literals)


def test_a_frozen_function_called_inside_another_on_two_threads():
    @kiln.freeze(warn_after=10**6)
    def f(x):
        return x * 2 + 1

    @kiln.freeze(warn_after=10**6)
    def h(x):
        return f(x) + 3

    def a():
        for n in range(1, 150):
            assert f(kiln.arange(kiln.Float32, n)).numpy()[-1] == 2 * (n - 1) + 1

    def b():
        for n in range(1, 150):
            assert h(kiln.arange(kiln.Float32, n)).numpy()[-1] == 2 * (n - 1) + 4

    _run_threads(a, b)


_DAEMONS_AT_EXIT = """
import atexit, sys, threading, time

def late():                      # registered first: runs after kiln's exit hook, on this thread
    import kiln
    print("late", float(kiln.sum(kiln.arange(kiln.Float32, 10))[0]), flush=True)

atexit.register(late)
import numpy as np
import kiln

@kiln.freeze(warn_after=10**6)
def f(x):
    time.sleep(0.01)          # the recording's Python body gives the GIL away
    return x + 1

@kiln.freeze(warn_after=10**6)
def g(x):
    y = x * 2
    kiln.eval(y)              # an evaluation inside a recording (holding the evaluation lock)
    time.sleep(0.01)
    return y + 1

def frozen_calls(fn):
    n = 1
    while True:
        fn(kiln.arange(kiln.Float32, n % 50 + 1)); n += 1   # a new layout records each time

def evaluations():
    n = 1
    while True:
        x = kiln.arange(kiln.Float32, 200_000 + n) * 1.5
        kiln.eval(x); float(kiln.sum(x)[0]); n += 1

class Slow(kiln.CustomOp):
    def eval(self, x):
        time.sleep(0.002)
        return x * 2

    def backward(self):
        pass

def callbacks():             # Python run back from kiln's native frames
    lap = kiln.stencil(lambda a: a[0, 1] + a[0, -1] - 2.0 * a[0, 0])
    u = np.ones((64, 64), np.float32)
    while True:
        x = kiln.arange(kiln.Float32, 1000)
        kiln.if_stmt((x,), x > 5, lambda x: (time.sleep(0.002), x + 1)[1], lambda x: x - 1)
        kiln.lax.scan(lambda c, _: (c * 0.5, None), kiln.TensorXf(x, (1000,)), None, length=3)
        lap(u)
        kiln.custom(Slow, x)

for t, a in [(frozen_calls, (f,)), (frozen_calls, (g,)), (evaluations, ()), (callbacks, ()), (callbacks, ())]:
    threading.Thread(target=t, args=a, daemon=True).start()
time.sleep(0.3)
print("main exiting", flush=True)
"""


def test_daemon_threads_inside_kiln_when_the_interpreter_exits(tmp_path):
    # CPython ends a daemon thread that takes the GIL back during its teardown by unwinding it
    # from there; inside kiln's native frames that aborted the process (frozen calls about 1 run
    # in 2, Python callbacks of if_stmt/scan/stencil most runs). The module now holds the engine
    # at exit, so those threads park instead, and a later atexit handler still uses kiln.
    # A thread waiting for the evaluation lock could still see its wait end once (the lock
    # passing through it to the exiting thread) and take the GIL back: about 1 run in 100
    # aborted, more often with a cold kernel cache and the machine busy. So 24 runs, 4 at a
    # time, each with a cache of its own.
    import os
    import subprocess
    import sys

    def start(run):
        env = dict(os.environ, PYTHONFAULTHANDLER="1", KILN_CACHE_DIR=str(tmp_path / f"cache{run}"))
        return subprocess.Popen([sys.executable, "-c", _DAEMONS_AT_EXIT], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    for first in range(0, 24, 4):
        runs = [(run, start(run)) for run in range(first, first + 4)]
        for run, p in runs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"run {run}: exit status {p.returncode}\n{out}\n{err[-3000:]}"
            assert out.split() == ["main", "exiting", "late", "45.0"], out + err[-3000:]
            assert not err.strip(), err[-3000:]  # no fatal error, no thread died


_KILN_IN_A_LATER_ATEXIT_HANDLER = """
import atexit

def late():
    import kiln
    x = kiln.arange(kiln.Float32, 10) * 2
    kiln.eval(x)
    print("late", float(kiln.sum(x)[0]), flush=True)

atexit.register(late)    # registered first, so it runs after kiln's own exit hook
import kiln
print("main", flush=True)
"""


def test_kiln_still_works_on_the_exiting_thread_after_its_exit_hook():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _KILN_IN_A_LATER_ATEXIT_HANDLER], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["main", "late", "90.0"], p.stdout + p.stderr[-3000:]
