"""Control flow in kernels from Python: while_loop (per-lane trip counts, symbolic and evaluated),
if_stmt, switch; gradients through them; Python exceptions inside a traced body."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def collatz_steps(v):
    n = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        n += 1
    return n


@pytest.mark.parametrize("mode", [None, "symbolic", "evaluated"])
def test_while_loop_per_lane_trip_counts(mode):
    start = np.arange(1, 200, dtype=np.uint32)
    v, steps = kiln.while_loop(
        state=(kiln.UInt32(start), kiln.zeros(kiln.UInt32, len(start))),
        cond=lambda v, n: v != 1,
        body=lambda v, n: (kiln.select(v % 2 == 0, v // 2, 3 * v + 1), n + 1),
        mode=mode,
    )
    assert v.tolist() == [1] * len(start)
    assert steps.tolist() == [collatz_steps(int(s)) for s in start]


def test_while_loop_state_may_hold_lists_dicts_and_constants():
    x = kiln.Float64([1.0, 2.0, 3.0])
    out = kiln.while_loop(
        state=(kiln.Int32([0, 0, 0]), {"x": x, "scale": 2.0}, [kiln.Int32([5, 2, 0])]),
        cond=lambda i, d, lim: i < lim[0],
        body=lambda i, d, lim: (i + 1, {"x": d["x"] * d["scale"], "scale": d["scale"]}, lim),
    )
    i, d, lim = out
    assert i.tolist() == [5, 2, 0]
    assert d["x"].tolist() == [32.0, 8.0, 3.0]
    assert d["scale"] == 2.0 and lim[0].tolist() == [5, 2, 0]


def test_while_loop_gradient_matches_differences():
    # x <- x*a + 0.001 for k steps, lanes with different k
    a_np = np.array([0.9, 1.01, 1.1, 0.5])
    k = kiln.Int32([0, 1, 7, 30])
    a = kiln.Float64(a_np)
    kiln.enable_grad(a)
    _, x = kiln.while_loop(
        state=(kiln.Int32([0, 0, 0, 0]), kiln.Float64([1.0, 1.0, 1.0, 1.0])),
        cond=lambda i, x: i < k,
        body=lambda i, x: (i + 1, x * a + 0.001),
    )
    kiln.backward(kiln.sum(x))

    def final(av):
        out = []
        for ai, ki in zip(av, [0, 1, 7, 30]):
            v = 1.0
            for _ in range(ki):
                v = v * ai + 0.001
            out.append(v)
        return np.array(out)

    h = 1e-6
    fd = (final(a_np + h) - final(a_np - h)) / (2 * h)
    np.testing.assert_allclose(a.grad.numpy(), fd, rtol=1e-6, atol=1e-9)


def test_while_loop_errors():
    with pytest.raises(TypeError, match="kiln.Bool"):
        kiln.while_loop((kiln.Int32([1]),), cond=lambda i: 3, body=lambda i: (i + 1,))
    with pytest.raises(ValueError, match="same order"):
        kiln.while_loop(
            (kiln.Int32([0]),), cond=lambda i: i < 3, body=lambda i: (kiln.Float32(i) + 1.0,)
        )
    with pytest.raises(ValueError, match="mode"):
        kiln.while_loop((kiln.Int32([0]),), cond=lambda i: i < 3, body=lambda i: (i + 1,), mode="fast")


def test_a_python_exception_in_a_body_comes_out_as_a_runtime_error_caused_by_it():
    # Dr.Jit's rule: `except RuntimeError` catches what a loop's functions raise, and
    # `__cause__` is their exception
    class Boom(Exception):
        pass

    def body(i):
        raise Boom("from the body")

    with pytest.raises(RuntimeError, match="body raised Boom: from the body") as e:
        kiln.while_loop((kiln.Int32([0, 1]),), cond=lambda i: i < 3, body=body)
    assert isinstance(e.value.__cause__, Boom)

    def bad(*_):
        raise Boom("from a branch")

    x = kiln.Int32([0, 1])
    with pytest.raises(RuntimeError, match="if_stmt.*true_fn raised Boom") as e:
        kiln.if_stmt((x,), x > 0, bad, lambda v: v)
    assert isinstance(e.value.__cause__, Boom)
    with pytest.raises(RuntimeError, match="switch.*target 1 raised Boom") as e:
        kiln.switch(kiln.UInt32([0, 1]), [lambda v: v, bad], x)
    assert isinstance(e.value.__cause__, Boom)
    with pytest.raises(RuntimeError, match="cond raised Boom"):
        kiln.while_loop((x,), cond=bad, body=lambda i: (i + 1,))
    # and kiln is usable afterwards
    (i,) = kiln.while_loop((kiln.Int32([0, 1]),), cond=lambda i: i < 3, body=lambda i: (i + 1,))
    assert i.tolist() == [3, 3]


@pytest.mark.parametrize("mode", [None, "evaluated"])
def test_while_loop_max_iterations(mode):
    (i,) = kiln.while_loop(
        (kiln.Int32([0, 45]),), cond=lambda i: i < 50, body=lambda i: (i + 1,),
        max_iterations=10, mode=mode,
    )
    # the lane still running when the bound stopped the loop makes the next read an error
    with pytest.raises(ValueError, match="lane"):
        i.tolist()


@pytest.mark.parametrize("mode", [None, "evaluated"])
def test_if_stmt(mode):
    x = kiln.Float32([-2.0, -1.0, 0.5, 3.0])
    y, z = kiln.if_stmt(
        args=(x,),
        cond=x > 0,
        true_fn=lambda x: (kiln.sqrt(x), x * 2),
        false_fn=lambda x: (-x, x * 0),
        mode=mode,
    )
    np.testing.assert_allclose(y.numpy(), [2.0, 1.0, np.sqrt(0.5), np.sqrt(3.0)], rtol=1e-6)
    assert z.tolist() == [0.0, 0.0, 1.0, 6.0]
    # a Python bool just picks a branch
    assert kiln.if_stmt((x,), True, lambda x: x + 1, lambda x: x - 1).tolist() == [-1, 0, 1.5, 4]


def test_if_stmt_gradient():
    x = kiln.Float64([-2.0, 3.0])
    kiln.enable_grad(x)
    y = kiln.if_stmt((x,), x > 0, lambda x: x * x, lambda x: x * -3.0)
    kiln.backward(kiln.sum(y))
    assert x.grad.tolist() == [-3.0, 6.0]


def test_switch():
    idx = kiln.UInt32([0, 1, 2, 1, 5])
    x = kiln.Float32([1, 2, 3, 4, 5])
    r = kiln.switch(idx, [lambda x: x + 10, lambda x: x * 2, lambda x: -x], x)
    assert r.tolist() == [11, 4, -3, 8, 0]  # index 5 has no target: 0
    assert kiln.switch(1, [lambda x: x + 10, lambda x: x * 2], x).tolist() == [2, 4, 6, 8, 10]


def test_plain_python_values_may_not_change_per_lane():
    with pytest.raises(ValueError, match="plain Python value"):
        kiln.while_loop((0, kiln.Int32([0, 1])), lambda c, i: i < 3, lambda c, i: (c + 1, i + 1))
    with pytest.raises(ValueError, match="different plain Python values"):
        kiln.if_stmt((kiln.Float32([1, 2]),), kiln.Bool([True, False]), lambda x: 1, lambda x: 2)
    # the same plain value on both sides is fine
    assert kiln.if_stmt((kiln.Float32([1, 2]),), kiln.Bool([True, False]), lambda x: (x, 1), lambda x: (-x, 1))[1] == 1


# ---- JIT flags (the ones kiln honours) ------------------------------------------------------------


def test_flags_choose_the_default_modes_and_restore():
    assert kiln.flag(kiln.JitFlag.SymbolicLoops) and kiln.flag(kiln.JitFlag.OptimizeLoops)

    def run():
        # a symbolic loop is one kernel launch; an evaluated one launches per iteration
        before = kiln.stats()["launches"]
        i, x = kiln.while_loop((kiln.UInt32(0, 1, 2), kiln.Float32(1, 1, 1)),
                               lambda i, x: i < 3, lambda i, x: (i + 1, x * 2))
        return x.tolist(), kiln.stats()["launches"] - before

    sym, launches_sym = run()
    with kiln.scoped_set_flag(kiln.JitFlag.SymbolicLoops, False):
        assert not kiln.flag(kiln.JitFlag.SymbolicLoops)
        ev, launches_ev = run()
    assert kiln.flag(kiln.JitFlag.SymbolicLoops)
    assert sym == ev == [8.0, 4.0, 2.0]
    assert launches_sym == 1 and launches_ev >= 3, (launches_sym, launches_ev)
    with kiln.scoped_set_flag(kiln.JitFlag.OptimizeLoops, False):
        assert run()[0] == sym
    with kiln.scoped_set_flag(kiln.JitFlag.SymbolicConditionals | kiln.JitFlag.SymbolicCalls, False):
        r = kiln.if_stmt((kiln.Int32(1, -1),), kiln.Int32(1, -1) > 0, lambda x: (x * 2,),
                         lambda x: (-x,))
        assert r[0].tolist() == [2, 1]
        s = kiln.switch(kiln.UInt32(0, 1), [lambda x: x + 1, lambda x: x * 10], kiln.Int32(5, 5))
        assert s.tolist() == [6, 50]
    with pytest.raises(ValueError, match="evaluated|mode"):
        kiln.if_stmt((kiln.Int32(1),), kiln.Int32(1) > 0, lambda x: (x,), lambda x: (x,), mode="bogus")


def test_dispatch_calls_each_lanes_instance_with_gradients():
    class Disc:
        def __init__(self, r):
            self.r = r

        def area(self, scale):
            return self.r * self.r * 3.0 * scale

    class Square:
        def __init__(self, side):
            self.side = side

        def area(self, scale):
            return self.side * self.side * scale

    r = kiln.Float64([2.0])
    kiln.enable_grad(r)
    shapes = [Disc(r), Square(kiln.Float64([3.0]))]
    idx = kiln.UInt32([0, 1, 1, 0, 7])
    scale = kiln.Float64([1.0, 2.0, 3.0, 4.0, 5.0])
    for mode in (None, "evaluated"):
        kiln.clear_grad(r)
        a = kiln.dispatch(idx, shapes, lambda s, x: s.area(x), scale, mode=mode)
        assert a.tolist() == [12.0, 18.0, 27.0, 48.0, 0.0]  # index 7 has no instance: 0
        kiln.backward(kiln.sum(a))
        assert r.grad.tolist() == [6.0 * 2.0 * (1.0 + 4.0)]  # d(3 r² s)/dr over lanes 0 and 3
    assert kiln.dispatch(1, shapes, lambda s, x: s.area(x), scale).tolist() == [9.0, 18.0, 27.0, 36.0, 45.0]


@pytest.mark.parametrize("mode", ["symbolic", "evaluated"])
def test_a_loop_writes_its_final_state_into_objects_changed_in_place(mode):
    # Dr.Jit's rule: `x += 1` in the body changes the caller's x; `x = x + 1` does not
    x = kiln.Int32([1, 5, 20])
    out = kiln.while_loop((x,), lambda x: x < 10, lambda x: (x.__iadd__(1),), mode=mode)
    assert out[0] is x and x.tolist() == [10, 10, 20]

    y = kiln.Int32([1, 5, 20])
    out = kiln.while_loop((y,), lambda y: y < 10, lambda y: (y + 1,), mode=mode)
    assert out[0] is not y and y.tolist() == [1, 5, 20] and out[0].tolist() == [10, 10, 20]

    # an entry the body leaves alone comes back as the caller's object; nested containers too
    z = kiln.Float32([2.0, 2.0, 2.0])
    acc = [kiln.Float32([0.0, 0.0, 0.0])]
    i = kiln.UInt32([0, 1, 2])

    def body(i, z, acc):
        acc[0] += z
        return i + 1, z, acc

    i2, z2, acc2 = kiln.while_loop((i, z, acc), lambda i, z, acc: i < 3, body, mode=mode)
    assert z2 is z and acc2 is acc and i2 is not i
    assert acc[0].tolist() == [6.0, 4.0, 2.0] and i.tolist() == [0, 1, 2]

    # a state that is not a tuple: the same rule
    w = kiln.Int32([1, 5, 20])
    kiln.while_loop(w, lambda w: w < 10, lambda w: w.__iadd__(1), mode=mode)
    assert w.tolist() == [10, 10, 20]


def test_syntax_loops_change_the_callers_array_in_place():
    @kiln.syntax
    def count_up(x):
        while x < 10:
            x += 1
        return x

    @kiln.syntax
    def count_up_new(x):
        while x < 10:
            x = x + 1
        return x

    a = kiln.Int32([1, 4])
    assert count_up(a) is a and a.tolist() == [10, 10]
    b = kiln.Int32([1, 4])
    r = count_up_new(b)
    assert r is not b and b.tolist() == [1, 4] and r.tolist() == [10, 10]


def test_an_array_changed_in_place_outside_the_state_is_a_clear_error():
    acc = [kiln.Float32([0.0, 0.0, 0.0])]
    i = kiln.Int32([0, 1, 2])

    def body(i):
        acc[0] += kiln.Float32(i)  # captured, not part of the state
        return (i + 1,)

    kiln.while_loop((i,), lambda i: i < 3, body, mode="symbolic")
    with pytest.raises(kiln.InvalidArgument, match="pass that array in the loop's state"):
        acc[0].tolist()
    del acc


def test_syntax_ifs_change_the_callers_array_in_place_as_loops_do():
    @kiln.syntax
    def bump(x, c):
        if c:
            x += 1.0
        return x

    @kiln.syntax
    def bump_new(x, c):
        if c:
            x = x + 1.0
        return x

    for cond in (kiln.Bool([True, False, True]), True):
        a = kiln.Float32([1.0, 2.0, 3.0])
        alias = a
        r = bump(a, cond)
        want = [2.0, 2.0, 4.0] if not isinstance(cond, bool) else [2.0, 3.0, 4.0]
        assert r is a and alias.tolist() == want
    b = kiln.Float32([1.0, 2.0, 3.0])
    r = bump_new(b, kiln.Bool([True, False, True]))
    assert r is not b and b.tolist() == [1.0, 2.0, 3.0] and r.tolist() == [2.0, 2.0, 4.0]
