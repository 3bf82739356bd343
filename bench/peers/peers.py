#!/usr/bin/env python3
"""Side-by-side peer timings for kiln's workloads: NumPy, Numba, JAX (CPU) and Dr.Jit (LLVM), and
PyTensor (C backend and mode NUMBA) on the scans.

Every peer runs the same workloads on the same inputs (built once with NumPy and copied into each
peer's arrays) with the same f32/u32 arithmetic. Each workload is timed as the best of N calls
after one warm-up call (which includes compilation); a call counts as finished only when its result
is computed (JAX: ``block_until_ready``; Dr.Jit: ``dr.eval`` + ``dr.sync_thread`` or reading a
value back; Numba and NumPy return NumPy arrays). The exception is ``cold compile 200 ops``: every
call there builds and compiles a kernel never seen before, and the figure is the best such first
call (NumPy, which compiles nothing, has no figure).

Each peer runs in a child process of its own, so that one peer's thread pool does not load the
machine while another is timed and so that a peer that crashes cannot take the others with it. A
peer that cannot be imported, or a workload that fails, is reported as ``peer X: skipped (...)``
and the run carries on.

    python peers.py [--json PATH] [--reps N] [--peers numpy,jax] [--workloads collatz,switch]

prints a table of milliseconds (workload x peer) and writes ``{workload: {peer: ms}}`` to PATH.

    python peers.py --merge KILN_OUTPUT --json PATH

prints the merged table: kiln's figures parsed (best effort) from a saved ``bench_report`` output,
each peer's figure from PATH, and the ratio peer/kiln (> 1: kiln faster).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import random
import tempfile
import time
import traceback

PEERS = ["numpy", "numba", "jax", "drjit", "pytensor", "pytensor-numba"]

# -------------------------------------------------------------------------------------------------
# Workloads (names as in the table and the JSON)

SAXPY = "saxpy 10M f32"
CHAIN = "fused chain 10M"
MONTE = "monte carlo 10M"
LAUNCH = "cached launch n=1024 x1000"
COMPILE = "cold compile 200 ops"
STENCIL = "5-point stencil 4096^2"
LAPLACIAN = "5-point laplacian 4096^2"
BLUR = "3x3 box blur 4096^2"
COLLATZ = "collatz 1M"
LOOP = "loop 1000x10000"
SWITCH = "switch 4 targets 1M"
# Scans (loops with a recurrence). final: x = x * 0.999 + 0.001 for 1000 steps over 10 000 lanes
# from x0 = 0.5, the final x only; stacked: the same with every step kept ([1000, 10000], row t =
# x after t + 1 steps); rnn: h_t = tanh(h_{t-1} @ W.T + x_t @ U.T + b), h_0 = 0, every h_t kept
# ([200, 64, 256]). The rnn row with "x@U.T hoisted" is the same recurrence with x_t @ U.T pushed
# out of the loop as one matmul over all steps (a variant, timed against kiln's rnn row).
SCAN_FINAL = "scan final 1000x10000"
SCAN_STACKED = "scan stacked 1000x10000"
SCAN_RNN = "scan rnn 200x64x256"
SCAN_RNN_HOISTED = "scan rnn 200x64x256 x@U.T hoisted"
# Automatic differentiation: the gradient of sum(tanh(x^2+1) * exp(-x) + sqrt(|x|)) over 10M f32
# (the fused chain's function), on points of (-2, 2) half a step off the grid so that no lane is 0
# (bench_report's `ad gradient` row uses the same points). JAX: jit(grad(f)); Dr.Jit: enable_grad,
# the sum, dr.backward, dr.grad; NumPy: the derivative written by hand.
GRAD = "ad gradient 10M"
# Reverse mode through loops, on the data of bench_report's `ad loop`, `ad rnn` and `ad heat` rows.
# loop: x <- x * a + 0.001 for 1000 steps over 10 000 lanes from x = 1, with a_k = 0.999 +
# (k % 7) * 1e-4, the gradient of sum(x_T) w.r.t. a; rnn: scan rnn's RNN, the gradients of
# sum_t sum(h_t^2) w.r.t. W, U and b; heat: 100 steps of u + 0.2 * lap(u) on a 1024^2 grid (the
# 5-point laplacian on the interior, the border held) from the stencil grid
# ((k * 7919) % 1000) * 0.001, the gradient of sum((u_T - 0.25)^2) w.r.t. u_0. Each peer also
# times the forward alone (the loss).
AD_LOOP = "ad loop 1000x10000"
AD_RNN = "ad rnn 200x64x256"
AD_HEAT = "ad heat 1024^2 x 100 steps"
WORKLOADS = [SAXPY, CHAIN, MONTE, LAUNCH, COMPILE, STENCIL, LAPLACIAN, BLUR, COLLATZ, LOOP,
             SWITCH, SCAN_FINAL, SCAN_STACKED, SCAN_RNN, SCAN_RNN_HOISTED, GRAD, AD_LOOP, AD_RNN,
             AD_HEAT]
# The stencil workloads written as stencils (kiln: `kiln::stencil`; Numba: `@numba.stencil`), on
# bench_report's grid ((k * 7919) % 1000) * 0.001, and the scans. Their check is each peer's largest
# difference from a float64 NumPy reference: relative to the reference's largest magnitude ("rel")
# or absolute ("abs"), within the tolerance.
STENCIL_TOL = 1e-4
REF_CHECKS = {
    LAPLACIAN: ("rel", STENCIL_TOL),
    BLUR: ("rel", STENCIL_TOL),
    SCAN_FINAL: ("rel", 1e-4),
    SCAN_STACKED: ("rel", 1e-4),
    SCAN_RNN: ("abs", 1e-3),
    SCAN_RNN_HOISTED: ("abs", 1e-3),
    GRAD: ("rel", 1e-4),
    AD_LOOP: ("rel", 1e-3),
    AD_RNN: ("rel", 1e-2),  # each gradient against its own largest magnitude
    AD_HEAT: ("rel", 1e-3),
}
DEFAULT_REPS = 3
# Workloads of a few milliseconds or less: timed at least SMALL_REPS times (noise matters more).
SMALL = {LAUNCH, LOOP, SWITCH, SCAN_FINAL}
SMALL_REPS = 10
# cold compile: every call compiles a new kernel (Numba takes ~0.3 s a kernel), so it is timed
# COMPILE_REPS times, or --reps times when --reps is below the default.
COMPILE_REPS = 5

N_BIG = 10_000_000  # saxpy, fused chain, monte carlo
N_LAUNCH = 1024  # cached launch: lanes per call
LAUNCHES = 1000  # cached launch: calls per timed run (the figure is their total)
SIDE = 4096  # stencil
N_COLLATZ = 1_000_000
LOOP_LANES = 10_000
LOOP_STEPS = 1000
N_SWITCH = 1_000_000
SAXPY_A = 2.0
COMPILE_OPS = 200  # cold compile: traced ops per kernel
COMPILE_N = 1024  # cold compile: lanes
SCAN_STEPS = 1000  # scan final / stacked
SCAN_LANES = 10_000
SCAN_X0 = 0.5
RNN_T, RNN_B, RNN_H = 200, 64, 256  # scan rnn: steps, batch, hidden
AD_LOOP_N, AD_LOOP_STEPS = 10_000, 1000
HEAT_N, HEAT_STEPS, HEAT_TARGET = 1024, 100, 0.25

# Expected values for the checks printed after the table.
COLLATZ_STEP_SUM = 131_435_239  # sum of steps with u32 wrap-around (109 lanes overflow u32)
SPHERE = 4.0 * math.pi / 3.0


def inputs():
    """The inputs shared by every peer, as NumPy arrays (f32 / u32)."""
    import numpy as np

    i = np.arange(N_BIG, dtype=np.int64)
    sx = ((i % 1000) * 0.001).astype(np.float32)
    sy = ((i % 777) * 0.5).astype(np.float32)
    del i
    k = np.arange(SIDE * SIDE, dtype=np.int64)
    grid = ((k % 1000) * 1e-3).astype(np.float32).reshape(SIDE, SIDE)
    # bench_report's stencil_api_row grid, with its f32 arithmetic
    sgrid = (((k * 7919) % 1000).astype(np.float32) * np.float32(0.001)).reshape(SIDE, SIDE)
    del k
    wx = np.linspace(0.0, 1.0, N_SWITCH, dtype=np.float32)
    # ad loop's a and ad heat's u_0: bench_report's, with its f32 arithmetic
    ad_loop_a = np.float32(0.999) + (np.arange(AD_LOOP_N) % 7).astype(np.float32) * np.float32(1e-4)
    h = np.arange(HEAT_N * HEAT_N, dtype=np.int64)
    heat_u0 = (((h * 7919) % 1000).astype(np.float32) * np.float32(0.001)).reshape(HEAT_N, HEAT_N)
    return {
        "scan_x0": np.full(SCAN_LANES, SCAN_X0, dtype=np.float32),
        "rnn_w": rnn_data(RNN_H * RNN_H, 0.1).reshape(RNN_H, RNN_H),
        "rnn_u": rnn_data(RNN_H * RNN_H, 0.1).reshape(RNN_H, RNN_H),
        "rnn_b": rnn_data(RNN_H, 0.1),
        "rnn_xs": rnn_data(RNN_T * RNN_B * RNN_H, 1.0).reshape(RNN_T, RNN_B, RNN_H),
        "compile_x": np.linspace(0.5, 1.0, COMPILE_N, dtype=np.float32),
        "saxpy_x": sx,
        "saxpy_y": sy,
        "chain_x": np.linspace(-2.0, 2.0, N_BIG, dtype=np.float32),
        "grad_x": ((np.arange(N_BIG) + 0.5) * (4.0 / N_BIG) - 2.0).astype(np.float32),
        "ad_loop_a": ad_loop_a,
        "heat_u0": heat_u0,
        "launch_x": np.arange(N_LAUNCH, dtype=np.float32),
        "grid": grid,
        "sgrid": sgrid,
        "collatz_x": np.arange(1, N_COLLATZ + 1, dtype=np.uint32),
        "loop_x": np.linspace(0.0, 1.0, LOOP_LANES, dtype=np.float32),
        "switch_idx": (np.arange(N_SWITCH, dtype=np.uint32) % np.uint32(4)).astype(np.uint32),
        "switch_x": wx,
        "switch_y": (np.float32(1.0) - wx).astype(np.float32),
    }


def rnn_data(n, s):
    """scan rnn's data (kiln's bench uses the same): ((i * 2654435761 % 1000) / 1000 - 0.5) * s,
    computed in float64 and cast to f32."""
    import numpy as np

    i = np.arange(n, dtype=np.int64)
    return ((((i * 2654435761) % 1000) / 1000.0 - 0.5) * s).astype(np.float32)


def timed_calls(workload, reps):
    """How many timed calls `workload` gets after its warm-up call."""
    if workload in SMALL:
        return max(reps, SMALL_REPS)
    if workload == COMPILE:
        return COMPILE_REPS if reps >= DEFAULT_REPS else reps
    return reps


# cold compile: the arithmetic of bench_report's `row_compile`. x = linspace(0.5, 1, 1024); y = x;
# op i is y*c, y+x, y-c, y*x for i % 4 = 0, 1, 2, 3, with c = 1.25 + i/1024 + (sample + salt)/64:
# every sample (one call) gets constants of its own, and the salt (one per process) keeps a kernel
# cache on disk (Dr.Jit has one) from having seen them in an earlier run.
COMPILE_SALT = random.random()


def compile_consts(sample):
    """The f32 constants of cold-compile sample `sample` (one per op; ops 1 and 3 ignore theirs)."""
    import numpy as np

    i = np.arange(COMPILE_OPS, dtype=np.float64)
    return (1.25 + i / 1024.0 + (sample + COMPILE_SALT) / 64.0).astype(np.float32)


def compile_step(i, y, x, c):
    """Op i of the cold-compile chain (for NumPy, JAX and Dr.Jit arrays alike)."""
    k = i % 4
    if k == 0:
        return y * c
    if k == 1:
        return y + x
    if k == 2:
        return y - c
    return y * x


def compile_check(x):
    """to_numpy for cold compile: the relative difference between sum|y| and NumPy's, computed in
    f32 with the same constants (run() returns (y, consts))."""
    import numpy as np

    def to_numpy(r):
        y, cs = r
        ref = x.copy()
        for i, c in enumerate(cs):
            ref = compile_step(i, ref, x, c)  # f32 array op f32 scalar: f32
        got = float(np.abs(np.asarray(y, dtype=np.float64)).sum())
        want = float(np.abs(ref.astype(np.float64)).sum())
        return abs(got - want) / max(want, 1e-30)

    return to_numpy


def stencil_reference(workload, g):
    """The laplacian or the box blur of `g` in float64 (border 0), as NumPy slicing computes it."""
    import numpy as np

    a = g.astype(np.float64)
    out = np.zeros_like(a)
    if workload == LAPLACIAN:
        out[1:-1, 1:-1] = (a[1:-1, 2:] + a[1:-1, :-2] + a[2:, 1:-1] + a[:-2, 1:-1]
                           - 4.0 * a[1:-1, 1:-1])
    else:
        s = sum(a[1 + di:SIDE - 1 + di, 1 + dj:SIDE - 1 + dj]
                for di in (-1, 0, 1) for dj in (-1, 0, 1))
        out[1:-1, 1:-1] = s * (1.0 / 9.0)
    return out


def ref_diff(workload, got, ref):
    """The check of a workload in REF_CHECKS: the largest |got - ref| ("abs"), or that over the
    largest |ref| ("rel"); inf for a result of another size (or one that is not finite)."""
    import numpy as np

    got = np.asarray(got, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    if got.size != ref.size:
        return math.inf
    diff = float(np.abs(got - ref).max())
    if not math.isfinite(diff):
        return math.inf
    if REF_CHECKS[workload][0] == "rel":
        diff /= max(float(np.abs(ref).max()), 1e-30)
    return diff


def stencil_check(workload, g):
    """to_numpy for the stencil workloads: the largest |result - reference| over the largest
    |reference| (float64 reference, border 0 included); inf for a result of another shape."""

    def to_numpy(r):
        return ref_diff(workload, r, stencil_reference(workload, g))

    return to_numpy


def scan_reference(workload, d):
    """The scans in float64 (the same recurrence, from the same f32 inputs)."""
    import numpy as np

    if workload in (SCAN_FINAL, SCAN_STACKED):
        x = d["scan_x0"].astype(np.float64)
        rows = []
        for _ in range(SCAN_STEPS):
            x = x * 0.999 + 0.001
            if workload == SCAN_STACKED:
                rows.append(x)
        return np.stack(rows) if rows else x
    w, u, b = (d[k].astype(np.float64) for k in ("rnn_w", "rnn_u", "rnn_b"))
    h = np.zeros((RNN_B, RNN_H))
    out = np.empty((RNN_T, RNN_B, RNN_H))
    for t in range(RNN_T):
        h = np.tanh(h @ w.T + d["rnn_xs"][t].astype(np.float64) @ u.T + b)
        out[t] = h
    return out


def scan_check(workload, d):
    """to_numpy for the scans: ref_diff against scan_reference (computed once, on first use)."""
    ref = []

    def to_numpy(r):
        if not ref:
            ref.append(scan_reference(workload, d))
        return ref_diff(workload, r, ref[0])

    return to_numpy


def grad_reference(x):
    """d/dx of tanh(x^2+1) * exp(-x) + sqrt(|x|), by hand, in float64."""
    import numpy as np

    x = x.astype(np.float64)
    t, e = np.tanh(x * x + 1.0), np.exp(-x)
    return (1.0 - t * t) * 2.0 * x * e - t * e + np.sign(x) * 0.5 / np.sqrt(np.abs(x))


def grad_check(d):
    """to_numpy for the gradient: ref_diff against grad_reference (computed once)."""
    ref = []

    def to_numpy(r):
        if not ref:
            ref.append(grad_reference(d["grad_x"]))
        return ref_diff(GRAD, r, ref[0])

    return to_numpy


def ad_loop_reference(a):
    """ad loop's gradient in closed form, in float64: x_T = a^T + 0.001 (a^T - 1) / (a - 1) from
    x_0 = 1 (every a_k is below 1), differentiated by hand."""
    import numpy as np

    a, t = a.astype(np.float64), AD_LOOP_STEPS
    at1 = a ** (t - 1)
    return t * at1 + 0.001 * (t * at1 * (a - 1) - (a ** t - 1)) / (a - 1) ** 2


def rnn_loss_grads(w, u, b, xs, grads=True):
    """ad rnn by hand in NumPy, in the inputs' dtype: the loss sum_t sum(h_t^2), or (grads) its
    gradients w.r.t. W, U and b, by backpropagation through time."""
    import numpy as np

    hs = np.zeros((RNN_T + 1, RNN_B, RNN_H), dtype=w.dtype)  # hs[t + 1] = h_t, hs[0] = h_0 = 0
    for t in range(RNN_T):
        hs[t + 1] = np.tanh(hs[t] @ w.T + xs[t] @ u.T + b)
    if not grads:
        return (hs[1:] * hs[1:]).sum()
    ga = np.empty((RNN_T, RNN_B, RNN_H), dtype=w.dtype)  # d loss / d (step t's pre-activation)
    gh = np.zeros((RNN_B, RNN_H), dtype=w.dtype)  # d loss / d h_t through the later steps
    for t in reversed(range(RNN_T)):
        h = hs[t + 1]
        ga[t] = (gh + 2 * h) * (1 - h * h)
        gh = ga[t] @ w
    # the weights' terms summed over the steps (and the batch) at once: one matmul each
    flat = lambda a: a.reshape(RNN_T * RNN_B, RNN_H)  # noqa: E731
    return flat(ga).T @ flat(hs[:-1]), flat(ga).T @ flat(xs), ga.sum(axis=(0, 1))


def heat_loss_grad(u0, grads=True):
    """ad heat by hand in NumPy, in u0's dtype: the loss sum((u_T - 0.25)^2), or (grads) its
    gradient w.r.t. u_0. A step is linear, so the backward pass applies its transpose: each
    interior cell's cotangent, times 0.2, goes to its four neighbours, and times -0.8 to itself."""
    u = u0.copy()
    for _ in range(HEAT_STEPS):
        # (the right-hand side is computed before it is added: every tap reads the previous u)
        u[1:-1, 1:-1] += 0.2 * (u[1:-1, 2:] + u[1:-1, :-2] + u[2:, 1:-1] + u[:-2, 1:-1]
                                - 4 * u[1:-1, 1:-1])
    r = u - HEAT_TARGET
    if not grads:
        return (r * r).sum()
    g = 2 * r
    for _ in range(HEAT_STEPS):
        c = 0.2 * g[1:-1, 1:-1]
        g[1:-1, 2:] += c
        g[1:-1, :-2] += c
        g[2:, 1:-1] += c
        g[:-2, 1:-1] += c
        g[1:-1, 1:-1] -= 4 * c
    return g


