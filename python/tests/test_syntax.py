"""``@kiln.syntax`` (Dr.Jit's ``@dr.syntax``): Python ``while``/``if`` on kiln arrays traced into
kernels, checked lane by lane against the same function run in plain Python on each lane; Python
conditions keep Python's semantics; what cannot be traced is left as written."""

import gc

import numpy as np
import pytest

import kiln


@pytest.fixture(autouse=True)
def no_leak():
    gc.collect()
    before = kiln.stats()["vars_alive"]
    yield
    gc.collect()
    assert kiln.stats()["vars_alive"] == before


def collatz_py(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@kiln.syntax
def collatz(n, mode=None):
    steps = kiln.zeros(kiln.UInt32, len(n))
    while kiln.hint(n != 1, mode=mode):
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@pytest.mark.parametrize("mode", [None, "symbolic", "evaluated"])
@pytest.mark.parametrize("size", [1, 7, 16, 17, 1000])
def test_collatz_per_lane_trip_counts(mode, size):
    start = [1 + (k * 7919) % 5000 for k in range(size)]
    got = collatz(kiln.UInt32(start), mode).tolist()
    assert got == [collatz_py(v) for v in start]


def test_python_conditions_keep_python_semantics():
    @kiln.syntax
    def f(k, xs):
        total = 0
        i = 0
        while i < k:
            if xs is None:
                total += 100
            else:
                total += xs[i]
            i += 1
        if total > 5:
            return total
        return -total

    assert f(3, [1, 2, 3]) == 6
    assert f(2, None) == 200
    assert f(1, [1]) == -1
    assert f(0, None) == 0


def test_nested_loops_broadcast_to_the_conditions_width():
    # the state starts with one lane; the condition reads a 17-lane array: the loop has 17
    @kiln.syntax
    def triangle(mode1, mode2):
        n = kiln.arange(kiln.UInt32, 17)
        i, accum = kiln.UInt32(0), kiln.UInt32(0)
        while kiln.hint(i < n, mode=mode1):
            j = kiln.UInt32(0)
            while kiln.hint(j < i, mode=mode2):
                j += 1
                accum += 1
            i += 1
        return accum

    want = [k * (k - 1) // 2 for k in range(17)]
    for m1, m2 in [("symbolic", "symbolic"), ("evaluated", "evaluated"), ("evaluated", "symbolic")]:
        assert triangle(m1, m2).tolist() == want, (m1, m2)


def test_closures_share_cells_and_temporaries_are_unbound_after():
    scale = [2.0]

    @kiln.syntax
    def grow(x, n):
        i = kiln.UInt32(0)
        while i < n:
            x = x * scale[0]
            tmp = x + 1  # noqa: F841 (a temporary of the traced body)
            i += 1
        return x, "tmp" in locals()

    x, has_tmp = grow(kiln.Float32(1, 1, 1), kiln.UInt32(1, 2, 3))
    assert x.tolist() == [2, 4, 8] and not has_tmp
    scale[0] = 3.0
    assert grow(kiln.Float32(1, 1), kiln.UInt32(1, 2))[0].tolist() == [3, 9]

    factor = 2

    @kiln.syntax
    def times(x):
        if x > 0:
            x = x * factor
        return x

    assert times(kiln.Int32(1, -1)).tolist() == [2, -1]
    factor = 5  # the rewritten function reads the same cell
    assert times(kiln.Int32(1, -1)).tolist() == [5, -1]


def test_branches_define_new_variables_in_both_or_fail_clearly():
    @kiln.syntax
    def both(x):
        if x > 0:
            z = x * 2
        else:
            z = -x
        return z

    assert both(kiln.Float32(1, -1, 3)).tolist() == [2, 1, 6]

    @kiln.syntax
    def one(x):
        if x > 0:
            z = x
        return z

    with pytest.raises(ValueError, match="'z' is assigned in only one branch"):
        one(kiln.Float32(1, -1))
    # a Python condition: Python's own rule (the name is unbound where the branch did not run)
    with pytest.raises(UnboundLocalError):
        one(-1.0)
    assert one(2.0) == 2.0


def test_hints_exclude_max_iterations_and_scalar_mode():
    @kiln.syntax
    def f(n, limit):
        i = kiln.zeros(kiln.UInt32, len(n))
        seen = kiln.UInt32(0)
        while kiln.hint(i < n, max_iterations=limit, label="counted"):
            i += 1
        k = 0
        while kiln.hint(k < 3, mode="scalar"):
            k += 1
        return i, k

    i, k = f(kiln.UInt32(0, 3, 5), -1)
    assert i.tolist() == [0, 3, 5] and k == 3
    # a truncated loop is reported by the next read (kiln's rule for `max_iterations`)
    with pytest.raises(kiln.Error, match="max_iterations"):
        f(kiln.UInt32(0, 3, 5), 2)[0].tolist()

    @kiln.syntax
    def excluded(x):
        i = kiln.UInt32(0, 0)
        counter = kiln.UInt32(0, 0)
        while kiln.hint(i < 3, exclude=[counter]):
            i += 1
        return i, counter

    i, c = excluded(kiln.Float32(1, 2))
    assert i.tolist() == [3, 3] and c.tolist() == [0, 0]
    with pytest.raises(SyntaxError, match="does not apply"):
        @kiln.syntax
        def bad(x):
            if kiln.hint(x > 0, max_iterations=3):
                x = x + 1
            return x


def test_break_return_and_continue_are_left_as_written():
    @kiln.syntax
    def first_over(xs, limit):
        found = None
        for x in xs:
            if x > limit:
                found = x
                break
        while True:
            if found is None:
                return -1
            return found

    assert first_over([1, 5, 9], 4) == 5 and first_over([1], 4) == -1

    @kiln.syntax
    def traced_break(x):
        while x < 10:
            x = x + 1
            if x == 5:
                break
        return x

    # the loop stays a Python loop: on a many-lane array its truth is ambiguous, as without
    # the decorator
    with pytest.raises(kiln.Error, match="ambiguous"):
        traced_break(kiln.Int32(1, 2))
    assert traced_break(kiln.Int32(1)).tolist() == [5]


def test_gradients_flow_through_rewritten_loops_and_branches():
    @kiln.syntax
    def power(x, n):
        acc = kiln.Float64(1.0)
        i = kiln.zeros(kiln.UInt32, len(n))
        while kiln.hint(i < n, max_iterations=-1):
            if x > 0:
                acc = acc * x
            else:
                acc = acc * (-x)
            i += 1
        return acc

    x0 = np.array([1.5, -0.7, 2.0])
    n = kiln.UInt32(3, 2, 0)
    x = kiln.Float64(x0)
    kiln.enable_grad(x)
    y = power(x, n)
    kiln.backward(kiln.sum(y))
    g = kiln.grad(x).numpy()
    h = 1e-6
    for k in range(3):
        up, dn = x0.copy(), x0.copy()
        up[k] += h
        dn[k] -= h
        fd = (kiln.sum(power(kiln.Float64(up), n)).numpy()[0]
              - kiln.sum(power(kiln.Float64(dn), n)).numpy()[0]) / (2 * h)
        assert g[k] == pytest.approx(fd, rel=1e-6, abs=1e-9), k


def test_defaults_decorators_and_errors_inside():
    @kiln.syntax
    def f(x, step=2, *, until=10):
        while x < until:
            x += step
        return x

    assert f(kiln.Int32(1, 5)).tolist() == [11, 11]
    assert f(kiln.Int32(1, 5), 5, until=7).tolist() == [11, 10]
    assert f.__name__ == "f" and f.__wrapped__ is not None

    @kiln.syntax
    def raises(x):
        while x < 10:
            raise KeyError("from the body")
        return x

    with pytest.raises(KeyError, match="from the body"):
        raises(kiln.Int32(1, 2))
    with pytest.raises(TypeError, match="decorates functions"):
        kiln.syntax(42)


def test_print_code_shows_the_rewrite(capsys):
    @kiln.syntax(print_code=True)
    def f(x):
        while x < 3:
            x += 1
        return x

    out = capsys.readouterr().out
    assert "_while" in out and "def __kiln_body_0(x)" in out
    assert f(kiln.Int32(0, 5)).tolist() == [3, 5]


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_tensor_conditions(shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

    @kiln.syntax
    def clamp_up(t):
        if t < 2:
            t = t * 0 + 2
        return t

    got = clamp_up(kiln.TensorXf(a))
    assert isinstance(got, kiln.TensorXf) and got.shape == shape
    np.testing.assert_array_equal(got.numpy(), np.maximum(a, 2))
