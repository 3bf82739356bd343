"""Dr.Jit's vectors (Array3f and kin) over kiln's arrays: construction and broadcasting, operators
and the math library against NumPy on random data, dot/cross/norm/normalize, reductions over
components, gradients through vector code against analytic derivatives, NumPy round trips, the
errors and their messages; and the type stubs against the module they describe."""

import ast
import builtins
import inspect
import operator as op
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import _kiln

SIZES = [0, 1, 7, 1000]

# (vector class of 3, NumPy type) for each component type
VECTORS = [
    (kiln.Array3f, np.float32),
    (kiln.Array3f64, np.float64),
    (kiln.Array3i, np.int32),
    (kiln.Array3u, np.uint32),
    (kiln.Array3i64, np.int64),
    (kiln.Array3u64, np.uint64),
]
FLOAT_VECTORS = VECTORS[:2]

ALL_CLASSES = [
    (kiln.Array2f, kiln.Float32, 2), (kiln.Array3f, kiln.Float32, 3), (kiln.Array4f, kiln.Float32, 4),
    (kiln.Array2f64, kiln.Float64, 2), (kiln.Array3f64, kiln.Float64, 3), (kiln.Array4f64, kiln.Float64, 4),
    (kiln.Array2i, kiln.Int32, 2), (kiln.Array3i, kiln.Int32, 3), (kiln.Array4i, kiln.Int32, 4),
    (kiln.Array2u, kiln.UInt32, 2), (kiln.Array3u, kiln.UInt32, 3), (kiln.Array4u, kiln.UInt32, 4),
    (kiln.Array2i64, kiln.Int64, 2), (kiln.Array3i64, kiln.Int64, 3), (kiln.Array4i64, kiln.Int64, 4),
    (kiln.Array2u64, kiln.UInt64, 2), (kiln.Array3u64, kiln.UInt64, 3), (kiln.Array4u64, kiln.UInt64, 4),
    (kiln.Array2b, kiln.Bool, 2), (kiln.Array3b, kiln.Bool, 3), (kiln.Array4b, kiln.Bool, 4),
]  # fmt: skip


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def data(n, dt, seed=0, k=3, lo=-10, hi=10):
    """(n, k) random values of NumPy type `dt`, away from 0 (they are divisors)."""
    rng = np.random.default_rng(seed * 7919 + n)
    if np.issubdtype(dt, np.floating):
        a = rng.uniform(lo, hi, (n, k))
        a[np.abs(a) < 0.1] = 0.5
        return a.astype(dt)
    if np.issubdtype(dt, np.unsignedinteger):
        return rng.integers(1, hi * 100, (n, k)).astype(dt)
    a = rng.integers(lo * 100, hi * 100, (n, k))
    a[a == 0] = 1
    return a.astype(dt)


def close(a, b, dt=np.float32):
    a = np.asarray(a)
    if np.issubdtype(np.dtype(dt), np.floating):
        tol = 3e-6 if np.dtype(dt) == np.float32 else 1e-13
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(a, b)


# ---- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("cls,value,size", ALL_CLASSES)
def test_every_class_has_its_size_component_type_and_names(cls, value, size):
    assert cls.Size == size and cls.Value is value
    assert issubclass(cls, kiln.StaticArrayBase)
    assert not issubclass(cls, kiln.ArrayBase)  # the native functions must not take it for one
    v = cls(*range(1, size + 1))
    assert len(v) == size
    assert all(type(c) is value for c in v)
    names = "xyzw"
    for i in range(size):
        assert getattr(v, names[i]) is v[i]
    for missing in names[size:]:
        assert not hasattr(v, missing)
    assert type(v).__name__ == cls.__name__ and cls.__module__ == "kiln"


def test_components_take_numbers_lists_arrays_and_numpy():
    x = kiln.Float32([1, 2, 3])
    v = kiln.Array3f(x, [4, 5, 6], np.array([7, 8, 9], dtype=np.float64))
    assert v.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [type(c) for c in v] == [kiln.Float32] * 3
    i = kiln.Array3i(1.7, -1.7, 3)  # casts truncate, as the array classes do
    assert i.tolist() == [[1], [-1], [3]]


def test_one_value_is_given_to_every_component():
    x = kiln.Float32([1, 2])
    v = kiln.Array3f(x)
    assert v.tolist() == [[1, 2]] * 3
    assert kiln.Array4i(5).tolist() == [[5]] * 4
    # each component is an array object of its own: in-place calls on one leave the rest
    assert v.x is not v.y and v.x is not x
    kiln.enable_grad(v.x)
    assert kiln.grad_enabled(v.x)
    assert not kiln.grad_enabled(v.y) and not kiln.grad_enabled(x)


def test_a_list_or_tuple_holds_the_components():
    assert kiln.Array3f([1, 2, 3]).tolist() == [[1], [2], [3]]
    v = kiln.Array2f(([1, 2], [3, 4]))
    assert v.tolist() == [[1, 2], [3, 4]]
    assert kiln.Array2f(v.tolist()).tolist() == v.tolist()  # tolist round trip


def test_another_vector_is_cast():
    f = kiln.Array3f(1.5, -2.5, 3.0)
    i = kiln.Array3i(f)
    assert type(i) is kiln.Array3i and i.tolist() == [[1], [-2], [3]]
    d = kiln.Array3f64(i)
    assert type(d.x) is kiln.Float64
    b = kiln.Array3b(kiln.Array3f(0, 2, 0))
    assert b.tolist() == [[False], [True], [False]]