def ad_check(workload, d):
    """to_numpy for ad loop, ad rnn and ad heat: ref_diff against the float64 reference (computed
    once); for ad rnn, the worst of its three gradients, each against its own reference."""
    import numpy as np

    ref = []

    def reference():
        if workload == AD_LOOP:
            return ad_loop_reference(d["ad_loop_a"])
        if workload == AD_RNN:
            return rnn_loss_grads(*(d[k].astype(np.float64)
                                    for k in ("rnn_w", "rnn_u", "rnn_b", "rnn_xs")))
        return heat_loss_grad(d["heat_u0"].astype(np.float64))

    def to_numpy(r):
        if not ref:
            ref.append(reference())
        if workload == AD_RNN:
            return max(ref_diff(workload, g, want) for g, want in zip(r, ref[0]))
        return ref_diff(workload, r, ref[0])

    return to_numpy


class Timed:
    """A run's result with its own timing (seconds), for runs whose set-up is not to be timed."""

    def __init__(self, seconds, value):
        self.seconds, self.value = seconds, value


# -------------------------------------------------------------------------------------------------
# Peers. Each returns {workload: factory}; a factory sets up (untimed) and returns (run, to_numpy):
# run() performs one complete call, to_numpy(result) gives a NumPy array or a float for the checks.
# run() may return a Timed (its timed part and its result) instead of its result; a str in place of
# a factory is the reason the peer has no such workload. The AD workloads' factories return
# (run, to_numpy, forward): forward() computes the loss alone, and is timed the same way.


