"""``@kiln.syntax`` (Dr.Jit's ``@dr.syntax``): Python ``while``/``if`` on kiln arrays traced into
kernels, checked lane by lane against the same function run in plain Python on each lane; Python
conditions keep Python's semantics; what cannot be traced is left as written."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


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

    # (a loop over kiln arrays raises as kiln.while_loop: a RuntimeError caused by the body's)
    with pytest.raises(RuntimeError, match="body raised KeyError: 'from the body'") as e:
        raises(kiln.Int32(1, 2))
    assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(KeyError, match="from the body"):
        raises(1)  # (over Python values, as Python raises)
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


# ---- Python's own semantics where the conditions are Python values (found adversarially) -----

G_COUNT = 0


def _same(f, *args):
    """`f` and its rewrite give the same result (or raise the same exception type)."""

    def run(g):
        try:
            return ("ok", g(*args))
        except Exception as e:  # noqa: BLE001 (compared by type)
            return ("raised", type(e))

    return run(f) == run(kiln.syntax(f))


def _global_counter(k):
    global G_COUNT
    G_COUNT = 0
    i = 0
    while i < k:
        G_COUNT += 1
        i += 1
    return G_COUNT


def _walrus_cond(n):
    c = 0
    while (n := n - 1) > 0:
        c += 1
    return c, n


def _late_binding(k):
    fs = []
    i = 0
    while i < k:
        fs.append(lambda: i)
        i += 1
    return [f() for f in fs]


def _walrus_in_comprehension(lst):
    i = 0
    found = None
    while i < 2:
        any((found := v) > 1 for v in lst)
        i += 1
    return found


def _del_and_except(c):
    x = 1
    if c:
        del x
    try:
        return x
    except UnboundLocalError:
        pass
    if c:
        try:
            raise KeyError("k")
        except KeyError as e:
            msg = str(e)
    else:
        msg = "none"
    return msg


def _match_capture(v):
    p = q = None
    if v is not None:
        match v:
            case (a, b):
                p, q = a, b
    return p, q


def _unbound_in_cond(n):
    while n > t_:  # noqa: F821 (unbound until the body runs, as the test wants)
        t_ = 5  # noqa: F841
    return n


def _named_hint(x):
    def hint(c):
        return not c

    while hint(x > 5):
        x += 1
    return x


@pytest.mark.parametrize("f,args", [
    (_global_counter, (3,)), (_walrus_cond, (5,)), (_late_binding, (3,)),
    (_walrus_in_comprehension, ([1, 5],)), (_del_and_except, (True,)), (_del_and_except, (False,)),
    (_match_capture, ((1, 2),)), (_match_capture, (None,)), (_unbound_in_cond, (3,)),
    (_named_hint, (0,)),
])
def test_python_semantics_kept(f, args):
    assert _same(f, *args)


def test_a_condition_reads_variables_a_callee_rebinds():
    n = 0

    def inc():
        nonlocal n
        n += 1

    @kiln.syntax
    def run():
        while n < 3:
            inc()
        return n

    assert run() == 3


def test_methods_mangle_private_names_and_keep_their_strings():
    class A:
        def __init__(self):
            self.__v = 2

        @kiln.syntax
        def add(self, x):
            s = """a
        b"""
            if x > 0:
                x = x + self.__v
            return x, s

    x, s = A().add(kiln.Int32(1, -1))
    assert x.tolist() == [3, -1] and s == "a\n        b"


def test_async_functions_keep_async_statements_as_written():
    import asyncio

    class Ctx:
        async def __aenter__(self):
            return 1

        async def __aexit__(self, *a):
            return False

    async def agen(k):
        for i in range(k):
            yield i

    @kiln.syntax
    async def f(k):
        total = 0
        i = 0
        while i < 2:
            async for v in agen(k):
                total += v
            i += 1
        if total > 0:
            async with Ctx() as c:
                total += c
        return total

    assert asyncio.run(f(3)) == 7


def test_generators_in_state_advance_per_lane():
    def draws(n, use_branch):
        rng = kiln.PCG32(3)
        s = kiln.zeros(kiln.Float32, 3)
        i = kiln.zeros(kiln.UInt32, 3)
        while i < n:
            if use_branch:
                s = s + rng.next_float32()
            else:
                s = s + rng.next_float32()
            i += 1
        return s, rng

    n = kiln.UInt32(0, 1, 3)
    s, rng = kiln.syntax(draws)(n, False)
    ref = kiln.PCG32(3)
    d = [ref.next_float32().numpy() for _ in range(3)]
    want = [sum(d[t][k] for t in range(c)) for k, c in enumerate([0, 1, 3])]
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-6)
    # the caller's generator advanced per lane too: its next draw is each lane's next
    np.testing.assert_array_equal(rng.next_float32().numpy(), [d[0][0], d[1][1], _fourth_draw(2)])


def _fourth_draw(lane):
    r = kiln.PCG32(3)
    for _ in range(3):
        r.next_float32()
    return r.next_float32().numpy()[lane]


def test_changing_an_object_kiln_cannot_carry_is_an_error():
    class O:
        x = 0

    @kiln.syntax
    def f(n):
        o = O()
        o.x = kiln.zeros(kiln.UInt32, 3)
        i = kiln.zeros(kiln.UInt32, 3)
        while i < n:
            o.x = o.x + 2
            i += 1
        return o.x

    with pytest.raises(TypeError, match="dataclass"):
        f(kiln.UInt32(0, 1, 4))

    @kiln.syntax
    def g(n):
        a = [kiln.zeros(kiln.UInt32, 3)]
        i = kiln.zeros(kiln.UInt32, 3)
        while i < n:
            a[0] = a[0] + 2
            i += 1
        return a[0]

    assert g(kiln.UInt32(0, 1, 4)).tolist() == [0, 2, 8]


def test_a_wrapped_function_is_refused_and_tracebacks_point_at_the_statement():
    import functools
    import traceback

    def dbl(f):
        @functools.wraps(f)
        def w(*a):
            return 2 * f(*a)

        return w

    with pytest.raises(TypeError, match="directly above"):
        @kiln.syntax
        @dbl
        def f(x):
            return x

    @kiln.syntax
    def boom(x):
        if x > 0:
            x = x / 0
        return x

    with pytest.raises(ZeroDivisionError) as e:
        boom(1)
    lines = [fr.line for fr in traceback.extract_tb(e.value.__traceback__)]
    assert "x = x / 0" in lines and "if x > 0:" in lines


def test_the_example_runs(capsys, monkeypatch):
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "syntax_loops.py"
    monkeypatch.setattr("sys.argv", [str(example), "3000"])
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "Collatz over 3000 starting values" in out and "d sqrt/da through the loop" in out
