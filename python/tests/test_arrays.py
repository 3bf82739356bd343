"""Dr.Jit's array face: construction, operators and type promotion, the math library, reductions,
gather/scatter and NumPy interop, each checked against NumPy on the same data."""

import gc
import math

import numpy as np
import pytest

import kiln

SIZES = [0, 1, 7, 16, 17, 1000, 4097]
FLOATS = [(kiln.Float32, np.float32), (kiln.Float64, np.float64)]
INTS = [(kiln.Int32, np.int32), (kiln.UInt32, np.uint32), (kiln.Int64, np.int64), (kiln.UInt64, np.uint64)]


def data(n, dt, seed=0, lo=-10, hi=10):
    rng = np.random.default_rng(seed + n)
    if np.issubdtype(dt, np.floating):
        return rng.uniform(lo, hi, n).astype(dt)
    if np.issubdtype(dt, np.unsignedinteger):
        return rng.integers(0, hi * 100, n).astype(dt)
    return rng.integers(lo * 100, hi * 100, n).astype(dt)


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def close(a, b, dt):
    a = np.asarray(a)
    if np.issubdtype(dt, np.floating):
        tol = 2e-6 if dt == np.float32 else 1e-13
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(a, b)


# ---- construction ------------------------------------------------------------------------------


def test_constructors_take_numbers_lists_numpy_and_arrays():
    assert kiln.Float32(1, 2, 3).tolist() == [1.0, 2.0, 3.0]
    assert kiln.Float32([1, 2, 3]).tolist() == [1.0, 2.0, 3.0]
    assert kiln.Int32(np.array([4, 5], dtype=np.int64)).tolist() == [4, 5]
    assert kiln.Float64(kiln.Int32([1, 2])).tolist() == [1.0, 2.0]
    assert kiln.Int32(kiln.Float32([1.7, -1.7])).tolist() == [1, -1]  # casts truncate
    assert len(kiln.Float32()) == 0
    assert kiln.Bool([True, False]).tolist() == [True, False]
    assert kiln.Float32(2.5).tolist() == [2.5]
    assert isinstance(kiln.Float32(1), kiln.ArrayBase)


def test_numpy_types_kiln_lacks_are_widened():
    x = kiln.Float32(np.array([1, 2], dtype=np.float16))
    assert x.tolist() == [1.0, 2.0]
    y = kiln.Int32(np.array([-3, 4], dtype=np.int8))
    assert y.tolist() == [-3, 4]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kt,dt", FLOATS + INTS)
def test_numpy_round_trip(n, kt, dt):
    a = data(n, dt)
    x = kt(a)
    assert len(x) == n and x.shape == (n,)
    close(x.numpy(), a, dt)
    close(np.asarray(x), a, dt)
    assert np.asarray(x).dtype == dt


def test_numpy_view_is_zero_copy_and_read_only():
    x = kiln.Float32(np.arange(1000, dtype=np.float32)) * 2.0
    v = x.numpy()
    w = x.numpy()
    assert v.ctypes.data == w.ctypes.data  # both views of kiln's one buffer
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 5.0


def test_a_numpy_view_keeps_its_values_when_kiln_writes_the_array():
    x = kiln.Float32(np.arange(8, dtype=np.float32))
    x.eval()
    v = x.numpy()
    kiln.scatter(x, 100.0, kiln.UInt32([0, 1]))
    x[2] = -1.0
    assert x.tolist()[:3] == [100.0, 100.0, -1.0]
    assert v.tolist() == list(range(8))  # the view still shows the values it was taken of
    del x
    gc.collect()
    assert v.sum() == 28  # and outlives the array


def test_conversions_of_one_element():
    assert float(kiln.Float32(2.5)) == 2.5
    assert int(kiln.Int64(-7)) == -7
    assert bool(kiln.Bool(True)) is True
    assert [1, 2, 3][kiln.Int32(1)] == 2
    with pytest.raises(ValueError, match="ambiguous"):
        bool(kiln.Float32([1, 2]))
    with pytest.raises(ValueError):
        float(kiln.Float32([1, 2]))