def peer_numpy(d):
    import numpy as np

    a = np.float32(SAXPY_A)
    ident = lambda r: r  # noqa: E731

    def saxpy():
        x, y = d["saxpy_x"], d["saxpy_y"]
        return (lambda: a * x + y), ident

    def chain():
        x = d["chain_x"]
        return (lambda: np.tanh(x * x + 1) * np.exp(-x) + np.sqrt(np.abs(x))), ident

    def monte():
        rng = np.random.default_rng(1)

        def run():
            u = rng.random((3, N_BIG), dtype=np.float32) * np.float32(2) - np.float32(1)
            inside = np.count_nonzero(u[0] * u[0] + u[1] * u[1] + u[2] * u[2] < 1)
            return 8.0 * inside / N_BIG

        return run, ident

    def launch():
        x = d["launch_x"]

        def run():
            y = None
            for _ in range(LAUNCHES):
                y = x * 2 + 1
            return y

        return run, ident

    def stencil():
        g = d["grid"]

        def run():
            out = np.zeros_like(g)
            out[1:-1, 1:-1] = (
                g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - 4 * g[1:-1, 1:-1]
            )
            return out

        return run, ident

    def laplacian():
        g = d["sgrid"]
        f4 = np.float32(4)

        def run():
            out = np.zeros_like(g)
            out[1:-1, 1:-1] = (
                g[1:-1, 2:] + g[1:-1, :-2] + g[2:, 1:-1] + g[:-2, 1:-1] - f4 * g[1:-1, 1:-1]
            )
            return out

        return run, stencil_check(LAPLACIAN, g)

    def blur():
        g = d["sgrid"]
        ninth = np.float32(1.0 / 9.0)

        def run():
            # (NumPy reuses the expression's temporaries in place: one scratch array, not eight)
            out = np.zeros_like(g)
            out[1:-1, 1:-1] = (
                g[:-2, :-2] + g[:-2, 1:-1] + g[:-2, 2:]
                + g[1:-1, :-2] + g[1:-1, 1:-1] + g[1:-1, 2:]
                + g[2:, :-2] + g[2:, 1:-1] + g[2:, 2:]
            ) * ninth
            return out

        return run, stencil_check(BLUR, g)

    def collatz():
        x0 = d["collatz_x"]
        one, three = np.uint32(1), np.uint32(3)

        def run():
            # masked vector loop over the lanes still running (compacted each step)
            x = x0.copy()
            n = np.zeros_like(x)
            live = np.nonzero(x != one)[0]
            while live.size:
                v = x[live]
                v = np.where((v & one) == 0, v >> one, three * v + one)
                x[live] = v
                n[live] += one
                live = live[v != one]
            return n

        return run, ident

    def loop():
        x0 = d["loop_x"]

        def run():
            x = x0
            for _ in range(LOOP_STEPS):
                x = x * np.float32(0.999) + np.float32(0.001)
            return x

        return run, ident

    def switch():
        idx, x, y = d["switch_idx"], d["switch_x"], d["switch_y"]

        def run():
            return np.choose(idx, [x * y, x * x * 3.25, x + y, np.sqrt(x * x + y * y)])

        return run, ident

    decay, offset = np.float32(0.999), np.float32(0.001)

    def scan_final():
        x0 = d["scan_x0"]

        def run():
            x = x0
            for _ in range(SCAN_STEPS):
                x = x * decay + offset
            return x

        return run, scan_check(SCAN_FINAL, d)

    def scan_stacked():
        x0 = d["scan_x0"]

        def run():
            out = np.empty((SCAN_STEPS, x0.size), dtype=np.float32)
            x = x0
            for t in range(SCAN_STEPS):
                x = out[t] = x * decay + offset
            return out

        return run, scan_check(SCAN_STACKED, d)

    # scan rnn: a Python loop of two matmuls a step; hoisted: x_t @ U.T for every step first, as
    # one [T*B, H] x [H, H] matmul, and one matmul a step in the loop
    def scan_rnn(hoisted):
        w, u, b, xs = d["rnn_w"], d["rnn_u"], d["rnn_b"], d["rnn_xs"]

        def run():
            out = np.empty((RNN_T, RNN_B, RNN_H), dtype=np.float32)
            h = np.zeros((RNN_B, RNN_H), dtype=np.float32)
            xu = (xs.reshape(RNN_T * RNN_B, RNN_H) @ u.T).reshape(RNN_T, RNN_B, RNN_H) \
                if hoisted else None
            for t in range(RNN_T):
                a = h @ w.T + (xu[t] if hoisted else xs[t] @ u.T) + b
                h = out[t] = np.tanh(a)
            return out

        return run, scan_check(SCAN_RNN_HOISTED if hoisted else SCAN_RNN, d)

    def grad():
        x = d["grad_x"]
        half = np.float32(0.5)

        def run():
            # f32 throughout (Python scalars do not widen NumPy 2's f32 arrays)
            t, e = np.tanh(x * x + 1), np.exp(-x)
            return (1 - t * t) * (2 * x) * e - t * e + np.sign(x) * half / np.sqrt(np.abs(x))

        return run, grad_check(d)

    # reverse mode by hand, in f32: ad loop keeps every step's x (the tape) for its backward loop;
    # ad rnn and ad heat run the float64 references' code on the f32 inputs
    def ad_loop():
        a = d["ad_loop_a"]

        def run():
            xs = np.empty((AD_LOOP_STEPS, a.size), dtype=np.float32)  # xs[t]: x before step t
            x = np.ones_like(a)
            for t in range(AD_LOOP_STEPS):
                xs[t] = x
                x = x * a + offset
            ga, gx = np.zeros_like(a), np.ones_like(a)  # gx: d loss / d x after step t
            for t in reversed(range(AD_LOOP_STEPS)):
                ga += gx * xs[t]
                gx = gx * a
            return ga

        def forward():
            x = np.ones_like(a)
            for _ in range(AD_LOOP_STEPS):
                x = x * a + offset
            return x.sum()

        return run, ad_check(AD_LOOP, d), forward

    def ad_rnn():
        args = [d[k] for k in ("rnn_w", "rnn_u", "rnn_b", "rnn_xs")]
        return ((lambda: rnn_loss_grads(*args)), ad_check(AD_RNN, d),
                lambda: rnn_loss_grads(*args, grads=False))

    def ad_heat():
        u0 = d["heat_u0"]
        return ((lambda: heat_loss_grad(u0)), ad_check(AD_HEAT, d),
                lambda: heat_loss_grad(u0, grads=False))

    return {SAXPY: saxpy, CHAIN: chain, MONTE: monte, LAUNCH: launch, STENCIL: stencil,
            LAPLACIAN: laplacian, BLUR: blur, COLLATZ: collatz, LOOP: loop, SWITCH: switch,
            COMPILE: "NumPy compiles no kernels", SCAN_FINAL: scan_final,
            SCAN_STACKED: scan_stacked, SCAN_RNN: lambda: scan_rnn(False),
            SCAN_RNN_HOISTED: lambda: scan_rnn(True), GRAD: grad, AD_LOOP: ad_loop,
            AD_RNN: ad_rnn, AD_HEAT: ad_heat}