def test_no_arguments_gives_empty_components():
    v = kiln.Array3f()
    assert kiln.width(v) == 0 and v.numpy().shape == (0, 3)
    assert [len(c) for c in v] == [0, 0, 0]


def test_components_of_one_lane_broadcast():
    x = kiln.Float32([1, 2, 3, 4])
    v = kiln.Array3f(x, 2.0, kiln.Float32([7]))
    assert kiln.width(v) == 4
    assert [len(c) for c in v] == [4, 1, 1]  # kept as given: a literal costs nothing
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 7], [2, 2, 7], [3, 2, 7], [4, 2, 7]])
    assert v.tolist() == [[1, 2, 3, 4], [2] * 4, [7] * 4]
    w = v * kiln.Array3f(1, x, 1)
    np.testing.assert_array_equal(w.numpy()[:, 1], [2, 4, 6, 8])
    # one lane against none is none, as the arrays broadcast
    assert kiln.width(kiln.Array2f(kiln.Float32(), 1.0)) == 0


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", VECTORS)
def test_numpy_round_trip(n, cls, dt):
    a = data(n, dt)
    v = cls(a)
    assert kiln.width(v) == n
    out = v.numpy()
    assert out.shape == (n, 3) and out.dtype == dt
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(cls(out).numpy(), a)
    for k, c in enumerate(v):
        np.testing.assert_array_equal(c.numpy(), a[:, k])


def test_numpy_of_shape_n_gives_one_lane_per_component():
    v = kiln.Array4f(np.array([1.0, 2.0, 3.0, 4.0]))
    assert v.tolist() == [[1], [2], [3], [4]]
    assert kiln.Array2f(np.float64(3.0)).tolist() == [[3], [3]]
    b = kiln.Array2b(np.array([[True, False], [False, False]]))
    assert b.numpy().dtype == np.bool_ and b.numpy().tolist() == [[True, False], [False, False]]


def test_components_get_and_set():
    v = kiln.Array4f(1, 2, 3, 4)
    assert (v.x[0], v.y[0], v.z[0], v.w[0]) == (1, 2, 3, 4)
    v.y = kiln.Int32([7])  # cast to the component type
    v[2] = 8.5
    v[-1] = 9
    assert type(v.y) is kiln.Float32
    assert v.tolist() == [[1], [7], [8.5], [9]]
    assert [c[0] for c in v] == [1, 7, 8.5, 9]
    with pytest.raises(IndexError, match="component 4 is out of range for an Array4f"):
        v[4]
    with pytest.raises(IndexError):
        v[-5] = 1
    with pytest.raises(TypeError, match="component number"):
        v["x"]
    # lanes are checked where the vector is read (kiln's tracing sets fields one at a time)
    w = kiln.Array2f(kiln.Float32([1, 2]), 0)
    w.y = kiln.Float32([1, 2, 3])
    with pytest.raises(ValueError, match="components of an Array2f have 2, 3 lanes"):
        kiln.width(w)
    with pytest.raises(ValueError, match="components of an Array2f have 2, 3 lanes"):
        w.numpy()


def test_repr_prints_lanes_and_elides_the_middle():
    v = kiln.Array3i(kiln.arange(kiln.Int32, 3), 5, kiln.arange(kiln.Int32, 3) * 2)
    assert repr(v) == "[[0, 5, 0],\n [1, 5, 2],\n [2, 5, 4]]"
    assert str(kiln.Array2b(True, False)) == "[[true, false]]"
    assert repr(kiln.Array2f()) == "[]"
    wide = repr(kiln.Array2i(kiln.arange(kiln.Int32, 100), 1))
    lines = wide.splitlines()
    assert len(lines) == 11 and lines[0] == "[[0, 1]," and "..." in lines[5] and lines[-1] == " [99, 1]]"


# ---- operators -----------------------------------------------------------------------------------

ARITH = [op.add, op.sub, op.mul, op.truediv]


def ref(fn, a, b, dt):
    """NumPy's answer in kiln's result type: `/` of integers is a float division (Float32, or
    Float64 for 64-bit integers), as in Dr.Jit."""
    if fn is op.truediv and not np.issubdtype(dt, np.floating):
        ft = np.float64 if np.dtype(dt).itemsize == 8 else np.float32
        return (np.asarray(a).astype(ft) / np.asarray(b).astype(ft)).astype(ft)
    with np.errstate(over="ignore"):
        return fn(a, b)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", VECTORS)