def test_indexing():
    x = kiln.Int32(np.arange(10, dtype=np.int32))
    assert x[3] == 3 and x[-1] == 9
    assert x[2:8:2].tolist() == [2, 4, 6]
    assert x[::-1].tolist() == list(range(9, -1, -1))
    assert x[kiln.UInt32([9, 0])].tolist() == [9, 0]
    assert list(x) == list(range(10))
    with pytest.raises(IndexError):
        x[10]
    with pytest.raises(IndexError):
        x[-11]
    with pytest.raises(TypeError):
        x["a"]


# ---- operators ---------------------------------------------------------------------------------

BINARY = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kt,dt", FLOATS + INTS)
@pytest.mark.parametrize("name,f", BINARY)
def test_arithmetic_matches_numpy(n, kt, dt, name, f):
    a, b = data(n, dt, 1), data(n, dt, 2)
    with np.errstate(over="ignore"):
        want = f(a, b)
    close(f(kt(a), kt(b)), want, dt)
    # a Python scalar on either side takes the array's type
    with np.errstate(over="ignore"):
        close(f(kt(a), 3), f(a, dt(3)), dt)
        close(f(3, kt(a)), f(dt(3), a), dt)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kt,dt", FLOATS)
def test_float_division_power_and_comparisons(n, kt, dt):
    a, b = data(n, dt, 1), data(n, dt, 2, lo=1, hi=5)
    x, y = kt(a), kt(b)
    close(x / y, a / b, dt)
    close(x // y, np.floor(a / b), dt)
    close(y ** 2.0, b**2, dt)
    for op in ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"]:
        got = getattr(x, op)(y)
        assert isinstance(got, kiln.Bool)
        np.testing.assert_array_equal(got.numpy(), getattr(a, op)(b))
    close(-x, -a, dt)
    close(abs(x), np.abs(a), dt)


@pytest.mark.parametrize("kt,dt", INTS)
def test_integer_division_truncates_like_c(kt, dt):
    a = np.array([7, 9, 100, 5], dtype=dt)
    b = np.array([2, 4, 7, 5], dtype=dt)
    assert (kt(a) // kt(b)).tolist() == (a // b).tolist()
    assert (kt(a) % kt(b)).tolist() == (a % b).tolist()
    if kt in (kiln.Int32, kiln.Int64):
        assert (kt([-7]) // kt([2])).tolist() == [-3]  # C's rule, as in Dr.Jit (Python: -4)
        assert (kt([-7]) % kt([2])).tolist() == [-1]
    q = kt(a) / kt(b)  # true division gives floats
    assert isinstance(q, (kiln.Float32, kiln.Float64))
    np.testing.assert_allclose(q.numpy(), a / b, rtol=1e-6)


@pytest.mark.parametrize("kt,dt", INTS)
def test_bitwise(kt, dt):
    a, b = data(50, dt, 1), data(50, dt, 2)
    np.testing.assert_array_equal((kt(a) & kt(b)).numpy(), a & b)
    np.testing.assert_array_equal((kt(a) | kt(b)).numpy(), a | b)
    np.testing.assert_array_equal((kt(a) ^ kt(b)).numpy(), a ^ b)
    np.testing.assert_array_equal((~kt(a)).numpy(), ~a)
    np.testing.assert_array_equal((kt(a) << 3).numpy(), a << dt(3))
    np.testing.assert_array_equal((kt(a) >> 2).numpy(), a >> dt(2))


def test_masks():
    m, k = kiln.Bool([True, True, False]), kiln.Bool([True, False, False])
    assert (m & k).tolist() == [True, False, False]
    assert (m | k).tolist() == [True, True, False]
    assert (m ^ k).tolist() == [False, True, False]
    assert (~m).tolist() == [False, False, True]
    with pytest.raises(TypeError, match="masks"):
        m + k


def test_promotion_follows_dr_jit():
    assert isinstance(kiln.Int32(1) + kiln.Float32(1), kiln.Float32)
    assert isinstance(kiln.Float32(1) + kiln.Float64(1), kiln.Float64)
    assert isinstance(kiln.Int32(1) + kiln.UInt32(1), kiln.UInt32)
    assert isinstance(kiln.Int32(1) + kiln.Int64(1), kiln.Int64)
    assert isinstance(kiln.Int32(1) + 1.5, kiln.Float32)  # a float beside integers
    assert isinstance(kiln.Float64(1) + 1, kiln.Float64)  # a Python number takes the array's type
    assert isinstance(kiln.UInt32([1]) - 2, kiln.UInt32)
    assert (kiln.UInt32([1]) - 2).tolist() == [2**32 - 1]  # wraps, as in C


def test_numpy_operands_defer_to_kiln():
    x = kiln.Float32([1, 2, 3])
    a = np.array([10, 20, 30], dtype=np.float32)
    r = a + x
    assert isinstance(r, kiln.Float32)
    assert r.tolist() == [11, 22, 33]
    assert (x * a).tolist() == [10, 40, 90]


def test_errors_name_the_problem():
    with pytest.raises(kiln.Error) as e:
        kiln.Float32([1, 2, 3]) + kiln.Float32([1, 2])
    assert isinstance(e.value, ValueError)
    assert "3 elements" in str(e.value) and "2" in str(e.value)
    with pytest.raises(TypeError):
        kiln.Float32([1.0]) & kiln.Float32([1.0])
    with pytest.raises(TypeError):
        kiln.Float32(["a"])
    with pytest.raises(TypeError):
        kiln.Float32([1]) + "a"
    with pytest.raises(ValueError, match="out of range"):
        kiln.Int32(2**40)
    with pytest.raises(ValueError, match="one-dimensional"):
        kiln.Float32(np.zeros((2, 2)))
    with pytest.raises(TypeError):
        hash(kiln.Float32(1))


# ---- math --------------------------------------------------------------------------------------

MATH = [
    ("sqrt", np.sqrt, 0.1, 10),
    ("exp", np.exp, -5, 5),
    ("exp2", np.exp2, -5, 5),
    ("log", np.log, 0.1, 10),
    ("log2", np.log2, 0.1, 10),
    ("sin", np.sin, -10, 10),
    ("cos", np.cos, -10, 10),
    ("tan", np.tan, -1.5, 1.5),
    ("asin", np.arcsin, -1, 1),
    ("acos", np.arccos, -1, 1),
    ("atan", np.arctan, -10, 10),
    ("sinh", np.sinh, -5, 5),
    ("cosh", np.cosh, -5, 5),
    ("tanh", np.tanh, -5, 5),
    ("floor", np.floor, -10, 10),
    ("ceil", np.ceil, -10, 10),
    ("round", np.round, -10, 10),
    ("trunc", np.trunc, -10, 10),
    ("abs", np.abs, -10, 10),
    ("square", np.square, -10, 10),
    ("sign", np.sign, -10, 10),
    ("rcp", lambda a: 1 / a, 0.5, 10),
    ("rsqrt", lambda a: 1 / np.sqrt(a), 0.5, 10),
]


@pytest.mark.parametrize("name,ref,lo,hi", MATH)
@pytest.mark.parametrize("kt,dt", FLOATS)
def test_math_matches_numpy(name, ref, lo, hi, kt, dt):
    a = data(1001, dt, 3, lo, hi)
    got = getattr(kiln, name)(kt(a)).numpy()
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got, ref(a.astype(np.float64)), rtol=tol, atol=tol)


def test_erf_and_scalars():
    a = np.linspace(-3, 3, 101)
    want = np.array([math.erf(v) for v in a])
    np.testing.assert_allclose(kiln.erf(kiln.Float64(a)).numpy(), want, rtol=1e-12, atol=1e-14)
    assert kiln.sqrt(16.0) == 4.0  # a Python number gives a Python float
    assert isinstance(kiln.sqrt(16.0), float)


def test_binary_math_functions():
    a, b = data(100, np.float64, 1), data(100, np.float64, 2)
    x, y = kiln.Float64(a), kiln.Float64(b)
    np.testing.assert_allclose(kiln.atan2(x, y).numpy(), np.arctan2(a, b), rtol=1e-12)
    np.testing.assert_array_equal(kiln.minimum(x, y).numpy(), np.minimum(a, b))
    np.testing.assert_array_equal(kiln.maximum(x, 0.0).numpy(), np.maximum(a, 0))
    np.testing.assert_array_equal(kiln.clip(x, -1, 1).numpy(), np.clip(a, -1, 1))
    np.testing.assert_allclose(kiln.fma(x, y, 1.0).numpy(), a * b + 1, rtol=1e-13)
    np.testing.assert_array_equal(kiln.copysign(x, y).numpy(), np.copysign(a, b))
    np.testing.assert_allclose(kiln.power(kiln.abs(x), 0.5).numpy(), np.abs(a) ** 0.5, rtol=1e-13)
    np.testing.assert_array_equal(kiln.select(x < y, x, y).numpy(), np.where(a < b, a, b))


def test_nan_and_inf():
    x = kiln.Float32([np.nan, np.inf, -np.inf, 1.0])
    assert kiln.isnan(x).tolist() == [True, False, False, False]
    assert kiln.isinf(x).tolist() == [False, True, True, False]
    assert kiln.isfinite(x).tolist() == [False, False, False, True]
    assert (x == x).tolist() == [False, True, True, True]


# ---- constructors and reductions -----------------------------------------------------------------


def test_constructors():
    assert kiln.arange(kiln.Int32, 5).tolist() == [0, 1, 2, 3, 4]
    assert kiln.arange(kiln.Int32, 2, 11, 3).tolist() == [2, 5, 8]
    assert kiln.arange(kiln.Float32, 0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]
    np.testing.assert_allclose(kiln.linspace(kiln.Float64, 0, 1, 5).numpy(), np.linspace(0, 1, 5))
    np.testing.assert_allclose(
        kiln.linspace(kiln.Float64, 0, 1, 4, endpoint=False).numpy(), np.linspace(0, 1, 4, endpoint=False)
    )
    assert kiln.zeros(kiln.Float32, 3).tolist() == [0, 0, 0]
    assert kiln.ones(kiln.UInt64, 2).tolist() == [1, 1]
    assert kiln.full(kiln.Int32, 7, 3).tolist() == [7, 7, 7]
    o = kiln.opaque(kiln.Float32, 2.5, 4)
    assert o.is_evaluated and o.tolist() == [2.5] * 4
    assert len(kiln.zeros(kiln.Float32, 0)) == 0
    with pytest.raises(TypeError):
        kiln.arange(int, 3)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kt,dt", FLOATS + INTS)
def test_reductions_match_numpy(n, kt, dt):
    a = data(n, dt, 5, lo=-3, hi=3)
    x = kt(a)
    with np.errstate(over="ignore"):
        close(kiln.sum(x).numpy()[0], a.sum(dtype=dt), dt) if n else None
    if n:
        close(kiln.min(x).numpy()[0], a.min(), dt)
        close(kiln.max(x).numpy()[0], a.max(), dt)
        close(kiln.prefix_sum(x).numpy(), np.concatenate([[0], np.cumsum(a, dtype=dt)[:-1]]).astype(dt), dt)
        close(kiln.cumsum(x).numpy(), np.cumsum(a, dtype=dt), dt)
    assert kiln.width(x) == n


def test_mask_reductions():
    m = kiln.Float32([1, -2, 3, -4]) > 0
    assert kiln.count(m) == 2
    assert kiln.any(m) and not kiln.all(m) and not kiln.none(m)
    assert kiln.compress(m).tolist() == [0, 2]
    assert kiln.all(kiln.Bool()) and not kiln.any(kiln.Bool())
    np.testing.assert_allclose(kiln.mean(kiln.Int32([1, 2, 3, 4])).numpy(), [2.5])
    assert kiln.dot(kiln.Float64([1, 2, 3]), kiln.Float64([4, 5, 6])).tolist() == [32.0]
    np.testing.assert_allclose(kiln.norm(kiln.Float64([3, 4])).numpy(), [5.0])
    assert kiln.block_sum(kiln.Int32(list(range(6))), 2).tolist() == [1, 5, 9]


# ---- memory ------------------------------------------------------------------------------------


def test_gather_and_scatter():
    src = kiln.Float32([10, 20, 30, 40])
    idx = kiln.UInt32([3, 0, 7, 1])  # 7 is out of range: reads 0
    assert kiln.gather(kiln.Float32, src, idx).tolist() == [40, 10, 0, 20]
    active = kiln.Bool([True, False, True, True])
    assert kiln.gather(kiln.Float32, src, idx, active).tolist() == [40, 0, 0, 20]
    t = kiln.zeros(kiln.Float32, 4)
    kiln.scatter(t, kiln.Float32([1, 2, 3]), kiln.UInt32([2, 0, 9]))  # 9 is dropped
    assert t.tolist() == [2, 0, 1, 0]
    kiln.scatter_reduce(kiln.ReduceOp.Add, t, 1.0, kiln.UInt32([0, 0, 3]))
    assert t.tolist() == [4, 0, 1, 1]
    kiln.scatter_add(t, kiln.Float32([5, 5]), kiln.UInt32([1, 1]), kiln.Bool([True, False]))
    assert t.tolist() == [4, 5, 1, 1]
    kiln.scatter_reduce(kiln.ReduceOp.Max, t, 3.0, kiln.UInt32([0, 1, 2, 3]))
    assert t.tolist() == [4, 5, 3, 3]
    with pytest.raises(TypeError, match="integers"):
        kiln.gather(kiln.Float32, src, kiln.Float32([1.0]))


def test_histogram_with_scatter_reduce_matches_numpy():
    rng = kiln.PCG32(100_000)
    bins = rng.next_uint32_bounded(16)
    h = kiln.zeros(kiln.UInt32, 16)
    kiln.scatter_reduce(kiln.ReduceOp.Add, h, 1, bins)
    np.testing.assert_array_equal(h.numpy(), np.bincount(bins.numpy(), minlength=16))


def test_eval_and_labels():
    x = kiln.Float32([1, 2]) * 3
    y = x + 1
    assert not y.is_evaluated
    kiln.eval(x, [y])
    assert x.is_evaluated and y.is_evaluated
    kiln.set_label(y, "my_y")
    assert y.label == "my_y"
    assert "my_y" in kiln.whos_str()
    x.label = "xx"
    assert x.label == "xx"
    kiln.eval()
    kiln.sync_thread()


# ---- random ------------------------------------------------------------------------------------


def pcg32_reference(initstate, initseq, draws):
    """The reference pcg32_srandom_r / pcg32_random_r, in Python."""
    mask = (1 << 64) - 1
    state, inc = 0, ((initseq << 1) | 1) & mask
    state = (state * 6364136223846793005 + inc) & mask
    state = (state + initstate) & mask
    state = (state * 6364136223846793005 + inc) & mask
    out = []
    for _ in range(draws):
        old = state
        state = (old * 6364136223846793005 + inc) & mask
        xorshifted = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        rot = old >> 59
        out.append(((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & 0xFFFFFFFF)
    return out


def test_pcg32_matches_the_reference():
    rng = kiln.PCG32(4, 42, kiln.UInt64([54, 54, 1, 2]))
    draws = [rng.next_uint32().tolist() for _ in range(3)]
    for lane, seq in enumerate([54, 54, 1, 2]):
        assert [d[lane] for d in draws] == pcg32_reference(42, seq, 3)
    assert pcg32_reference(42, 54, 1)[0] == 0xA15C02B7
    u = kiln.PCG32(10_000).next_float32().numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert len(kiln.PCG32(5)) == 5


def test_monte_carlo_pi():
    rng = kiln.PCG32(1 << 20)
    x, y = rng.next_float32(), rng.next_float32()
    inside = kiln.count(x * x + y * y < 1.0)
    assert abs(4 * inside / (1 << 20) - math.pi) < 0.01


def test_dlpack_both_ways():
    x = kiln.Float32([1.0, 2.0, 3.0]) * 2.0
    a = np.from_dlpack(x)  # NumPy 2 asks for DLPack 1.0: a read-only view, no copy
    assert a.tolist() == [2.0, 4.0, 6.0] and not a.flags.writeable
    assert a.ctypes.data == x.numpy().ctypes.data
    assert x.__dlpack_device__() == (1, 0)
    legacy = x.__dlpack__()  # an older consumer gets a copy it may write
    assert legacy is not None
    t = kiln.TensorXf64(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(6.0).reshape(2, 3))
    back = kiln.from_dlpack(np.arange(4, dtype=np.int64))
    assert isinstance(back, kiln.Int64) and back.tolist() == [0, 1, 2, 3]
    m = kiln.from_numpy(np.ones((2, 2), dtype=np.float32))
    assert isinstance(m, kiln.TensorXf) and m.shape == (2, 2)


@pytest.mark.parametrize("kt,dt", INTS)
def test_integer_power_is_exact_and_wraps_like_numpy(kt, dt):
    base = np.array([3, 7, 2, 0, 1, 5], dtype=dt)
    exp = np.array([19, 11, 31, 5, 1000, 0], dtype=dt)
    with np.errstate(over="ignore"):
        want = np.power(base, exp)
    assert (kt(base) ** kt(exp)).tolist() == want.tolist()
    assert (kt(base) ** 3).tolist() == (base**3).tolist()
    if kt in (kiln.Int32, kiln.Int64):
        assert (kt([2, 1, -1, -1]) ** kt([-1, -5, -3, -2])).tolist() == [0, 1, -1, 1]


def test_inverse_hyperbolics_are_accurate_far_and_near():
    v = np.array([-1e8, -1e4, -1000.0, -1.0, -1e-8, 1e-8, 0.5, 1e4, 1e8])
    np.testing.assert_allclose(kiln.asinh(kiln.Float64(v)).numpy(), np.arcsinh(v), rtol=1e-13)
    w = np.array([1.0, 1.5, 10.0, 1e6, 1e20])
    np.testing.assert_allclose(kiln.acosh(kiln.Float64(w)).numpy(), np.arccosh(w), rtol=1e-13)
    u = np.array([-0.9, -1e-5, 1e-8, 0.5, 0.999])
    np.testing.assert_allclose(kiln.atanh(kiln.Float64(u)).numpy(), np.arctanh(u), rtol=1e-12)


def test_lists_convert_like_single_values():
    assert kiln.Int32([1.5, -2.7]).tolist() == kiln.Int32(1.5).tolist() + kiln.Int32(-2.7).tolist()
    assert kiln.Bool([1, 0, 2]).tolist() == [True, False, True]


@pytest.mark.parametrize(
    "kt,dt,op,rhs",
    [
        (kiln.Float32, np.float32, "+", 1.5), (kiln.Float64, np.float64, "-", 0.25),
        (kiln.Float32, np.float32, "*", 3), (kiln.Float64, np.float64, "/", 4.0),
        (kiln.Int32, np.int32, "+", 7), (kiln.UInt32, np.uint32, "*", 3),
        (kiln.Int64, np.int64, "-", 5), (kiln.UInt32, np.uint32, "<<", 2),
        (kiln.Int32, np.int32, "&", 6), (kiln.UInt64, np.uint64, "|", 9),
        (kiln.Float32, np.float32, "**", 2),
    ],
)  # fmt: skip
def test_in_place_operators_change_the_object_itself(kt, dt, op, rhs):
    # Dr.Jit's and NumPy's rule: `x op= y` changes x, and every name bound to it sees it
    base = np.arange(1, 8)
    x = kt(base.astype(dt))
    alias = x
    before = id(x)
    exec(f"x {op}= rhs", {"rhs": rhs}, scope := {"x": x})
    assert id(scope["x"]) == before and scope["x"] is alias
    want = base.astype(dt)
    exec(f"want {op}= dt(rhs)", {"rhs": rhs, "dt": dt}, w := {"want": want})
    np.testing.assert_allclose(np.array(alias), w["want"], rtol=1e-6)


def test_in_place_operators_with_arrays_tensors_and_vectors():
    x = kiln.Float32([1.0, 2.0])
    x += kiln.Float32([10.0, 20.0])
    assert x.tolist() == [11.0, 22.0]
    # a one-lane array grows to the other operand's width, as in Dr.Jit
    s = kiln.Float32(1.0)
    alias = s
    s += kiln.arange(kiln.Float32, 3)
    assert alias.tolist() == [1.0, 2.0, 3.0]
    # a wider type of the same kind is cast back (NumPy's same_kind)
    y = kiln.Float32([1.0])
    y += kiln.Float64([0.5])
    assert type(y) is kiln.Float32 and y.tolist() == [1.5]
    # another kind is an error that names the out-of-place form, and leaves x as it was
    i = kiln.Int32([3, 4])
    with pytest.raises(TypeError, match=r"x = x / y"):
        i /= 2
    assert type(i) is kiln.Int32 and i.tolist() == [3, 4]
    with pytest.raises(TypeError, match=r"x = x \+ y"):
        x += kiln.Array3f(1.0, 2.0, 3.0)
    assert x.tolist() == [11.0, 22.0]
    # tensors keep their identity and take the broadcast shape
    t = kiln.TensorXf(np.ones((2, 3), np.float32))
    talias = t
    t *= kiln.TensorXf(np.arange(3, dtype=np.float32))
    assert talias.shape == (2, 3) and talias.numpy().tolist() == [[0, 1, 2], [0, 1, 2]]
    # vectors change their components in place
    v = kiln.Array3f(1.0, 2.0, 3.0)
    valias = v
    v += 1.0
    v *= kiln.Array3f(2.0, 2.0, 2.0)
    assert valias is v and [c.tolist() for c in valias] == [[4.0], [6.0], [8.0]]


def test_in_place_operators_record_derivatives():
    x = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(x)
    y = x * 1.0
    y *= x  # y = x², the object y now holds the product's node
    kiln.backward(kiln.sum(y))
    assert x.grad.tolist() == [2.0, 4.0]


def test_block_reduce_matches_numpy():
    rng = np.random.default_rng(3)
    v = rng.uniform(-2, 2, 23).astype(np.float32)
    pad = lambda a, fill: np.concatenate([a, np.full(-len(a) % 4, fill, a.dtype)]).reshape(-1, 4)
    x = kiln.Float32(v)
    for op, f, fill in [(kiln.ReduceOp.Mul, np.prod, 1), (kiln.ReduceOp.Min, np.min, np.inf),
                        (kiln.ReduceOp.Max, np.max, -np.inf), (kiln.ReduceOp.Add, np.sum, 0)]:
        np.testing.assert_allclose(np.array(kiln.block_reduce(op, x, 4)), f(pad(v, fill), axis=1),
                                   rtol=1e-5)
    i = kiln.UInt32([6, 3, 5, 1, 7])
    assert kiln.block_reduce(kiln.ReduceOp.Or, i, 2).tolist() == [7, 5, 7]
    with pytest.raises(kiln.InvalidArgument, match="And/Or for integers"):
        kiln.block_reduce(kiln.ReduceOp.And, x, 2)
    with pytest.raises(ValueError, match="mode"):
        kiln.block_reduce(kiln.ReduceOp.Max, x, 2, mode="fast")


def test_scheduled_arrays_join_the_next_evaluation():
    x = kiln.arange(kiln.Float32, 10)
    y, z = x * 2.0, x + 1.0
    t = kiln.TensorXf(np.ones((2, 2), np.float32)) * 3.0
    v = kiln.Array3f(x, x * 3.0, x - 1.0)
    kiln.schedule(y, [t], {"v": v})
    with kiln.scoped_set_flag(kiln.JitFlag.KernelHistory, True):
        assert z.tolist()[:2] == [1.0, 2.0]  # a read evaluates what was scheduled too
        launched = kiln.kernel_history()
        # y, v's three components and z share one kernel over 10 lanes; the tensor has its own
        assert sorted((k["size"], k["output_count"]) for k in launched) == [(4, 1), (10, 5)]
        assert y.tolist()[3] == 6.0 and t.numpy().tolist() == [[3, 3], [3, 3]]
        assert kiln.kernel_history() == []  # nothing left to compute
    # eval() of a tensor evaluates it
    u = kiln.TensorXf(np.ones((3,), np.float32)) + 1.0
    kiln.eval(u)
    with kiln.scoped_set_flag(kiln.JitFlag.KernelHistory, True):
        assert u.numpy().tolist() == [2, 2, 2] and kiln.kernel_history() == []


def test_state_says_literal_evaluated_or_unevaluated():
    x = kiln.Float32(1.5)
    assert x.state == kiln.VarState.Literal
    y = x + kiln.arange(kiln.Float32, 3)
    assert y.state == kiln.VarState.Unevaluated
    y.eval()
    assert y.state == kiln.VarState.Evaluated
    kiln.make_opaque(x)
    assert x.state == kiln.VarState.Evaluated and x.tolist() == [1.5]
    assert kiln.opaque(kiln.UInt32, 7, 4).state == kiln.VarState.Evaluated
    assert kiln.zeros(kiln.Float64, 10).state == kiln.VarState.Literal


def test_flags_that_choose_how_dr_jit_works_are_kept_and_change_nothing():
    assert kiln.flag(kiln.JitFlag.PacketOps) and kiln.flag(kiln.JitFlag.ReuseIndices)
    assert kiln.flag(kiln.JitFlag.OptimizeCalls)
    with kiln.scoped_set_flag(kiln.JitFlag.OptimizeCalls, False):
        out = kiln.switch(kiln.UInt32([0, 1]), [lambda v: v + 1, lambda v: v * 3], kiln.Int32([5, 5]))
    assert out.tolist() == [6, 15] and kiln.flag(kiln.JitFlag.OptimizeCalls)
    x = kiln.Float32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    with kiln.scoped_set_flag(kiln.JitFlag.PacketOps, False):
        assert not kiln.flag(kiln.JitFlag.PacketOps)
        off = kiln.gather(kiln.Array4f, x, kiln.UInt32([1, 0]))
    assert kiln.flag(kiln.JitFlag.PacketOps)
    on = kiln.gather(kiln.Array4f, x, kiln.UInt32([1, 0]))
    assert off.numpy().tolist() == on.numpy().tolist() == [[5, 6, 7, 8], [1, 2, 3, 4]]
    kiln.set_flag(kiln.JitFlag.ReuseIndices, False)
    assert not kiln.flag(kiln.JitFlag.ReuseIndices | kiln.JitFlag.PacketOps)
    kiln.set_flag(kiln.JitFlag.ReuseIndices, True)


def test_make_opaque_keeps_the_gradient():
    x = kiln.arange(kiln.Float32, 3)
    kiln.enable_grad(x)
    y = x * 2.0
    kiln.make_opaque(y)
    assert y.state == kiln.VarState.Evaluated and kiln.grad_enabled(y)
    kiln.backward(y * 3.0)
    assert kiln.grad(x).tolist() == [6.0, 6.0, 6.0]


def test_pcg32_seed_takes_dr_jits_defaults():
    # `PCG32().seed(initstate=index)` gives one generator per index, sequence i in lane i
    idx = kiln.UInt64([5, 6, 7])
    rng = kiln.PCG32()
    rng.seed(initstate=idx)
    want = kiln.PCG32(3, idx, kiln.UInt64([0, 1, 2])).next_uint32().tolist()
    assert len(rng) == 3 and rng.next_uint32().tolist() == want
    rng.seed()  # the constructor's defaults, at the generator's width
    assert rng.next_float32().tolist() == kiln.PCG32(3).next_float32().tolist()


_LOGGING = """
import kiln
assert kiln.log_level() == kiln.LogLevel.Disable
kiln.set_log_level(kiln.LogLevel.Info)
assert kiln.log_level() == kiln.LogLevel.Info
(kiln.arange(kiln.Float32, 1000) * 3.0 + 1.0).eval()
kiln.set_log_level(kiln.LogLevel.Disable)
(kiln.arange(kiln.Float32, 2000) * 5.0).eval()
kiln.set_log_level("kiln::kernel=trace")
assert kiln.log_level() == "kiln::kernel=trace"
(kiln.arange(kiln.Float32, 3000) - 7.0).eval()
"""


def test_log_levels_choose_what_kiln_writes_to_stderr():
    # (the log is the process's: run in a child)
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("KILN_LOG", "KILN_DEBUG")}
    p = subprocess.run([sys.executable, "-c", _LOGGING], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    launches = [ln for ln in p.stderr.splitlines() if "launching kernel (n=" in ln]
    assert any("n=1000" in ln for ln in launches), p.stderr  # Info shows each launch
    assert not any("n=2000" in ln for ln in launches), p.stderr  # Disable shows nothing
    assert "kernel IR" in p.stderr and "n=3000" in p.stderr  # a filter string: IR at trace
    with pytest.raises(ValueError, match="LogLevel"):
        kiln.set_log_level(9)