def peer_numba(d):
    import numba
    import numpy as np
    from numba import njit, prange

    # Numba promotes Python float literals to f64 and small integers to 64 bits: the constants are
    # NumPy scalars (frozen as typed globals) and u32 results are cast back, so that the arithmetic
    # is f32 / u32 (with wrap-around) as in the other peers.
    F0, F1, F2, F4 = np.float32(0), np.float32(1), np.float32(2), np.float32(4)
    FA = np.float32(SAXPY_A)
    F325 = np.float32(3.25)
    F9 = np.float32(1.0 / 9.0)
    DECAY, OFFSET = np.float32(0.999), np.float32(0.001)
    U0, U1, U2, U3 = np.uint32(0), np.uint32(1), np.uint32(2), np.uint32(3)
    ident = lambda r: r  # noqa: E731

    @njit(parallel=True)
    def saxpy_k(x, y):
        out = np.empty_like(x)
        for i in prange(x.size):
            out[i] = FA * x[i] + y[i]
        return out

    @njit(parallel=True, error_model="numpy")
    def chain_k(x):
        out = np.empty_like(x)
        for i in prange(x.size):
            v = x[i]
            out[i] = np.tanh(v * v + F1) * np.exp(-v) + np.sqrt(np.abs(v))
        return out

    @njit(parallel=True)
    def monte_k(n):
        inside = 0
        for _ in prange(n):
            a = np.float32(np.random.random()) * F2 - F1
            b = np.float32(np.random.random()) * F2 - F1
            c = np.float32(np.random.random()) * F2 - F1
            if a * a + b * b + c * c < F1:
                inside += 1
        return 8.0 * inside / n

    # a small kernel called 1000 times: serial (a parallel region for 1024 lanes only adds the
    # thread pool's wake-up to every call)
    @njit
    def launch_k(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = x[i] * F2 + F1
        return out

    @njit(parallel=True)
    def stencil_k(g):
        h, w = g.shape
        out = np.empty_like(g)
        for i in prange(h):
            if i == 0 or i == h - 1:
                for j in range(w):
                    out[i, j] = F0
            else:
                out[i, 0] = F0
                for j in range(1, w - 1):
                    out[i, j] = (g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1]
                                 - F4 * g[i, j])
                out[i, w - 1] = F0
        return out

    # The stencil workloads as Numba's own stencils: `@numba.stencil` kernels (border: cval 0) called
    # from a parallel njit function, which turns them into parallel loops.
    @numba.stencil
    def laplacian_s(a):
        return a[0, 1] + a[0, -1] + a[1, 0] + a[-1, 0] - F4 * a[0, 0]

    @numba.stencil
    def blur_s(a):
        return (a[-1, -1] + a[-1, 0] + a[-1, 1] + a[0, -1] + a[0, 0] + a[0, 1]
                + a[1, -1] + a[1, 0] + a[1, 1]) * F9

    @njit(parallel=True)
    def laplacian_k(g):
        return laplacian_s(g)

    @njit(parallel=True)
    def blur_k(g):
        return blur_s(g)

    @njit(parallel=True)
    def collatz_k(x):
        out = np.empty_like(x)
        for i in prange(x.size):
            v = x[i]
            n = U0
            while v != U1:
                if (v & U1) == U0:
                    v = np.uint32(v >> U1)
                else:
                    v = np.uint32(U3 * v + U1)
                n = np.uint32(n + U1)
            out[i] = n
        return out

    @njit(parallel=True)
    def loop_k(x0, steps):
        out = np.empty_like(x0)
        for i in prange(x0.size):
            v = x0[i]
            for _ in range(steps):
                v = v * DECAY + OFFSET
            out[i] = v
        return out

    @njit(parallel=True)
    def switch_k(idx, x, y):
        out = np.empty_like(x)
        for i in prange(x.size):
            k = idx[i]
            a, b = x[i], y[i]
            if k == U0:
                out[i] = a * b
            elif k == U1:
                out[i] = a * a * F325
            elif k == U2:
                out[i] = a + b
            else:
                out[i] = np.sqrt(a * a + b * b)
        return out

    # scan final / stacked: lanes in blocks of 64, one block per prange iteration, the steps inside
    # and the block's lanes innermost (a vectorisable inner loop; stacked: each step writes a
    # contiguous piece of its row)
    @njit(parallel=True)
    def scan_final_k(x0, steps):
        n = x0.size
        out = np.empty_like(x0)
        for blk in prange((n + 63) // 64):
            lo = blk * 64
            hi = min(lo + 64, n)
            v = x0[lo:hi].copy()
            for _ in range(steps):
                for j in range(hi - lo):
                    v[j] = v[j] * DECAY + OFFSET
            out[lo:hi] = v
        return out

    @njit(parallel=True)
    def scan_stacked_k(x0, steps):
        n = x0.size
        out = np.empty((steps, n), dtype=np.float32)
        for blk in prange((n + 63) // 64):
            lo = blk * 64
            hi = min(lo + 64, n)
            v = x0[lo:hi].copy()
            for t in range(steps):
                for j in range(hi - lo):
                    v[j] = v[j] * DECAY + OFFSET
                    out[t, lo + j] = v[j]
        return out

    # scan rnn: np.dot (BLAS, through SciPy) inside njit; wt, ut are W.T and U.T made contiguous
    # once, outside the timed call. Plain njit, not parallel=True: BLAS has threads of its own, and
    # Numba's parallel regions between the matmuls (tanh over 64x256) only made the two thread
    # pools fight over the cores (~10x slower on a 2-core machine).
    @njit
    def scan_rnn_k(wt, ut, b, xs, hoisted):
        steps, batch, hid = xs.shape
        out = np.empty((steps, batch, hid), dtype=np.float32)
        h = np.zeros((batch, hid), dtype=np.float32)
        xu = np.empty((1, 1, 1), dtype=np.float32)
        if hoisted:
            xu = np.dot(xs.reshape(steps * batch, hid), ut).reshape(steps, batch, hid)
        for t in range(steps):
            if hoisted:
                a = np.dot(h, wt) + xu[t]
            else:
                a = np.dot(h, wt) + np.dot(xs[t], ut)
            h = np.tanh(a + b)
            out[t] = h
        return out

    def scan_rnn(hoisted):
        wt = np.ascontiguousarray(d["rnn_w"].T)
        ut = np.ascontiguousarray(d["rnn_u"].T)
        b, xs = d["rnn_b"], d["rnn_xs"]
        return ((lambda: scan_rnn_k(wt, ut, b, xs, hoisted)),
                scan_check(SCAN_RNN_HOISTED if hoisted else SCAN_RNN, d))

    def launch_run(x):
        def run():
            y = None
            for _ in range(LAUNCHES):
                y = launch_k(x)
            return y

        return run

    def compile_():
        # A new function per sample, from generated source with its constants as f32 globals
        # (Numba freezes global NumPy scalars into the code as constants, and compiles each new
        # function afresh: no cache=True, so nothing on disk either). Plain njit, not parallel=True:
        # the parallel pipeline (parfors, gufunc wrapper) would add its own compile time, and a
        # 1024-lane kernel runs serially anyway (as launch_k does).
        x = d["compile_x"]
        ops = ["y = y * C{i}", "y = y + v", "y = y - C{i}", "y = y * v"]
        body = "\n".join("        " + ops[i % 4].format(i=i) for i in range(COMPILE_OPS))
        src = ("def kern(x):\n    out = np.empty_like(x)\n    for j in range(x.size):\n"
               f"        v = x[j]\n        y = v\n{body}\n        out[j] = y\n    return out\n")
        sample = [0]

        def run():
            sample[0] += 1
            cs = compile_consts(sample[0])
            ns = {"np": np}
            ns.update({f"C{i}": cs[i] for i in range(COMPILE_OPS)})
            exec(src, ns)  # noqa: S102
            kern = njit(ns["kern"])
            t0 = time.perf_counter()
            y = kern(x)  # the first call: type inference + LLVM + run
            return Timed(time.perf_counter() - t0, (y, cs))

        return run, compile_check(x)

    print(f"  numba {numba.__version__}: {numba.get_num_threads()} threads", flush=True)
    return {
        SAXPY: lambda: ((lambda: saxpy_k(d["saxpy_x"], d["saxpy_y"])), ident),
        CHAIN: lambda: ((lambda: chain_k(d["chain_x"])), ident),
        MONTE: lambda: ((lambda: monte_k(N_BIG)), ident),
        LAUNCH: lambda: (launch_run(d["launch_x"]), ident),
        STENCIL: lambda: ((lambda: stencil_k(d["grid"])), ident),
        LAPLACIAN: lambda: ((lambda: laplacian_k(d["sgrid"])),
                            stencil_check(LAPLACIAN, d["sgrid"])),
        BLUR: lambda: ((lambda: blur_k(d["sgrid"])), stencil_check(BLUR, d["sgrid"])),
        COLLATZ: lambda: ((lambda: collatz_k(d["collatz_x"])), ident),
        LOOP: lambda: ((lambda: loop_k(d["loop_x"], LOOP_STEPS)), ident),
        SWITCH: lambda: ((lambda: switch_k(d["switch_idx"], d["switch_x"], d["switch_y"])), ident),
        COMPILE: compile_,
        SCAN_FINAL: lambda: ((lambda: scan_final_k(d["scan_x0"], SCAN_STEPS)),
                             scan_check(SCAN_FINAL, d)),
        SCAN_STACKED: lambda: ((lambda: scan_stacked_k(d["scan_x0"], SCAN_STEPS)),
                               scan_check(SCAN_STACKED, d)),
        SCAN_RNN: lambda: scan_rnn(False),
        SCAN_RNN_HOISTED: lambda: scan_rnn(True),
        **dict.fromkeys((GRAD, AD_LOOP, AD_RNN, AD_HEAT),
                        "Numba has no automatic differentiation"),
    }


def peer_jax(d):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    print(f"  jax {jax.__version__}: devices {jax.devices()}", flush=True)
    to_np = lambda r: np.asarray(r)  # noqa: E731

    def put(name):
        return jax.device_put(d[name]).block_until_ready()

    def saxpy():
        x, y = put("saxpy_x"), put("saxpy_y")
        f = jax.jit(lambda x, y: SAXPY_A * x + y)
        return (lambda: f(x, y).block_until_ready()), to_np

    def chain():
        x = put("chain_x")
        f = jax.jit(lambda x: jnp.tanh(x * x + 1) * jnp.exp(-x) + jnp.sqrt(jnp.abs(x)))
        return (lambda: f(x).block_until_ready()), to_np

    def monte():
        @jax.jit
        def f(key):
            u = jax.random.uniform(key, (3, N_BIG), jnp.float32, -1.0, 1.0)
            inside = jnp.sum((u[0] * u[0] + u[1] * u[1] + u[2] * u[2] < 1).astype(jnp.int32))
            return 8.0 * inside / N_BIG

        key = jax.random.PRNGKey(1)
        return (lambda: f(key).block_until_ready()), float

    def launch():
        x = put("launch_x")
        f = jax.jit(lambda x: x * 2 + 1)

        def run():
            y = None
            for _ in range(LAUNCHES):
                y = f(x).block_until_ready()
            return y

        return run, to_np

    def stencil():
        g = put("grid")

        @jax.jit
        def f(a):
            inner = a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4 * a[1:-1, 1:-1]
            return jnp.pad(inner, 1)

        return (lambda: f(g).block_until_ready()), to_np

    def laplacian():
        g = put("sgrid")

        @jax.jit
        def f(a):
            inner = a[1:-1, 2:] + a[1:-1, :-2] + a[2:, 1:-1] + a[:-2, 1:-1] - 4 * a[1:-1, 1:-1]
            return jnp.pad(inner, 1)

        return (lambda: f(g).block_until_ready()), stencil_check(LAPLACIAN, d["sgrid"])

    def blur():
        g = put("sgrid")
        h, w = d["sgrid"].shape

        @jax.jit
        def f(a):
            s = sum(a[1 + di:h - 1 + di, 1 + dj:w - 1 + dj]
                    for di in (-1, 0, 1) for dj in (-1, 0, 1))
            return jnp.pad(s * (1.0 / 9.0), 1)

        return (lambda: f(g).block_until_ready()), stencil_check(BLUR, d["sgrid"])

    def collatz():
        x = put("collatz_x")

        @jax.jit
        def f(x):
            # one while loop over the whole vector: runs until every lane has reached 1, lanes that
            # are done are masked (keep their value and their count)
            def cond(s):
                return jnp.any(s[0] != 1)

            def body(s):
                v, n = s
                live = v != 1
                nv = jnp.where((v & 1) == 0, v >> 1, 3 * v + 1)
                return jnp.where(live, nv, v), n + live.astype(jnp.uint32)

            return lax.while_loop(cond, body, (x, jnp.zeros_like(x)))[1]

        return (lambda: f(x).block_until_ready()), to_np

    def loop():
        x = put("loop_x")
        f = jax.jit(lambda x: lax.fori_loop(0, LOOP_STEPS, lambda i, v: v * 0.999 + 0.001, x))
        return (lambda: f(x).block_until_ready()), to_np

    def switch():
        idx, x, y = put("switch_idx"), put("switch_x"), put("switch_y")

        # lax.switch takes a scalar index (under vmap it becomes a select over every branch), so
        # the per-lane switch is written as that select directly: all four targets are computed
        # for every lane and jnp.select picks one.
        @jax.jit
        def f(idx, x, y):
            return jnp.select(
                [idx == 0, idx == 1, idx == 2],
                [x * y, x * x * 3.25, x + y],
                jnp.sqrt(x * x + y * y),
            )

        return (lambda: f(idx, x, y).block_until_ready()), to_np

    def compile_():
        # The constants are Python floats in the closure (weakly typed: the arithmetic stays f32)
        # and so literals in the HLO: a new function with new constants is traced and compiled
        # afresh (JAX's persistent compilation cache is off unless jax_compilation_cache_dir is
        # set). x is an argument, not a closed-over constant, so that XLA cannot fold the chain.
        x = put("compile_x")
        sample = [0]

        def run():
            sample[0] += 1
            cs = compile_consts(sample[0])
            consts = [float(c) for c in cs]

            def chain(x):
                y = x
                for i, c in enumerate(consts):
                    y = compile_step(i, y, x, c)
                return y

            f = jax.jit(chain)
            t0 = time.perf_counter()
            y = f(x).block_until_ready()  # the first call: trace + lower + XLA compile + run
            return Timed(time.perf_counter() - t0, (np.asarray(y), cs))

        return run, compile_check(d["compile_x"])

    # the scans: lax.scan under jax.jit (Python-float constants are weakly typed: f32 arithmetic)
    def scan_steps(stacked):
        x0 = put("scan_x0")

        def step(x, _):
            y = x * 0.999 + 0.001
            return y, (y if stacked else None)

        @jax.jit
        def f(x0):
            last, ys = lax.scan(step, x0, None, length=SCAN_STEPS)
            return ys if stacked else last

        return ((lambda: f(x0).block_until_ready()),
                scan_check(SCAN_STACKED if stacked else SCAN_FINAL, d))

    def scan_rnn(hoisted):
        w, u, b, xs = put("rnn_w"), put("rnn_u"), put("rnn_b"), put("rnn_xs")

        @jax.jit
        def f(w, u, b, xs):
            h0 = jnp.zeros((RNN_B, RNN_H), jnp.float32)
            if hoisted:
                # x_t @ U.T for every step as one matmul, outside the scan
                seq = (xs.reshape(RNN_T * RNN_B, RNN_H) @ u.T).reshape(RNN_T, RNN_B, RNN_H)
            else:
                seq = xs

            def step(h, x):
                h = jnp.tanh(h @ w.T + (x if hoisted else x @ u.T) + b)
                return h, h

            return lax.scan(step, h0, seq)[1]

        return ((lambda: f(w, u, b, xs).block_until_ready()),
                scan_check(SCAN_RNN_HOISTED if hoisted else SCAN_RNN, d))

    def grad():
        x = put("grad_x")
        loss = lambda x: jnp.sum(jnp.tanh(x * x + 1) * jnp.exp(-x) + jnp.sqrt(jnp.abs(x)))  # noqa: E731
        f = jax.jit(jax.grad(loss))
        return (lambda: f(x).block_until_ready()), grad_check(d)

    # ad loop, ad rnn, ad heat: jit(grad) of the loss, written with lax.scan (the heat steps too:
    # jit(grad) of 100 steps unrolled in Python had not finished compiling after 10 minutes), and
    # jit of the loss for the forward
    def ad(workload, loss, *names):
        args = [put(n) for n in names]
        # ad rnn: the gradients w.r.t. W, U and b (not xs)
        f = jax.jit(jax.grad(loss, argnums=(0, 1, 2) if workload == AD_RNN else 0))
        fwd = jax.jit(loss)
        return ((lambda: jax.block_until_ready(f(*args))), ad_check(workload, d),
                lambda: fwd(*args).block_until_ready())

    def ad_loop_loss(a):
        step = lambda x, _: (x * a + 0.001, None)  # noqa: E731
        return jnp.sum(lax.scan(step, jnp.ones_like(a), None, length=AD_LOOP_STEPS)[0])

    def ad_rnn_loss(w, u, b, xs):
        def step(h, x):
            h = jnp.tanh(h @ w.T + x @ u.T + b)
            return h, h

        hs = lax.scan(step, jnp.zeros((RNN_B, RNN_H), jnp.float32), xs)[1]
        return jnp.sum(hs * hs)

    def ad_heat_loss(u0):
        def step(u, _):
            lap = u[1:-1, 2:] + u[1:-1, :-2] + u[2:, 1:-1] + u[:-2, 1:-1] - 4 * u[1:-1, 1:-1]
            return u + 0.2 * jnp.pad(lap, 1), None

        r = lax.scan(step, u0, None, length=HEAT_STEPS)[0] - HEAT_TARGET
        return jnp.sum(r * r)

    return {SAXPY: saxpy, CHAIN: chain, MONTE: monte, LAUNCH: launch, STENCIL: stencil,
            LAPLACIAN: laplacian, BLUR: blur, COLLATZ: collatz, LOOP: loop, SWITCH: switch,
            COMPILE: compile_, SCAN_FINAL: lambda: scan_steps(False),
            SCAN_STACKED: lambda: scan_steps(True), SCAN_RNN: lambda: scan_rnn(False),
            SCAN_RNN_HOISTED: lambda: scan_rnn(True), GRAD: grad,
            AD_LOOP: lambda: ad(AD_LOOP, ad_loop_loss, "ad_loop_a"),
            AD_RNN: lambda: ad(AD_RNN, ad_rnn_loss, "rnn_w", "rnn_u", "rnn_b", "rnn_xs"),
            AD_HEAT: lambda: ad(AD_HEAT, ad_heat_loss, "heat_u0")}


def peer_drjit(d):
    import drjit as dr
    import numpy as np
    from drjit.llvm import PCG32, Float, TensorXf, UInt32, ad

    if not dr.has_backend(dr.JitBackend.LLVM):
        raise RuntimeError("Dr.Jit's LLVM backend is unavailable (no libLLVM found: install "
                           "libllvm or set DRJIT_LIBLLVM_PATH)")
    threads = dr.thread_count() if hasattr(dr, "thread_count") else "?"
    print(f"  drjit {dr.__version__}: LLVM backend, {threads} threads", flush=True)

    def arr(cls, name):
        a = cls(d[name].ravel())
        dr.eval(a)
        dr.sync_thread()
        return a

    def done(r):
        dr.eval(r)
        dr.sync_thread()
        return r

    to_np = lambda r: np.array(r)  # noqa: E731

    def saxpy():
        x, y = arr(Float, "saxpy_x"), arr(Float, "saxpy_y")
        return (lambda: done(SAXPY_A * x + y)), to_np

    def chain():
        x = arr(Float, "chain_x")
        return (lambda: done(dr.tanh(x * x + 1) * dr.exp(-x) + dr.sqrt(dr.abs(x)))), to_np

    def monte():
        def run():
            rng = PCG32(N_BIG)
            a = rng.next_float32() * 2 - 1
            b = rng.next_float32() * 2 - 1
            c = rng.next_float32() * 2 - 1
            inside = dr.count(a * a + b * b + c * c < 1)
            return 8.0 * int(inside[0]) / N_BIG  # reading the count waits for the kernel

        return run, float

    def launch():
        x = arr(Float, "launch_x")

        def run():
            y = None
            for _ in range(LAUNCHES):
                y = done(x * 2 + 1)
            return y

        return run, to_np

    def stencil():
        g = arr(Float, "grid")
        w = SIDE

        def run():
            k = dr.arange(UInt32, w * w)
            i = k // w
            j = k - i * w
            inner = (i > 0) & (i < w - 1) & (j > 0) & (j < w - 1)

            def at(index):
                return dr.gather(Float, g, index, inner)

            lap = at(k - w) + at(k + w) + at(k - 1) + at(k + 1) - 4 * at(k)
            return done(dr.select(inner, lap, 0))

        return run, lambda r: np.array(r).reshape(w, w)

    # The stencil workloads with gathers, as `stencil` above: one kernel, a masked gather per tap.
    def gathers(offsets, combine):
        g = arr(Float, "sgrid")
        w = SIDE

        def run():
            k = dr.arange(UInt32, w * w)
            i = k // w
            j = k - i * w
            inner = (i > 0) & (i < w - 1) & (j > 0) & (j < w - 1)
            # (k - 1 rather than k + -1: the index is a UInt32, as in `stencil`)
            idx = [k if o == 0 else k + o if o > 0 else k - (-o)
                   for o in (di * w + dj for di, dj in offsets)]
            taps = [dr.gather(Float, g, x, inner) for x in idx]
            return done(dr.select(inner, combine(taps), 0))

        return run

    def laplacian():
        run = gathers([(0, 1), (0, -1), (1, 0), (-1, 0), (0, 0)],
                      lambda t: t[0] + t[1] + t[2] + t[3] - 4 * t[4])
        return run, stencil_check(LAPLACIAN, d["sgrid"])

    def blur():
        def mean(t):
            s = t[0]
            for v in t[1:]:
                s = s + v
            return s * (1.0 / 9.0)

        run = gathers([(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1)], mean)
        return run, stencil_check(BLUR, d["sgrid"])

    def collatz():
        x0 = arr(UInt32, "collatz_x")

        def run():
            # note the parentheses: `x & 1 == 0` would parse as `x & (1 == 0)`
            _, n = dr.while_loop(
                state=(x0, dr.zeros(UInt32, N_COLLATZ)),
                cond=lambda x, n: x != 1,
                body=lambda x, n: (dr.select((x & 1) == 0, x >> 1, 3 * x + 1), n + 1),
            )
            return done(n)

        return run, to_np

    def loop():
        x0 = arr(Float, "loop_x")

        def run():
            x, _ = dr.while_loop(
                state=(x0, UInt32(0)),
                cond=lambda x, i: i < LOOP_STEPS,
                body=lambda x, i: (x * 0.999 + 0.001, i + 1),
            )
            return done(x)

        return run, to_np

    def switch():
        idx, x, y = arr(UInt32, "switch_idx"), arr(Float, "switch_x"), arr(Float, "switch_y")
        targets = [
            lambda x, y: x * y,
            lambda x, y: x * x * 3.25,
            lambda x, y: x + y,
            lambda x, y: dr.sqrt(x * x + y * y),
        ]
        return (lambda: done(dr.switch(idx, targets, x, y))), to_np

    def compile_():
        # Dr.Jit bakes Python-float literals into its kernels (the kernel's hash covers them), so
        # new constants make a new kernel, which misses both its kernel cache in memory and the
        # one on disk (~/.drjit); the salt in compile_consts keeps an earlier run's kernels out of
        # reach, and the kernel history confirms the miss. Timed: dr.eval + dr.sync_thread of the
        # traced chain (schedule + LLVM compile + run), not the tracing itself.
        x = arr(Float, "compile_x")
        sample = [0]

        def run():
            sample[0] += 1
            cs = compile_consts(sample[0])
            y = x
            for i, c in enumerate(cs):
                y = compile_step(i, y, x, float(c))
            dr.set_flag(dr.JitFlag.KernelHistory, True)
            dr.kernel_history()  # clears it
            try:
                t0 = time.perf_counter()
                done(y)
                t = time.perf_counter() - t0
                hist = dr.kernel_history()
            finally:
                dr.set_flag(dr.JitFlag.KernelHistory, False)
            if any(e.get("cache_hit") or e.get("cache_disk") for e in hist):
                raise RuntimeError("a kernel cache hit: the figure would not be a compile")
            return Timed(t, (np.array(y), cs))

        return run, compile_check(d["compile_x"])

    # scan final / stacked: dr.while_loop (one kernel); stacked scatters each step's x into row i
    # of a [steps * lanes] buffer from inside the loop
    def scan_steps(stacked):
        x0 = arr(Float, "scan_x0")
        n = SCAN_LANES

        def run():
            out = dr.empty(Float, SCAN_STEPS * n) if stacked else None
            lane = dr.arange(UInt32, n)

            def body(x, i):
                x = x * 0.999 + 0.001
                if stacked:
                    dr.scatter(out, x, i * n + lane)
                return x, i + 1

            x, _ = dr.while_loop(state=(x0, UInt32(0)), cond=lambda x, i: i < SCAN_STEPS,
                                 body=body)
            return done(out if stacked else x)

        return run, scan_check(SCAN_STACKED if stacked else SCAN_FINAL, d)

    # scan rnn: a Python loop over the steps with TensorXf and dr.matmul (Dr.Jit's own tiled GEMM;
    # Bt=True: W.T, U.T without a copy), each h_t scattered into a [T * B * H] buffer
    def scan_rnn(hoisted):
        w, u, b = (TensorXf(d[k]) for k in ("rnn_w", "rnn_u", "rnn_b"))
        xs = TensorXf(d["rnn_xs"])
        dr.eval(w, u, b, xs)
        dr.sync_thread()
        bh = RNN_B * RNN_H

        def run():
            buf = dr.empty(Float, RNN_T * bh)
            idx = dr.arange(UInt32, bh)
            if hoisted:
                flat = dr.reshape(TensorXf, xs, (RNN_T * RNN_B, RNN_H))
                xu = dr.reshape(TensorXf, dr.matmul(flat, u, Bt=True), (RNN_T, RNN_B, RNN_H))
            h = dr.zeros(TensorXf, (RNN_B, RNN_H))
            for t in range(RNN_T):
                xt = xu[t] if hoisted else dr.matmul(xs[t], u, Bt=True)
                h = dr.tanh(dr.matmul(h, w, Bt=True) + xt + b)
                dr.scatter(buf, h.array, idx + t * bh)
            return done(buf)

        return run, scan_check(SCAN_RNN_HOISTED if hoisted else SCAN_RNN, d)

    def grad():
        x0 = arr(ad.Float, "grad_x")

        def run():
            x = ad.Float(x0)  # a fresh handle on the same data, then a fresh AD leaf
            dr.enable_grad(x)
            y = dr.sum(dr.tanh(x * x + 1) * dr.exp(-x) + dr.sqrt(dr.abs(x)))
            dr.backward(y)
            return done(dr.grad(x))

        return run, grad_check(d)

    # ad loop, ad rnn, ad heat: the drjit.llvm.ad types; each call makes fresh leaves of the
    # inputs, dr.enable_grad, the loss, dr.backward and dr.grad, and evaluates the gradients. The
    # forward is the same loss without enable_grad.
    def ad_loop():
        a0 = arr(ad.Float, "ad_loop_a")

        def x_final(a):
            # a symbolic loop (one kernel); reverse mode through it needs max_iterations, the bound
            # by which Dr.Jit sizes the loop state it keeps for the backward pass
            x, _ = dr.while_loop(state=(dr.ones(ad.Float, AD_LOOP_N), ad.UInt32(0)),
                                 cond=lambda x, i: i < AD_LOOP_STEPS,
                                 body=lambda x, i: (x * a + 0.001, i + 1),
                                 max_iterations=AD_LOOP_STEPS)
            return x

        def run():
            a = ad.Float(a0)
            dr.enable_grad(a)
            dr.backward(dr.sum(x_final(a)))
            return done(dr.grad(a))

        return run, ad_check(AD_LOOP, d), lambda: done(dr.sum(x_final(a0)))

    # ad rnn: scan rnn's Python loop of dr.matmul, with h_t^2 summed as it goes
    def ad_rnn():
        w0, u0, b0, xs = (ad.TensorXf(d[k]) for k in ("rnn_w", "rnn_u", "rnn_b", "rnn_xs"))
        done((w0, u0, b0, xs))

        def loss(w, u, b):
            h = dr.zeros(ad.TensorXf, (RNN_B, RNN_H))
            sq = dr.zeros(ad.TensorXf, (RNN_B, RNN_H))
            for t in range(RNN_T):
                h = dr.tanh(dr.matmul(h, w, Bt=True) + dr.matmul(xs[t], u, Bt=True) + b)
                sq = sq + h * h
            return dr.sum(sq.array)

        def run():
            w, u, b = (ad.TensorXf(p) for p in (w0, u0, b0))
            dr.enable_grad(w, u, b)
            dr.backward(loss(w, u, b))
            return done((dr.grad(w), dr.grad(u), dr.grad(b)))

        return run, ad_check(AD_RNN, d), lambda: done(loss(w0, u0, b0))

    # ad heat: a Python loop of 100 steps, each a kernel with a masked gather per neighbour as in
    # `gathers` (gathering from a u that is not evaluated yet evaluates it); the backward pass
    # turns each gather into a scatter-add
    def ad_heat():
        u0 = arr(ad.Float, "heat_u0")
        w = HEAT_N

        def loss(u):
            k = dr.arange(UInt32, w * w)
            i = k // w
            j = k - i * w
            inner = (i > 0) & (i < w - 1) & (j > 0) & (j < w - 1)
            idx = [k + 1, k - 1, k + w, k - w]
            for _ in range(HEAT_STEPS):
                lap = sum(dr.gather(ad.Float, u, x, inner) for x in idx) - 4 * u
                u = u + 0.2 * dr.select(inner, lap, 0)
            r = u - HEAT_TARGET
            return dr.sum(r * r)

        def run():
            u = ad.Float(u0)
            dr.enable_grad(u)
            dr.backward(loss(u))
            return done(dr.grad(u))

        return run, ad_check(AD_HEAT, d), lambda: done(loss(u0))

    return {SAXPY: saxpy, CHAIN: chain, MONTE: monte, LAUNCH: launch, STENCIL: stencil,
            LAPLACIAN: laplacian, BLUR: blur, COLLATZ: collatz, LOOP: loop, SWITCH: switch,
            COMPILE: compile_, SCAN_FINAL: lambda: scan_steps(False),
            SCAN_STACKED: lambda: scan_steps(True), SCAN_RNN: lambda: scan_rnn(False),
            SCAN_RNN_HOISTED: lambda: scan_rnn(True), GRAD: grad, AD_LOOP: ad_loop,
            AD_RNN: ad_rnn, AD_HEAT: ad_heat}


def peer_pytensor(d, mode=None):
    """PyTensor: pytensor.scan compiled by pytensor.function, with the default mode (C backend) or
    mode="NUMBA". Only the scans are written for it."""
    import logging
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        # (the C backend's "could not link to a BLAS installation" warning: reported below)
        warnings.simplefilter("ignore")
        import pytensor
        import pytensor.tensor as pt

        if mode == "NUMBA":
            import numba  # (mode="NUMBA" needs it)

            about = f"mode NUMBA (numba {numba.__version__})"
        else:
            ld = pytensor.config.blas__ldflags
            about = (f"default mode, C backend ({pytensor.config.cxx or 'no C++ compiler'}), "
                     + (f"BLAS {ld!r}" if ld else "no BLAS found (its dot calls NumPy's)"))
    print(f"  pytensor {pytensor.__version__}: {about}", flush=True)
    f32 = "float32"
    decay, offset = np.float32(0.999), np.float32(0.001)

    def scan(fn, **kw):
        # PyTensor 2.x returns (outputs, updates) unless return_updates=False (newer: outputs)
        try:
            return pytensor.scan(fn, return_updates=False, **kw)
        except TypeError:
            return pytensor.scan(fn, **kw)[0]

    logging.getLogger("pytensor.tensor.blas").setLevel(logging.ERROR)  # (said above)

    def compile_(inputs, output):
        """The compiled function, compiled on its first call (so that the warm-up call, like the
        other peers' first calls, includes the compilation)."""
        fn = []

        def call(*args):
            if not fn:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn.append(pytensor.function(inputs, output, mode=mode))
            return fn[0](*args)

        return call

    def scan_steps(stacked):
        x0 = pt.vector("x0", dtype=f32)
        ys = scan(lambda x: x * decay + offset, outputs_info=[x0], n_steps=SCAN_STEPS)
        f = compile_([x0], ys if stacked else ys[-1])
        x = d["scan_x0"]
        return (lambda: f(x)), scan_check(SCAN_STACKED if stacked else SCAN_FINAL, d)

    def scan_rnn(hoisted):
        w, u = pt.matrix("w", dtype=f32), pt.matrix("u", dtype=f32)
        b, xs = pt.vector("b", dtype=f32), pt.tensor3("xs", dtype=f32)
        h0 = pt.zeros((RNN_B, RNN_H), dtype=f32)
        if hoisted:
            # x_t @ U.T for every step as one matmul, outside the scan
            seq = pt.dot(xs.reshape((RNN_T * RNN_B, RNN_H)), u.T).reshape((RNN_T, RNN_B, RNN_H))
            hs = scan(lambda xu, h, w, b: pt.tanh(pt.dot(h, w.T) + xu + b),
                      sequences=[seq], outputs_info=[h0], non_sequences=[w, b])
        else:
            hs = scan(lambda x, h, w, u, b: pt.tanh(pt.dot(h, w.T) + pt.dot(x, u.T) + b),
                      sequences=[xs], outputs_info=[h0], non_sequences=[w, u, b])
        f = compile_([w, u, b, xs], hs)
        args = [d["rnn_w"], d["rnn_u"], d["rnn_b"], d["rnn_xs"]]
        return (lambda: f(*args)), scan_check(SCAN_RNN_HOISTED if hoisted else SCAN_RNN, d)

    other = "PyTensor is timed on the scans only"
    table = {w: other for w in WORKLOADS}
    table.update({SCAN_FINAL: lambda: scan_steps(False), SCAN_STACKED: lambda: scan_steps(True),
                  SCAN_RNN: lambda: scan_rnn(False), SCAN_RNN_HOISTED: lambda: scan_rnn(True)})
    return table


PEER_FNS = {"numpy": peer_numpy, "numba": peer_numba, "jax": peer_jax, "drjit": peer_drjit,
            "pytensor": peer_pytensor,
            "pytensor-numba": lambda d: peer_pytensor(d, mode="NUMBA")}


# -------------------------------------------------------------------------------------------------
# The worker: one peer, every workload, results to a JSON file after each workload.


def checksum(workload, value):
    import numpy as np

    if isinstance(value, float):
        return value
    a = np.asarray(value)
    if workload == COLLATZ:
        return int(a.astype(np.uint64).sum())
    return float(np.abs(a.astype(np.float64)).sum())


def run_worker(peer, out_path, reps, workloads):
    results = {"ms": {}, "first_ms": {}, "forward_ms": {}, "check": {}, "skipped": {}}

    def save():
        with open(out_path, "w") as f:
            json.dump(results, f)

    save()
    try:
        data = inputs()
        table = PEER_FNS[peer](data)
    except Exception as e:  # noqa: BLE001
        reason = f"{type(e).__name__}: {e}".splitlines()[0]
        results["skipped"]["*"] = reason
        save()
        print(f"peer {peer}: skipped ({reason})", flush=True)
        return
    for w in workloads:
        factory = table.get(w, "not written for this peer")
        if isinstance(factory, str):
            results["skipped"][w] = factory
            print(f"peer {peer}: skipped ({w}: {factory})", flush=True)
            save()
            continue
        try:
            run, to_numpy, *forward = factory()

            def call(fn):
                t0 = time.perf_counter()
                r = fn()
                t = time.perf_counter() - t0
                return (r.value, r.seconds) if isinstance(r, Timed) else (r, t)

            def timed(fn):
                """fn's warm-up call, then its timed calls: (first, best, median, last result)."""
                r, first = call(fn)
                times = []
                for _ in range(timed_calls(w, reps)):
                    r, t = call(fn)
                    times.append(t)
                return first, min(times), sorted(times)[len(times) // 2], r

            first, best, median, r = timed(run)
            results["ms"][w] = best * 1e3
            results["first_ms"][w] = first * 1e3
            fwd = ""
            if forward:
                _, fbest, fmedian, _ = timed(forward[0])
                results["forward_ms"][w] = fbest * 1e3
                fwd = f"; forward {fbest * 1e3:.2f} ms, median {fmedian * 1e3:.2f} ms"
            results["check"][w] = checksum(w, to_numpy(r))
            diff = (f"; {'rel' if REF_CHECKS[w][0] == 'rel' else 'abs'} diff "
                    f"{results['check'][w]:.2g}" if w in REF_CHECKS else "")
            print(f"  {peer:<6} {w:<28} {best * 1e3:10.2f} ms   (median {median * 1e3:.2f} ms; "
                  f"first call {first * 1e3:.1f} ms{fwd}{diff})", flush=True)
            if w in REF_CHECKS and not results["check"][w] <= REF_CHECKS[w][1]:
                print(f"warning: {peer} {w}: {ref_what(w, results['check'][w])}", flush=True)
        except Exception as e:  # noqa: BLE001
            if os.environ.get("KILN_PEERS_TRACEBACK"):
                traceback.print_exc()
            reason = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
            results["skipped"][w] = reason
            print(f"peer {peer}: skipped ({w}: {reason})", flush=True)
        save()


# -------------------------------------------------------------------------------------------------
# The parent: one child process per peer, then the table, the checks and the JSON.


def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def print_table(header, rows):
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(  # noqa: E731
        (str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])) for i, c in enumerate(r)
    ).rstrip()
    print(line(header))
    print("-" * (sum(w) + 2 * (len(w) - 1)))
    for r in rows:
        print(line(r))


def ref_what(workload, c):
    """A REF_CHECKS workload's check, in words."""
    kind, tol = REF_CHECKS[workload]
    what = "max |r - ref| / max |ref|" if kind == "rel" else "max |r - ref|"
    if workload == AD_RNN:
        what += " (the worst of the gradients w.r.t. W, U and b)"
    return f"{what} = {c:.3g} against a float64 NumPy reference (tolerance {tol:g})"


def check_notes(per_peer, workloads):
    notes = []
    for w in workloads:
        ref = None
        if w == COLLATZ:
            ref = COLLATZ_STEP_SUM
        elif w != MONTE:
            ref = per_peer.get("numpy", {}).get("check", {}).get(w)
        for p, res in per_peer.items():
            c = res.get("check", {}).get(w)
            if c is None:
                continue
            if w in REF_CHECKS:
                ok = c <= REF_CHECKS[w][1]
                what = ref_what(w, c)
            elif w == COMPILE:
                ok = c <= 1e-3
                what = f"sum|y| differs from numpy's (same constants, f32) by {c:.2g} relative"
            elif w == MONTE:
                ok = abs(c - SPHERE) < 0.01
                what = f"estimate {c:.5f} (4pi/3 = {SPHERE:.5f})"
            elif w == COLLATZ:
                ok = c == ref
                what = f"step sum {c} (expected {ref})"
            elif ref is None:
                continue
            else:
                ok = abs(c - ref) <= 1e-3 * max(abs(ref), 1e-9)
                what = f"sum|r| {c:.6g} (numpy {ref:.6g})"
            if not ok:
                notes.append(f"  CHECK FAILED {p} {w}: {what}")
    return notes


def selected(spec):
    """The workloads that `spec` (comma-separated substrings, empty: all) selects, in order."""
    return [w for w in WORKLOADS
            if not spec
            or any(s.strip() and s.strip().lower() in w.lower() for s in spec.split(","))]


def run_parent(args):
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    workloads = selected(args.workloads)
    print(f"kiln peers: {', '.join(peers)}; best of {args.reps} (of {max(args.reps, SMALL_REPS)} "
          f"for the small workloads, of {timed_calls(COMPILE, args.reps)} fresh kernels for cold "
          f"compile) after one warm-up call (which compiles); "
          f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}", flush=True)
    start = time.perf_counter()
    per_peer = {}
    for p in peers:
        if p not in PEER_FNS:
            print(f"peer {p}: skipped (unknown peer; known: {', '.join(PEERS)})", flush=True)
            continue
        fd, tmp = tempfile.mkstemp(prefix=f"kiln-peer-{p}-", suffix=".json")
        os.close(fd)
        t = time.perf_counter()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", p, "--out", tmp,
               "--reps", str(args.reps), "--workloads", ",".join(workloads) or "-"]
        try:
            rc = subprocess.run(cmd, timeout=args.peer_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {args.peer_timeout} s"
        try:
            with open(tmp) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"ms": {}, "skipped": {}}
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if rc != 0:
            left = [w for w in workloads if w not in res.get("ms", {})
                    and w not in res.get("skipped", {})]
            why = rc if isinstance(rc, str) else f"worker exited with status {rc}"
            print(f"peer {p}: skipped ({why}; not measured: {', '.join(left) or 'none'})",
                  flush=True)
        per_peer[p] = res
        print(f"  {p}: {time.perf_counter() - t:.1f} s", flush=True)

    out = {w: {p: per_peer[p]["ms"][w] for p in per_peer if w in per_peer[p].get("ms", {})}
           for w in workloads}
    shown = [p for p in peers if p in per_peer]
    print()
    print("peer timings (ms, best run; lower is better)")
    print_table(["workload"] + shown,
                [[w] + [fmt_ms(out[w].get(p)) for p in shown] for w in workloads])
    print()
    print("first call incl. compilation (ms)")
    print_table(["workload"] + shown,
                [[w] + [fmt_ms(per_peer[p].get("first_ms", {}).get(w)) for p in shown]
                 for w in workloads])
    fwd = [w for w in workloads if any(w in per_peer[p].get("forward_ms", {}) for p in shown)]
    if fwd:
        print()
        print("the AD workloads' forward alone, the loss without gradients (ms, best run)")
        print_table(["workload"] + shown,
                    [[w] + [fmt_ms(per_peer[p]["forward_ms"].get(w)) for p in shown]
                     for w in fwd])
    notes = check_notes(per_peer, workloads)
    print()
    if notes:
        print("checks:")
        print("\n".join(notes))
    else:
        print("checks: every measured result agrees (numpy's sums, the collatz step sum, 4pi/3; "
              "cold compile: numpy's f32 result with the same constants; laplacian, box blur, "
              "the gradient and the scans: a float64 NumPy reference, element by element, within "
              "1e-4 of its "
              "largest magnitude, scan rnn within 1e-3 absolute; ad loop and ad heat within 1e-3 "
              "of it, ad rnn's three gradients within 1e-2 of their own)")
    if COMPILE in workloads:
        print(f"  {COMPILE}: every call compiles a kernel never seen before; best of "
              f"{timed_calls(COMPILE, args.reps)} after one (the first in its process, shown in "
              "the second table)")
    for p in shown:
        for w, why in per_peer[p].get("skipped", {}).items():
            print(f"  {p}: {'import' if w == '*' else w} skipped: {why}")
    print(f"total {time.perf_counter() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")