@pytest.mark.parametrize("fn", ARITH, ids=lambda f: f.__name__)
def test_arithmetic_matches_numpy(n, cls, dt, fn):
    a, b = data(n, dt, 1), data(n, dt, 2)
    s = data(n, dt, 3, k=1)[:, 0]
    va, vb, arr = cls(a), cls(b), cls.Value(s)
    rdt = ref(fn, a, b, dt).dtype
    close(fn(va, vb).numpy(), ref(fn, a, b, dt), rdt)  # vector with vector
    close(fn(va, arr).numpy(), ref(fn, a, s[:, None], dt), rdt)  # an array for every component
    close(fn(arr, va).numpy(), ref(fn, s[:, None], a, dt), rdt)  # reflected, the array first
    close(fn(va, 3).numpy(), ref(fn, a, dt(3), dt), rdt)  # a Python number
    close(fn(3, va).numpy(), ref(fn, dt(3), a, dt), rdt)
    assert kiln.width(fn(va, vb)) == n


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", [(kiln.Array3i, np.int32), (kiln.Array3u, np.uint32)])
def test_integer_division_and_bitwise_operators_match_numpy(n, cls, dt):
    a, b = data(n, dt, 1), data(n, dt, 2)
    va, vb = cls(a), cls(b)
    # // and % truncate toward zero (C's and Dr.Jit's rule), where NumPy floors
    close((va // vb).numpy(), np.trunc(a.astype(np.float64) / b).astype(dt), dt)
    close((va % vb).numpy(), np.fmod(a, b), dt)
    close((va & vb).numpy(), a & b, dt)
    close((va | 6).numpy(), a | dt(6), dt)
    close((va ^ vb).numpy(), a ^ b, dt)
    close((va << 2).numpy(), a << dt(2), dt)
    close((va >> 1).numpy(), a >> dt(1), dt)
    close((~va).numpy(), ~a, dt)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", VECTORS)
def test_comparisons_give_mask_vectors(n, cls, dt):
    a, b = data(n, dt, 1), data(n, dt, 2)
    b[: n // 2] = a[: n // 2]  # some lanes equal
    va, vb = cls(a), cls(b)
    for fn in [op.lt, op.le, op.gt, op.ge, op.eq, op.ne]:
        m = fn(va, vb)
        assert type(m) is kiln.Array3b
        np.testing.assert_array_equal(m.numpy(), fn(a, b))
    s = cls.Value(a[:, 0])
    np.testing.assert_array_equal((s < va).numpy(), a[:, :1] < a)  # reflected by Python
    np.testing.assert_array_equal((va == 5).numpy(), a == 5)


@pytest.mark.parametrize("cls,dt", [(kiln.Array3f, np.float32), (kiln.Array3i, np.int32), (kiln.Array3f64, np.float64)])
def test_unary_operators(cls, dt):
    a = data(7, dt)
    v = cls(a)
    np.testing.assert_array_equal((-v).numpy(), -a)
    np.testing.assert_array_equal(abs(v).numpy(), np.abs(a))
    np.testing.assert_array_equal(kiln.abs(v).numpy(), np.abs(a))
    assert +v is v


def test_operands_are_promoted_as_the_arrays_promote_them():
    f, i = kiln.Array3f(1.5, 2.5, 3.5), kiln.Array3i(1, 2, 3)
    assert type(f + i) is kiln.Array3f and type(i + f) is kiln.Array3f
    assert type(i / 2) is kiln.Array3f  # / of integers divides in floating point
    assert type(i + 1.5) is kiln.Array3f
    assert type(kiln.Array3i64(1, 2, 3) / 2) is kiln.Array3f64
    assert type(f + kiln.Array3f64(1, 2, 3)) is kiln.Array3f64
    assert type(i + kiln.Array3u(1, 2, 3)) is kiln.Array3u
    assert type(kiln.Float64([1.0]) * f) is kiln.Array3f64
    assert type((i < 2) & (f > 2)) is kiln.Array3b


def test_numpy_arrays_are_not_guessed_at_in_operators():
    v = kiln.Array3f(1, 2, 3)
    with pytest.raises(TypeError):
        v + np.ones((1, 3), dtype=np.float32)
    with pytest.raises(TypeError):
        np.ones((1, 3), dtype=np.float32) + v
    # a list holds components, as in the constructor (Dr.Jit's rule)
    assert (v + [1, 2, 3]).tolist() == [[2], [4], [6]]
    # NumPy scalars are numbers
    assert (v * np.float32(2)).tolist() == [[2], [4], [6]]
    assert (np.float64(2) * v).tolist() == [[2], [4], [6]]


def test_in_place_operators_write_through_as_in_dr_jit():
    v = kiln.Array3f(1, 2, 3)
    alias = v
    v += 1
    assert v is alias and alias.tolist() == [[2], [3], [4]]
    # a result of a wider class cannot go into the vector: the name is bound to it instead
    w = kiln.Array3f(1, 2, 3)
    walias = w
    w *= kiln.Array3f64(2, 2, 2)
    assert type(w) is kiln.Array3f64 and walias.tolist() == [[1], [2], [3]]


# ---- the math library ----------------------------------------------------------------------------

MATH = [
    ("sqrt", np.sqrt, 0.1, 10), ("exp", np.exp, -3, 3), ("log", np.log, 0.1, 10),
    ("sin", np.sin, -3, 3), ("cos", np.cos, -3, 3), ("tanh", np.tanh, -3, 3),
    ("atan", np.arctan, -3, 3), ("floor", np.floor, -5, 5), ("rcp", np.reciprocal, 0.5, 5),
    ("square", np.square, -3, 3), ("sign", np.sign, -3, 3),
]  # fmt: skip


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name,npf,lo,hi", MATH, ids=[m[0] for m in MATH])
def test_math_functions_take_vectors(n, name, npf, lo, hi):
    a = np.random.default_rng(n).uniform(lo, hi, (n, 3))
    f = getattr(kiln, name)
    r = f(kiln.Array3f64(a))
    assert type(r) is kiln.Array3f64
    np.testing.assert_allclose(r.numpy(), npf(a), rtol=1e-13, atol=1e-15)
    r32 = f(kiln.Array3f(a))
    assert type(r32) is kiln.Array3f
    np.testing.assert_allclose(r32.numpy(), npf(a.astype(np.float32)), rtol=2e-6, atol=2e-6)


def test_math_on_integer_vectors_follows_the_arrays_rules():
    i = kiln.Array2i(4, 9)
    assert type(kiln.sqrt(i)) is kiln.Array2f and kiln.sqrt(i).tolist() == [[2], [3]]
    assert type(kiln.abs(-i)) is kiln.Array2i
    assert type(kiln.isnan(kiln.Array2f(1, float("nan")))) is kiln.Array2b
    assert kiln.isnan(kiln.Array2f(1, float("nan"))).tolist() == [[False], [True]]
    assert kiln.isfinite(kiln.Array2f(float("inf"), 1)).tolist() == [[False], [True]]


def test_plain_arrays_and_numbers_take_the_native_path():
    x = kiln.Float32([1.0, 4.0])
    assert kiln.sqrt(x).tolist() == _kiln.sqrt(x).tolist() == [1.0, 2.0]
    assert type(kiln.sqrt(x)) is kiln.Float32
    assert kiln.sqrt(2.0) == pytest.approx(2**0.5) and isinstance(kiln.sqrt(2.0), float)
    assert kiln.sum(x).tolist() == [5.0]
    assert kiln.all(x > 0) is True
    assert kiln.dot(x, x).tolist() == [17.0]
    assert kiln.pow is kiln.power and kiln.power(x, 2).tolist() == [1.0, 16.0]
    assert kiln.sqrt.__name__ == "sqrt" and "vector" in kiln.sqrt.__doc__


@pytest.mark.parametrize("n", [0, 7, 1000])
def test_functions_of_several_arguments_take_vectors(n):
    a, b = data(n, np.float32, 1), data(n, np.float32, 2)
    s = data(n, np.float32, 3, k=1)[:, 0]
    va, vb, arr = kiln.Array3f(a), kiln.Array3f(b), kiln.Float32(s)
    close(kiln.minimum(va, vb).numpy(), np.minimum(a, b))
    close(kiln.maximum(va, arr).numpy(), np.maximum(a, s[:, None]))
    close(kiln.maximum(1.0, va).numpy(), np.maximum(1, a))
    close(kiln.atan2(va, vb).numpy(), np.arctan2(a, b))
    close(kiln.copysign(va, vb).numpy(), np.copysign(a, b))
    close(kiln.power(kiln.abs(va), 2).numpy(), np.abs(a) ** 2)
    close(kiln.clip(va, -1.0, vb).numpy(), np.minimum(np.maximum(a, -1), b))
    # one rounding of the exact a*b + c: float64 holds a*b exactly
    exact = (a.astype(np.float64) * b + s[:, None]).astype(np.float32)
    np.testing.assert_allclose(kiln.fma(va, vb, arr).numpy(), exact, rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="an Array3f and an Array2f"):
        kiln.minimum(va, kiln.Array2f(1, 2))


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_select_with_vector_and_lane_masks(n):
    a, b = data(n, np.float32, 1), data(n, np.float32, 2)
    va, vb = kiln.Array3f(a), kiln.Array3f(b)
    per_component = kiln.select(va < vb, va, vb)
    assert type(per_component) is kiln.Array3f
    close(per_component.numpy(), np.where(a < b, a, b))
    per_lane = kiln.select(va.x > 0, va, 0.0)  # one Bool for the whole lane
    close(per_lane.numpy(), np.where(a[:, :1] > 0, a, 0))
    from_arrays = kiln.select(va > 0, 1.0, kiln.Float32(b[:, 0]))
    assert type(from_arrays) is kiln.Array3f
    close(from_arrays.numpy(), np.where(a > 0, 1, b[:, :1]))


# ---- reductions over components ------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", [(kiln.Array3f, np.float32), (kiln.Array3i, np.int32)])
def test_reductions_are_over_components_lane_by_lane(n, cls, dt):
    a = data(n, dt)
    v = cls(a)
    close(kiln.sum(v).numpy(), a.sum(axis=1, dtype=dt), dt)
    close(kiln.prod(v).numpy(), a.prod(axis=1, dtype=dt), dt)
    close(kiln.min(v).numpy(), a.min(axis=1), dt)
    close(kiln.max(v).numpy(), a.max(axis=1), dt)
    np.testing.assert_allclose(kiln.mean(v).numpy(), a.astype(np.float64).mean(axis=1), rtol=1e-6, atol=1e-5)
    m = v > 0
    np.testing.assert_array_equal(kiln.all(m).numpy(), (a > 0).all(axis=1))
    np.testing.assert_array_equal(kiln.any(m).numpy(), (a > 0).any(axis=1))
    np.testing.assert_array_equal(kiln.none(m).numpy(), ~(a > 0).any(axis=1))
    np.testing.assert_array_equal(kiln.count(m).numpy(), (a > 0).sum(axis=1))
    assert type(kiln.count(m)) is kiln.UInt32 and type(kiln.all(m)) is kiln.Bool
    assert kiln.all(kiln.all(m)) == bool((a > 0).all())  # then over lanes: a Python bool
    np.testing.assert_array_equal(kiln.sum(m).numpy(), (a > 0).sum(axis=1))  # masks are counted


# ---- geometry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls,dt", FLOAT_VECTORS)
def test_dot_cross_norm_normalize_match_numpy(n, cls, dt):
    a, b = data(n, dt, 1), data(n, dt, 2)
    va, vb = cls(a), cls(b)
    tol = dict(rtol=1e-5, atol=1e-4) if dt == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kiln.dot(va, vb).numpy(), (a * b).sum(axis=1), **tol)
    np.testing.assert_allclose(kiln.squared_norm(va).numpy(), (a * a).sum(axis=1), **tol)
    np.testing.assert_allclose(kiln.norm(va).numpy(), np.linalg.norm(a, axis=1), **tol)
    unit = kiln.normalize(va)
    assert type(unit) is cls
    np.testing.assert_allclose(unit.numpy(), a / np.linalg.norm(a, axis=1, keepdims=True), **tol)
    c = kiln.cross(va, vb)
    assert type(c) is cls
    np.testing.assert_allclose(c.numpy(), np.cross(a, b), **tol)
    assert kiln.width(kiln.dot(va, vb)) == n and type(kiln.norm(va)) is cls.Value


def test_dot_and_norm_of_arrays_stay_reductions_over_lanes():
    x = kiln.Float64([3.0, 4.0])
    assert kiln.norm(x).tolist() == [5.0]
    assert kiln.squared_norm(x).tolist() == [25.0]
    assert kiln.normalize(x).tolist() == pytest.approx([0.6, 0.8], rel=1e-15)


def test_cross_takes_two_vectors_of_three():
    with pytest.raises(ValueError, match=r"cross takes two 3-component vectors .* an Array2f and an Array2f"):
        kiln.cross(kiln.Array2f(1, 0), kiln.Array2f(0, 1))
    with pytest.raises(ValueError, match="a Float32"):
        kiln.cross(kiln.Array3f(1, 0, 0), kiln.Float32(1))


# ---- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 1000])
@pytest.mark.parametrize("cls,dt", FLOAT_VECTORS)
def test_gradient_of_norm_is_the_unit_vector(n, cls, dt):
    a = data(n, dt)
    v = cls(a)
    kiln.enable_grad(v)
    assert kiln.grad_enabled(v) and all(kiln.grad_enabled(c) for c in v)
    kiln.backward(kiln.norm(v))
    g = kiln.grad(v)
    assert type(g) is cls
    tol = 2e-6 if dt == np.float32 else 1e-14
    np.testing.assert_allclose(g.numpy(), a / np.linalg.norm(a, axis=1, keepdims=True), rtol=tol, atol=tol)
    np.testing.assert_array_equal(v.grad.numpy(), g.numpy())


def test_gradients_reach_the_arrays_a_vector_was_built_from():
    a = data(50, np.float64)
    x, y, z = (kiln.Float64(a[:, k]) for k in range(3))
    kiln.enable_grad(x, y, z)
    v = kiln.Array3f64(x, y, z)
    w = kiln.Array3f64(1.0, 2.0, 3.0)
    loss = kiln.sum(kiln.dot(kiln.cross(v, w), kiln.Array3f64(0.0, 0.0, 1.0)) + kiln.squared_norm(v))
    kiln.backward(loss)
    # d/dv [(v × w) · e_z] = w × e_z = (w_y, -w_x, 0); d/dv |v|^2 = 2v
    np.testing.assert_allclose(x.grad.numpy(), 2 * a[:, 0] + 2.0, rtol=1e-14)
    np.testing.assert_allclose(y.grad.numpy(), 2 * a[:, 1] - 1.0, rtol=1e-14)
    np.testing.assert_allclose(z.grad.numpy(), 2 * a[:, 2], rtol=1e-14)


def test_backward_from_a_vector_seeds_every_component():
    a = data(9, np.float64)
    v = kiln.Array3f64(a)
    kiln.enable_grad(v)
    kiln.backward(v * v)  # one pass: the components share no graph here, but they could
    np.testing.assert_allclose(v.grad.numpy(), 2 * a, rtol=1e-15)

    v = kiln.Array3f64(a)
    kiln.enable_grad(v)
    kiln.backward_from(kiln.sin(v), kiln.Array3f64(1.0, 2.0, 3.0))
    np.testing.assert_allclose(v.grad.numpy(), np.cos(a) * [1, 2, 3], rtol=1e-14)

    # components sharing a graph: a pass per component would find it consumed by the first
    s = kiln.Float64(a[:, 0])
    kiln.enable_grad(s)
    t = kiln.exp(s)
    kiln.backward(kiln.Array3f64(t, t * 2, t * 3))
    np.testing.assert_allclose(s.grad.numpy(), 6 * np.exp(a[:, 0]), rtol=1e-14)


def test_forward_mode_through_a_vector():
    a = data(9, np.float64)
    v = kiln.Array3f64(a)
    kiln.enable_grad(v)
    u = kiln.normalize(v)
    kiln.set_grad(v, kiln.Array3f64(1.0, 0.0, 0.0))
    kiln.forward_to(u)
    # d(v/|v|)·e_x = (e_x - u u_x) / |v|
    r = np.linalg.norm(a, axis=1, keepdims=True)
    unit = a / r
    np.testing.assert_allclose(kiln.grad(u).numpy(), ([1, 0, 0] - unit * unit[:, :1]) / r, rtol=1e-12, atol=1e-14)
    kiln.clear_grad(v)
    kiln.forward(v)  # as in Dr.Jit: every component seeded with 1 (its gradient, when one is set)
    np.testing.assert_allclose(kiln.grad(u).numpy(), (1.0 - unit * unit.sum(axis=1, keepdims=True)) / r,
                               rtol=1e-12, atol=1e-14)


def test_grad_calls_walk_containers_of_vectors():
    v, w = kiln.Array2f(1.0, 2.0), kiln.Array2f(3.0, 4.0)
    kiln.enable_grad([v, {"w": w}])
    assert kiln.grad_enabled(v) and kiln.grad_enabled((w,))
    kiln.accum_grad(v, 2.0)
    kiln.accum_grad(v, kiln.Array2f(1.0, 10.0))
    assert v.grad.tolist() == [[3.0], [12.0]]
    v.grad = 5.0
    assert v.grad.tolist() == [[5.0], [5.0]]
    kiln.clear_grad(v)
    assert v.grad.tolist() == [[0.0], [0.0]]
    d = kiln.detach(v)
    assert type(d) is kiln.Array2f and not kiln.grad_enabled(d)
    kiln.disable_grad(v, w)
    assert not kiln.grad_enabled(v, w)
    i = kiln.Array2i(1, 2)
    kiln.enable_grad(i)  # as in Dr.Jit: integer vectors carry no gradient and are left as they are
    assert not kiln.grad_enabled(i)


# ---- construction functions, memory, evaluation --------------------------------------------------


def test_zeros_ones_full_opaque_of_vector_classes():
    z = kiln.zeros(kiln.Array3f, 4)
    assert type(z) is kiln.Array3f and z.numpy().tolist() == [[0, 0, 0]] * 4
    assert z.x is not z.y
    assert kiln.ones(kiln.Array2i, 2).tolist() == [[1, 1], [1, 1]]
    assert kiln.empty(kiln.Array2f, 3).numpy().shape == (3, 2)
    assert kiln.full(kiln.Array3f, 2.5, 2).tolist() == [[2.5, 2.5]] * 3
    assert kiln.full(kiln.Array3i, (1, 2, 3), 2).numpy().tolist() == [[1, 2, 3]] * 2
    o = kiln.opaque(kiln.Array2f, 7.0, 3)
    assert o.x.is_evaluated and o.numpy().tolist() == [[7, 7]] * 3
    with pytest.raises(ValueError, match="3 components, the value has 2"):
        kiln.full(kiln.Array3f, (1, 2), 4)
    assert kiln.zeros(kiln.Float32, 3).tolist() == [0, 0, 0]  # arrays as before


def test_gather_from_vectors_and_from_flat_buffers():
    a = data(10, np.float32)
    idx = np.array([3, 0, 9, 3], dtype=np.uint32)
    g = kiln.gather(kiln.Array3f, kiln.Array3f(a), kiln.UInt32(idx))
    assert type(g) is kiln.Array3f
    np.testing.assert_array_equal(g.numpy(), a[idx])
    # a flat buffer holds the vectors one after another, as Dr.Jit's packet gathers read it
    flat = kiln.Float32(a.ravel())
    np.testing.assert_array_equal(kiln.gather(kiln.Array3f, flat, kiln.UInt32(idx)).numpy(), a[idx])
    np.testing.assert_array_equal(kiln.gather(kiln.Array3f, flat, [1, 2]).numpy(), a[[1, 2]])
    masked = kiln.gather(kiln.Array3f, flat, kiln.UInt32(idx), kiln.Bool([True, False, True, True]))
    np.testing.assert_array_equal(masked.numpy(), a[idx] * np.array([1, 0, 1, 1])[:, None])


def test_scatter_into_vectors_and_flat_buffers():
    target = kiln.zeros(kiln.Array3f, 5)
    kiln.scatter(target, kiln.Array3f(1, 2, 3), kiln.UInt32([1, 4]))
    np.testing.assert_array_equal(target.numpy(), [[0, 0, 0], [1, 2, 3], [0, 0, 0], [0, 0, 0], [1, 2, 3]])
    kiln.scatter_add(target, 1.0, kiln.UInt32([0, 1]))
    np.testing.assert_array_equal(target.numpy()[:2], [[1, 1, 1], [2, 3, 4]])
    flat = kiln.zeros(kiln.Float32, 9)
    kiln.scatter(flat, kiln.Array3f(kiln.Float32([1, 4]), kiln.Float32([2, 5]), kiln.Float32([3, 6])), kiln.UInt32([2, 0]))
    assert flat.tolist() == [4, 5, 6, 0, 0, 0, 1, 2, 3]
    acc = kiln.zeros(kiln.Array2i, 2)
    kiln.scatter_reduce(kiln.ReduceOp.Max, acc, kiln.Array2i(kiln.Int32([5, 7]), -1), kiln.UInt32([1, 1]))
    assert acc.tolist() == [[0, 7], [0, 0]]
    with pytest.raises(ValueError, match="3 components, the value Array2f has 2"):
        kiln.scatter(target, kiln.Array2f(1, 2), 0)


def test_eval_evaluates_the_components():
    x = kiln.Float32(np.arange(8, dtype=np.float32))
    v = kiln.Array3f(x * 2, x + 1, kiln.sin(x))
    w = kiln.Array2f(x * 3, x - 1)
    assert not any(c.is_evaluated for c in v)
    kiln.eval(v, {"w": [w]})
    assert all(c.is_evaluated for c in v) and all(c.is_evaluated for c in w)
    u = kiln.Array2f(x * 5, x * 6)
    assert u.eval() is u and all(c.is_evaluated for c in u)
    m = kiln.Array2f(1.0, 2.0)
    kiln.make_opaque(m, x)
    assert m.x.is_evaluated and m.y.is_evaluated


def test_labels_width_and_type_of():
    # distinct values: equal literals share one engine variable, and a label is the variable's
    v = kiln.Array3f(kiln.Float32([1, 2]), 3, 4)
    kiln.set_label(v, "p")
    assert [c.label for c in v] == ["p_0", "p_1", "p_2"]  # (Dr.Jit's names)
    a, b = kiln.Float32([1, 2]), [kiln.Float32([3, 4]), kiln.Float32([5, 6])]
    kiln.set_label(a=a, b=b, d={"k": v})
    assert (a.label, b[0].label, b[1].label, v.y.label) == ("a", "b_0", "b_1", "d_k_1")
    with pytest.raises(TypeError, match="incompatible function arguments"):
        kiln.set_label(a, "a", b=b)
    assert kiln.width(v) == 2 and kiln.type_of(v) is kiln.Array3f
    assert kiln.type_of(kiln.Int32([1])) is kiln.Int32


# ---- loops, branches, frozen functions -----------------------------------------------------------


def test_vectors_are_state_of_loops_and_branches():
    a = data(3, np.float32)
    v = kiln.Array3f(a)
    i = kiln.Int32([0, 0, 0])
    n = kiln.Int32([1, 2, 3])
    i2, v2 = kiln.while_loop((i, v), lambda i, v: i < n, lambda i, v: (i + 1, v * 2))
    assert type(v2) is kiln.Array3f
    np.testing.assert_array_equal(v2.numpy(), a * np.array([2, 4, 8], dtype=np.float32)[:, None])
    np.testing.assert_array_equal(v.numpy(), a)  # the state passed in is left alone
    r = kiln.if_stmt((v,), v.x > 0, lambda v: v * 10, lambda v: -v)
    assert type(r) is kiln.Array3f
    np.testing.assert_array_equal(r.numpy(), np.where(a[:, :1] > 0, a * 10, -a))
    s = kiln.switch(kiln.UInt32([0, 1, 0]), [lambda v: v + 1, lambda v: v * 0], v)
    np.testing.assert_array_equal(s.numpy(), np.where([[True], [False], [True]], a + 1, 0))


def test_frozen_functions_take_and_return_vectors():
    @kiln.freeze
    def f(p, q):
        return kiln.cross(p, q) * 2

    for n in [4, 4, 9]:  # a new width replays the same recording
        a, b = data(n, np.float32, 1), data(n, np.float32, 2)
        out = f(kiln.Array3f(a), kiln.Array3f(b))
        assert type(out) is kiln.Array3f
        np.testing.assert_allclose(out.numpy(), 2 * np.cross(a, b), rtol=1e-5, atol=1e-4)
    assert f.n_recordings == 1 and f.n_replays == 2

    @kiln.freeze
    def move(p, d):
        p.x = p.x + d  # changing an argument's component reaches the caller's vector
        return p

    for k in range(3):
        p = kiln.Array2f(kiln.Float32([1, 2]), 5)
        move(p, 10.0)
        assert p.tolist() == [[11, 12], [5, 5]], k
    assert move.n_recordings == 1


# ---- errors --------------------------------------------------------------------------------------


def test_a_wrong_number_of_components_says_how_to_fix_it():
    with pytest.raises(ValueError, match=r"Array3f takes 3 components .* pass Array3f\(x, y, z\)"):
        kiln.Array3f(1, 2)
    with pytest.raises(kiln.InvalidArgument, match=r"Array4f\(x, y, z, w\)"):
        kiln.Array4f(1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"list of 3 components, got 2 items"):
        kiln.Array3f([1, 2])
    with pytest.raises(ValueError, match=r"Array2f has 2 components and an Array3f has 3: .*Array2f\(v\.x, v\.y\)"):
        kiln.Array2f(kiln.Array3f(1, 2, 3))


def test_numpy_arrays_of_the_wrong_shape_say_how_to_fix_them():
    with pytest.raises(ValueError, match=r"shape \(N, 3\) or \(3,\), got shape \(3, 5\): transpose it"):
        kiln.Array3f(np.zeros((3, 5)))
    with pytest.raises(ValueError, match=r"got shape \(5,\): .*Float32\(a\)"):
        kiln.Array3f(np.zeros(5))
    with pytest.raises(ValueError, match=r"reshape it to \(N, 3\)"):
        kiln.Array3f(np.zeros((2, 3, 3)))


def test_mismatched_sizes_and_truth_values_are_errors():
    with pytest.raises(ValueError, match="an Array3f and an Array2f do not combine"):
        kiln.Array3f(1, 2, 3) + kiln.Array2f(1, 2)
    with pytest.raises(ValueError, match="components of an Array2f have 2, 3 lanes"):
        kiln.Array2f(kiln.Float32([1, 2]), kiln.Float32([1, 2, 3]))
    with pytest.raises(ValueError):  # lanes that do not broadcast, from the arrays' operators
        kiln.Array2f(kiln.Float32([1, 2]), 0) + kiln.Float32([1, 2, 3])
    with pytest.raises(ValueError, match="truth value of an Array3b is ambiguous"):
        bool(kiln.Array3f(1, 2, 3) == 1)
    with pytest.raises(TypeError, match="unhashable"):
        hash(kiln.Array2f(1, 2))
    with pytest.raises(TypeError, match="modulus"):
        pow(kiln.Array2f(1, 2), 2, 3)


# ---- the type stubs ------------------------------------------------------------------------------

STUB = Path(kiln.__file__).with_name("__init__.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_names(tree):
    """The names the stub defines at its top level (classes, functions, aliases)."""
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.setdefault(node.name, node)  # the first of a function's overloads
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                names[t.id] = node
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom):
            # `from . import opt as opt`: the typing convention for a re-exported name
            names.update({a.asname: node for a in node.names if a.asname == a.name})
    return names


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_stub_and_the_module_name_the_same_things():
    names = stub_names(stub_tree())
    in_module = public(dir(kiln))
    assert public(names) - in_module == set(), "the stub names what the module lacks"
    assert in_module - public(names) == set(), "the module has names the stub lacks"
    assert set(kiln.__all__) == in_module
    assert "__version__" in names and (Path(kiln.__file__).with_name("py.typed")).exists()


def params(args):
    """(name, kind, default) of each parameter of an ast signature."""
    out = []
    posonly = [(a, "POSITIONAL_ONLY") for a in args.posonlyargs]
    regular = [(a, "POSITIONAL_OR_KEYWORD") for a in args.args]
    positional = posonly + regular
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for (a, kind), d in zip(positional, defaults):
        out.append((a.arg, kind, ast.literal_eval(d) if d is not None else inspect.Parameter.empty))
    if args.vararg:
        out.append((args.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append((a.arg, "KEYWORD_ONLY", ast.literal_eval(d) if d is not None else inspect.Parameter.empty))
    if args.kwarg:
        out.append((args.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    return out


def runtime_params(obj):
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(obj).parameters.values()]


def test_stub_functions_have_the_modules_signatures():
    overloads = {}
    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            overloads.setdefault(node.name, []).append(params(node.args))
    for name, sigs in overloads.items():
        runtime = runtime_params(getattr(kiln, name))
        # every overload names the parameters as the function does; one has its defaults too
        # (the others may narrow a default away: `freeze(f: Callable)` beside `freeze(f=None)`)
        shape = [(n, k) for n, k, _ in runtime]
        assert all([(n, k) for n, k, _ in sig] == shape for sig in sigs), name
        assert runtime in sigs, name
        for sig in sigs:  # and a default an overload keeps is the function's
            for (n, _, d), (_, _, rd) in zip(sig, runtime):
                assert d is inspect.Parameter.empty or d == rd, (name, n)
    assert len(overloads) >= 90


def test_stub_aliases_are_the_modules_aliases():
    for name, node in stub_names(stub_tree()).items():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and not name.startswith("_"):
            assert getattr(kiln, name) is getattr(kiln, node.value.id), name


def members(cls_node):
    out = {}
    for node in cls_node.body:
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, node)
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):  # an enum's members (`SymbolicLoops = 1`)
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


def test_stub_classes_have_the_modules_members_and_bases():
    tree = stub_tree()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def stub_members(name):
        """The members the stub gives class `name`, its stub bases' included."""
        node = classes[name]
        out = dict(members(node))
        for b in node.bases:
            base = b.value if isinstance(b, ast.Subscript) else b
            if isinstance(base, ast.Name) and base.id in classes:
                out = {**stub_members(base.id), **out}
        return out

    for name, node in classes.items():
        if name.startswith("_"):
            continue
        cls = getattr(kiln, name)
        assert isinstance(cls, type), name
        for b in node.bases:
            base = b.value if isinstance(b, ast.Subscript) else b
            if isinstance(base, ast.Name) and not base.id.startswith("_") and base.id != "Generic":
                parent = getattr(kiln, base.id, None) or getattr(builtins, base.id)
                assert issubclass(cls, parent), (name, base.id)
        stubbed = stub_members(name)
        for m, fn in stubbed.items():
            assert hasattr(cls, m), f"{name}.{m} is in the stub, not in the module"
            runtime = inspect.getattr_static(cls, m)
            if (
                isinstance(fn, ast.FunctionDef)
                and not m.startswith("__")
                and not any(isinstance(d, (ast.Name, ast.Attribute)) for d in fn.decorator_list)
                and callable(runtime)
            ):
                # methods: the same parameters after `self`
                assert params(fn.args)[1:] == runtime_params(getattr(cls, m))[1:], f"{name}.{m}"
        for m in public(vars(cls)):
            assert m in stubbed, f"{name}.{m} is in the module, not in the stub"


def test_allclose_compares_vectors_component_by_component():
    assert kiln.allclose(kiln.Array3f(1, 2, 3), kiln.Array3f(1, 2, 3))
    assert not kiln.allclose(kiln.Array3f(1, 2, 3), kiln.Array3f(1, 2, 4))
    assert kiln.allclose(kiln.Array2f([1, 2], [3, 4]), 2.5, atol=1.6)


def test_a_list_beside_a_vector_holds_its_components():
    v = kiln.Array4f(1.0, 2.0, 3.0, 4.0) * kiln.Float32([1.0, 2.0])
    m = v == [1.0, 2.0, 3.0, 4.0]  # Dr.Jit's `v == [..]`: component by component
    assert isinstance(m, kiln.Array4b)
    assert kiln.all(m).tolist() == [True, False]
    assert kiln.all(m, axis=None) is False and kiln.any(m, axis=None) is True
    assert kiln.all(v == (1.0, 2.0, 3.0, 4.0), axis=None) is False
    assert (v + [1, 0, 0, 0]).x.tolist() == [2.0, 3.0]
    assert ([1, 0, 0, 0] - v).y.tolist() == [-2.0, -4.0]
    assert kiln.none(v != v, axis=None) is True
    # a list of another length is an error naming both sizes, not a silent False
    with pytest.raises(kiln.InvalidArgument, match="list of 3 items"):
        _ = v == [1.0, 2.0, 3.0]
    with pytest.raises(kiln.InvalidArgument, match="axis=1"):
        kiln.all(m, axis=1)


def test_element_types_as_var_types():
    assert kiln.type_v(kiln.Float32) == kiln.VarType.Float32
    assert kiln.type_v(kiln.Array3f64(1.0, 2.0, 3.0)) == kiln.VarType.Float64
    assert kiln.type_v(kiln.TensorXu) == kiln.VarType.UInt32
    assert kiln.type_v(kiln.Array2b) == kiln.VarType.Bool
    assert kiln.type_v(1.5) == kiln.VarType.Float64 and kiln.type_v(3) == kiln.VarType.Int64
    assert kiln.type_v("text") == kiln.VarType.Void