# -------------------------------------------------------------------------------------------------
# --merge: kiln's figures from a bench_report output next to the peers'.

ALIASES = {
    SAXPY: ["saxpy"],
    CHAIN: ["fused chain"],
    MONTE: ["monte carlo"],
    LAUNCH: ["cached launch"],
    COMPILE: ["cold compile"],
    STENCIL: ["5-point stencil", "stencil"],
    LAPLACIAN: ["stencil 5-point laplacian"],  # bench_report: "kiln::stencil 5-point laplacian .."
    BLUR: ["stencil 3x3 box blur"],
    COLLATZ: ["collatz"],
    LOOP: ["loop 1000x10000", "loop 1000", "while_loop", "while loop"],
    SWITCH: ["switch"],
    SCAN_FINAL: ["scan final"],
    SCAN_STACKED: ["scan stacked"],
    SCAN_RNN: ["scan rnn"],
    # the variant is timed against kiln's one rnn row
    SCAN_RNN_HOISTED: ["scan rnn 200x64x256", "scan rnn"],
    GRAD: ["ad gradient"],
    # bench_report's row (ad rnn and ad heat are named as its rows are; its ad heat row under
    # --quick, 256^2, is left unmatched)
    AD_LOOP: ["ad loop 1000 steps x 10000 lanes"],
}
NUM = r"([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"


def kiln_ms(workload, lines):
    """kiln's ms for `workload` from bench_report's output, or (None, None): first a line naming
    the workload with `kiln <X> ms` (or `kiln <X> ms (best <Y> ms`: then Y), then a table row
    starting with its name (kiln's cell in ms, us/launch or GB/s, converted)."""
    keys = [workload.lower()] + ALIASES.get(workload, [])
    for key in keys:
        for ln in lines:
            low = ln.lower()
            if key not in low or "kiln" not in low:
                continue
            m = re.search(r"\bkiln\b\D*?" + NUM + r" ms\b(?: \(best " + NUM + r" ms\b)?",
                          ln[low.index("kiln"):])
            if m:
                return float(m.group(2) or m.group(1)), None
    for key in keys:
        for ln in lines:
            if not ln.strip().lower().startswith(key):
                continue
            m = re.search(NUM + r" ?(ms|us/launch|GB/s)\b", ln[len(ln) - len(ln.lstrip()) + len(key):])
            if not m:
                continue
            v, unit = float(m.group(1)), m.group(2)
            if unit == "ms":
                return v, None
            if unit == "us/launch" and workload == LAUNCH:
                return v * LAUNCHES / 1000.0, f"{workload}: kiln's {v} us/launch x {LAUNCHES}"
            if unit == "GB/s" and workload == SAXPY and v > 0:
                n = re.search(r"saxpy ([0-9]+)M", ln, re.I)
                n = int(n.group(1)) * 1_000_000 if n else N_BIG
                return 12.0 * n / (v * 1e9) * 1e3, \
                    f"{workload}: kiln's {v} GB/s at 12 B/element over {n} elements"
    return None, None


def compile_note(lines):
    """What kiln's cold-compile figure measures, next to what the peers' do."""
    whole = None
    for ln in lines:
        if ln.strip().lower().startswith("cold compile:"):
            m = re.search(r"whole eval[^;]*?median " + NUM + " ms", ln)
            whole = whole or (m and m.group(1))
    return (f"{COMPILE}: kiln's figure is its code generation alone (median); the peers' are a "
            "whole first call (best; JAX: trace + compile + run, Numba: type inference + compile "
            "+ run, Dr.Jit: eval = schedule + compile + run)"
            + (f"; kiln's whole eval (schedule + compile + run): median {whole} ms" if whole
               else ""))


def run_merge(args):
    try:
        with open(args.merge) as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"merge: no kiln output ({e}); kiln column left empty")
        lines = []
    try:
        with open(args.json) as f:
            peers_ms = json.load(f)
    except (OSError, ValueError) as e:
        print(f"merge: no peer timings ({e})")
        peers_ms = {}
    shown = [p for p in PEERS if any(p in v for v in peers_ms.values())]
    header = ["workload", "kiln"] + [h for p in shown for h in (p, f"{p}/kiln")]
    rows, notes = [], []
    for w in selected(args.workloads):
        k, note = kiln_ms(w, lines)
        if note:
            notes.append("derived: " + note)
        if w == COMPILE and k is not None:
            notes.append("note: " + compile_note(lines))
        row = [w, fmt_ms(k)]
        for p in shown:
            v = peers_ms.get(w, {}).get(p)
            row.append(fmt_ms(v))
            row.append(f"{v / k:.2f}x" if v is not None and k else "-")
        rows.append(row)
    print("kiln vs peers (ms; ratio peer/kiln > 1 means kiln is faster)")
    print_table(header, rows)
    for n in notes:
        print(f"  {n}")
    print("  kiln figures are parsed best effort from bench_report (its 'kiln <X> ms' notes, "
          "which give best runs, else its table's median); '-' where none was found")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write {workload: {peer: ms}} here (with --merge: read it)")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS,
                    help="timed calls per workload (best is kept)")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of peers")
    ap.add_argument("--workloads", default="",
                    help="comma-separated substrings selecting workloads (default: all; with "
                    "--merge: the rows shown)")
    ap.add_argument("--peer-timeout", type=int, default=900, help="seconds per peer process")
    ap.add_argument("--merge", metavar="KILN_OUTPUT",
                    help="print the merged table from a saved bench_report output and --json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        ws = [w for w in args.workloads.split(",") if w in WORKLOADS]
        run_worker(args.worker, args.out, max(1, args.reps), ws)
    elif args.merge:
        if not args.json:
            ap.error("--merge needs --json (the peer timings)")
        run_merge(args)
    else:
        args.reps = max(1, args.reps)
        run_parent(args)


if __name__ == "__main__":
    main()
