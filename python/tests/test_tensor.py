"""Tensors (TensorXf…): construction, NumPy round trips without copies, broadcasting operators,
indexing views and matmul, against NumPy."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def test_construction_and_round_trip():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = kiln.TensorXf(a)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and len(t) == 2
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert isinstance(t.array, kiln.Float32) and len(t.array) == 24
    u = kiln.TensorXi(kiln.Int32(list(range(6))), (2, 3))
    assert u.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert kiln.TensorXf64([[1, 2], [3, 4]]).shape == (2, 2)
    assert u.reshape(3, 2).shape == (3, 2)
    with pytest.raises(ValueError, match="shape"):
        kiln.TensorXf(kiln.Float32([1, 2, 3]), (2, 2))
    with pytest.raises(ValueError, match="reshape"):
        u.reshape(4, 2)


@pytest.mark.parametrize(
    "sa,sb", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)), ((5,), ())]
)
def test_broadcasting_operators_match_numpy(sa, sb):
    rng = np.random.default_rng(len(sa) + len(sb))
    a = rng.uniform(1, 2, sa)
    b = rng.uniform(1, 2, sb)
    ta = kiln.TensorXf64(a)
    tb = kiln.TensorXf64(b) if sb else float(b)
    for f in [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: x**y]:
        np.testing.assert_allclose(f(ta, tb).numpy(), f(a, b), rtol=1e-13)
        np.testing.assert_allclose(f(tb, ta).numpy(), f(b, a), rtol=1e-13)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_allclose((-ta).numpy(), -a)


def test_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="broadcast"):
        kiln.TensorXf(np.ones((3, 4))) + kiln.TensorXf(np.ones((3,)))


def test_indexing_views():
    a = np.arange(60, dtype=np.int64).reshape(3, 4, 5)
    t = kiln.TensorXi64(a)
    np.testing.assert_array_equal(t[1].numpy(), a[1])
    np.testing.assert_array_equal(t[:, 1:3].numpy(), a[:, 1:3])
    np.testing.assert_array_equal(t[::-1, 0, ::2].numpy(), a[::-1, 0, ::2])
    assert t[2, 3, 4] == a[2, 3, 4]


def test_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(5, 3))
    np.testing.assert_allclose((kiln.TensorXf64(a) @ kiln.TensorXf64(b)).numpy(), a @ b, rtol=1e-12)
    with pytest.raises(kiln.Error):
        kiln.TensorXf64(a) @ kiln.TensorXf64(a)


@pytest.mark.parametrize("sa,sb", [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,)), ((3,), (2, 3, 4)),
                                   ((0, 3, 4), (4, 2))])
def test_batched_matmul_follows_numpy(sa, sb):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    got = kiln.matmul(kiln.TensorXf64(a), kiln.TensorXf64(b))
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="tensors"):
        kiln.matmul(kiln.Float64(1.0), kiln.Float64(2.0))
    with pytest.raises(kiln.InvalidArgument, match="batch"):
        kiln.TensorXf64(np.ones((2, 2, 3))) @ kiln.TensorXf64(np.ones((3, 3, 1)))


def test_reshape_minus_one_clamped_slices_and_bool_index():
    t = kiln.TensorXf(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.reshape(-1).shape == (6,) and t.reshape(3, -1).shape == (3, 2)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for idx in [(slice(None), slice(5, None)), (slice(None), slice(5, 1)), (slice(-10, 10),), (slice(None, None, -1), slice(None, -5, -1))]:
        np.testing.assert_array_equal(t[idx].numpy(), a[idx])
    with pytest.raises(TypeError, match="bool"):
        t[True]


def test_binary_functions_keep_tensor_shapes():
    t = kiln.TensorXf(np.array([[1.0, -2.0], [3.0, -4.0]], dtype=np.float32))
    m = kiln.maximum(t, 0.0)
    assert isinstance(m, kiln.TensorXf) and m.shape == (2, 2)
    np.testing.assert_array_equal(m.numpy(), [[1, 0], [3, 0]])
    np.testing.assert_allclose(kiln.cbrt(t).numpy(), np.cbrt(t.numpy()), rtol=1e-6)


# ---- the module's functions keep a tensor a tensor (a flat array was a silent change of shape) ---

RNG = np.random.default_rng(7)


def _t(shape, dtype=np.float32):
    a = (RNG.standard_normal(shape) * 3).astype(dtype)
    return a, (kiln.TensorXf if dtype == np.float32 else kiln.TensorXf64)(a)


@pytest.mark.parametrize("shape", [(2, 3), (4, 1, 5), (0, 3), (1,), (7, 17)])
def test_lanewise_functions_keep_the_shape(shape):
    a, t = _t(shape)
    b, u = _t(shape[-1:])  # broadcast along the last axis
    cases = [
        (kiln.select(t > 0, t, 0.5), np.where(a > 0, a, np.float32(0.5))),
        (kiln.select(u > 0, t, u), np.where(b > 0, a, b)),
        (kiln.clip(t, -1, 2), np.clip(a, -1, 2)),
        (kiln.clip(t, u, 2), np.minimum(np.maximum(a, b), 2)),
        (kiln.fma(t, u, 1), a.astype(np.float64) * b + 1),  # one rounding
        (kiln.minimum(t, u), np.minimum(a, b)),
        (kiln.detach(t), a),
        (kiln.isnan(t / t), np.isnan(a / a)),
        (kiln.isfinite(1 / t), np.isfinite(1 / a)),
        (kiln.isinf(1 / t), np.isinf(1 / a)),
        (abs(t), np.abs(a)),
        (-t, -a),
        (t + a, a + a),  # a NumPy array of the tensor's rank
        (a * t, a * a),
    ]
    for i, (got, want) in enumerate(cases):
        assert isinstance(got, kiln.TensorBase), i
        assert got.shape == want.shape, (i, got.shape, want.shape)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=str(i))


def test_bitwise_operators_on_tensors():
    a = np.arange(12, dtype=np.int32).reshape(3, 4) - 3
    t = kiln.TensorXi(a)
    for got, want in [
        (t & 6, a & 6), (6 & t, 6 & a), (t | 8, a | 8), (t ^ 5, a ^ 5), (~t, ~a),
        (t << 2, a << 2), (t >> 1, a >> 1), (7 // (abs(t) + 1), 7 // (np.abs(a) + 1)),
        (7 % (abs(t) + 1), 7 % (np.abs(a) + 1)),
    ]:
        assert got.shape == (3, 4)
        np.testing.assert_array_equal(got.numpy(), want)
    m = (t > 0) & ~(t > 5)
    assert isinstance(m, kiln.TensorXb)
    np.testing.assert_array_equal(m.numpy(), (a > 0) & ~(a > 5))
    with pytest.raises(TypeError):
        ~kiln.TensorXf([1.0, 2.0])


@pytest.mark.parametrize("shape", [(2, 3), (3, 4, 5), (1, 6), (6,)])
def test_reductions_over_axes_match_numpy(shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 7 - 2
    t = kiln.TensorXf(a)
    axes = [None] + list(range(len(shape))) + [-1] + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
    for ax in axes:
        for k, ref in [(kiln.sum, np.sum), (kiln.prod, np.prod), (kiln.min, np.min),
                       (kiln.max, np.max), (kiln.mean, np.mean)]:
            got = k(t, axis=ax)
            want = ref(a, axis=ax)
            assert isinstance(got, kiln.TensorXf), (k.__name__, ax)
            assert got.shape == np.shape(want), (k.__name__, ax, got.shape)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, err_msg=f"{k.__name__} {ax}")
    # masks: sum counts, min is all, max is any (along the axis)
    m = kiln.TensorXb(a > 0)
    np.testing.assert_array_equal(kiln.sum(m, axis=0).numpy(), np.sum(a > 0, axis=0))
    np.testing.assert_array_equal(kiln.max(m, axis=-1).numpy(), np.any(a > 0, axis=-1))
    np.testing.assert_array_equal(kiln.min(m, axis=-1).numpy(), np.all(a > 0, axis=-1))


def test_a_whole_reduction_is_a_0d_tensor_and_reads_as_a_number():
    a, t = _t((3, 4))
    s = kiln.sum(t)
    assert isinstance(s, kiln.TensorXf) and s.shape == ()
    assert float(s) == pytest.approx(float(a.sum()), rel=1e-5)
    assert bool(kiln.sum(t * t) > 0)
    assert int(kiln.sum(kiln.TensorXi([[1, 2], [3, 4]]))) == 10
    mean_int = kiln.mean(kiln.TensorXi([[1, 2], [3, 5]]), axis=0)
    assert isinstance(mean_int, kiln.TensorXf) and mean_int.tolist() == [2.0, 3.5]


def test_bad_axes_and_ambiguous_truth_are_errors():
    _, t = _t((2, 3))
    with pytest.raises(ValueError, match="out of range"):
        kiln.sum(t, axis=2)
    with pytest.raises(ValueError, match="named twice"):
        kiln.sum(t, axis=(1, -1))
    with pytest.raises(ValueError, match="empty"):
        kiln.max(kiln.TensorXf(np.zeros((0, 3), np.float32)), axis=0)
    with pytest.raises(ValueError, match="one axis"):
        kiln.sum(kiln.Float32([1, 2]), axis=1)
    assert kiln.sum(kiln.Float32([1, 2]), axis=0).tolist() == [3.0]
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)
    with pytest.raises(TypeError, match="operand"):
        kiln.select(t > 0, t, "x")
    # (a running sum runs along axis 0 of a tensor, as Dr.Jit's prefix_sum does)
    a = t.numpy()
    np.testing.assert_allclose(kiln.prefix_sum(t).numpy(), np.cumsum(a, axis=0) - a, rtol=1e-6)
    np.testing.assert_allclose(kiln.cumsum(t, axis=1).numpy(), np.cumsum(a, axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="axis 2"):
        kiln.prefix_sum(t, axis=2)
    np.testing.assert_array_equal(kiln.prefix_sum(kiln.TensorXf([1, 2, 3])).numpy(), [0, 1, 3])


def test_gradients_of_tensors_keep_their_shape():
    a, _ = _t((3, 4), np.float64)
    x = kiln.TensorXf64(a)
    kiln.enable_grad(x)
    assert kiln.grad_enabled(x)
    w = kiln.TensorXf64(np.arange(4.0))
    loss = kiln.sum(kiln.sum(x * x, axis=0) * w)
    kiln.backward(loss)
    g = kiln.grad(x)
    assert isinstance(g, kiln.TensorXf64) and g.shape == (3, 4)
    np.testing.assert_allclose(g.numpy(), 2 * a * np.arange(4.0))
    # forward mode along a tensor direction
    y = kiln.TensorXf64(a)
    kiln.enable_grad(y)
    kiln.set_grad(y, kiln.TensorXf64(np.ones((3, 4))))
    z = kiln.sum(y * y, axis=1)
    dz = kiln.forward_to(z)
    assert isinstance(dz, kiln.TensorXf64) and dz.shape == (3,)
    np.testing.assert_allclose(dz.numpy(), (2 * a).sum(axis=1))
    d = kiln.detach(x)
    assert not kiln.grad_enabled(d) and d.shape == (3, 4)
    kiln.disable_grad(x)
    assert not kiln.grad_enabled(x)


# ---- found by an adversarial pass over the tensor functions ------------------------------------


def test_numpy_operands_keep_their_dtype_beside_tensors_and_arrays():
    ti = kiln.TensorXi(np.array([[1, 2, 3]], np.int32))
    a = np.array([[1, 2, 3]], np.int32)
    for got, want in [
        (ti + np.float64(2.5), a + np.float64(2.5)),
        (np.float32(0.5) + ti, np.float32(0.5) + a),
        (ti + np.array([2.5] * 3), a + np.array([2.5] * 3)),
        (ti * np.int64(2**40), a * np.int64(2**40)),
        (kiln.minimum(ti, np.float32(0.5)), np.minimum(a, np.float32(0.5))),
        (kiln.fma(ti, np.float64(0.5), 0), a * 0.5),
    ]:
        np.testing.assert_array_equal(got.numpy(), want)
        # the kind NumPy gives (kiln's widths follow Dr.Jit: int32 with float32 is float32)
        assert got.numpy().dtype.kind == want.dtype.kind, (got.numpy().dtype, want.dtype)
    np.testing.assert_array_equal((ti == np.array([1.5])).numpy(), a == 1.5)
    np.testing.assert_array_equal((ti < np.float32(1.5)).numpy(), a < 1.5)
    # arrays too, and lists of floats beside integers are floats (as one float is)
    assert (kiln.Int32([1, 2, 3]) + np.array([2.5] * 3)).tolist() == [3.5, 4.5, 5.5]
    assert (kiln.Int32([1, 2]) + [2.5, 1.0]).tolist() == [3.5, 3.0]
    assert isinstance(kiln.Int32([1, 2]) + [2, 1], kiln.Int32)
    with pytest.raises(TypeError):
        kiln.TensorXf(np.ones(3, np.float32)) + np.array([1j])


def test_an_array_or_list_beside_a_tensor_broadcasts_as_its_own_shape():
    t = kiln.TensorXf(np.ones((2, 3), np.float32))
    r = kiln.Float32([1, 2, 3]) + t  # the array's operator defers to the tensor's
    assert isinstance(r, kiln.TensorXf) and r.shape == (2, 3)
    np.testing.assert_array_equal(r.numpy(), np.ones((2, 3)) + [1, 2, 3])
    assert (kiln.Float32([1, 2, 3]) < t).shape == (2, 3)
    s = kiln.TensorXf(np.float32(2))
    assert (s + kiln.Float32([5])).shape == (1,) and (s + [5]).shape == (1,)
    assert (s + 5).shape == ()


def test_empty_integer_tensors_and_arrays_test_empty():
    r = kiln.isnan(kiln.TensorXi(np.zeros((0, 3), np.int32)))
    assert r.shape == (0, 3) and r.numpy().shape == (0, 3)
    assert kiln.isnan(kiln.Int32([])).tolist() == []
    assert kiln.isfinite(kiln.Int32([])).tolist() == []
    assert kiln.isinf(kiln.UInt32([1, 2])).tolist() == [False, False]


def test_indexing_every_axis_is_a_0d_tensor_that_keeps_the_gradient():
    x = kiln.TensorXf64(np.ones((2, 3)))
    kiln.enable_grad(x)
    v = x[1, 2]
    assert isinstance(v, kiln.TensorXf64) and v.shape == () and float(v) == 1.0
    kiln.backward(kiln.sum(v * 5))
    want = np.zeros((2, 3))
    want[1, 2] = 5
    np.testing.assert_array_equal(kiln.grad(x).numpy(), want)


def test_shapes_too_large_to_address_are_errors():
    with pytest.raises(ValueError, match="address"):
        kiln.TensorXf(kiln.Float32([]), [2**32, 2**32])
    with pytest.raises(ValueError, match="address"):
        kiln.TensorXf(kiln.Float32([1, 2]), [2**63 + 1, 2])
    with pytest.raises(ValueError, match="address"):
        kiln.TensorXf(kiln.Float32([]), [0]).reshape(2**32, 2**32)


def test_set_grad_on_a_tensor_takes_its_shape_or_a_broadcast():
    x = kiln.TensorXf64(np.zeros((2, 3)))
    kiln.enable_grad(x)
    kiln.set_grad(x, np.ones((2, 3)))
    np.testing.assert_array_equal(kiln.grad(x).numpy(), np.ones((2, 3)))
    kiln.set_grad(x, kiln.TensorXf64([[1.0, 2, 3]]))
    np.testing.assert_array_equal(kiln.grad(x).numpy(), np.tile([1.0, 2, 3], (2, 1)))
    kiln.accum_grad(x, 1.0)
    np.testing.assert_array_equal(kiln.grad(x).numpy(), np.tile([2.0, 3, 4], (2, 1)))
    with pytest.raises(ValueError, match="broadcast"):
        kiln.set_grad(x, kiln.TensorXf64(np.ones((3, 2))))


def test_axis_takes_ints_only():
    t = kiln.TensorXf(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="axis"):
        kiln.sum(t, axis=True)
    with pytest.raises(TypeError, match="axis"):
        kiln.sum(kiln.Float32([1, 2]), axis="0")
    assert kiln.sum(t, axis=()).shape == (2, 3)
    assert kiln.sum(kiln.Float32([1, 2]), axis=()).tolist() == [1, 2]


def test_constructors_take_tensor_classes_and_shapes():
    z = kiln.zeros(kiln.TensorXf, (2, 3))
    assert isinstance(z, kiln.TensorXf) and z.shape == (2, 3) and z.numpy().sum() == 0
    assert kiln.ones(kiln.TensorXi64, 4).tolist() == [1, 1, 1, 1]
    f = kiln.full(kiln.TensorXu, 7, (2, 1))
    assert isinstance(f, kiln.TensorXu) and f.tolist() == [[7], [7]]
    assert kiln.empty(kiln.TensorXf64, (0, 5)).shape == (0, 5)
    assert kiln.zeros(kiln.TensorXb).shape == (1,)
    with pytest.raises(ValueError, match="shape"):
        kiln.zeros(kiln.TensorXf, "x")
    with pytest.raises(ValueError, match="address"):
        kiln.zeros(kiln.TensorXf, (2**40, 2**40))


def test_arange_and_linspace_take_tensor_classes():
    t = kiln.arange(kiln.TensorXu, 7)
    assert isinstance(t, kiln.TensorXu) and t.shape == (7,) and t.tolist() == list(range(7))
    l = kiln.linspace(kiln.TensorXf64, 0, 1, 5)
    assert isinstance(l, kiln.TensorXf64) and l.tolist() == [0, 0.25, 0.5, 0.75, 1.0]


def test_reshape_as_dr_jit_does():
    x = kiln.arange(kiln.Float32, 6)
    t = kiln.reshape(kiln.TensorXf, x, (2, -1))
    assert t.shape == (2, 3) and t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    back = kiln.reshape(kiln.Float32, t, -1)
    assert type(back) is kiln.Float32 and back.tolist() == [0, 1, 2, 3, 4, 5]
    assert kiln.reshape(kiln.Float64, x, 6).tolist() == [0, 1, 2, 3, 4, 5]
    # shrinking keeps the first elements, and only when asked
    assert kiln.reshape(kiln.Float32, x, 4, shrink=True).tolist() == [0, 1, 2, 3]
    with pytest.raises(kiln.InvalidArgument, match="shrink=True"):
        kiln.reshape(kiln.Float32, x, 4)
    with pytest.raises(kiln.InvalidArgument, match="does not fill"):
        kiln.reshape(kiln.TensorXf, x, (3, 3), shrink=True)
    with pytest.raises(kiln.InvalidArgument, match="divide"):
        kiln.reshape(kiln.TensorXf, x, (4, -1))
    with pytest.raises(kiln.InvalidArgument, match="row-major"):
        kiln.reshape(kiln.TensorXf, x, (2, 3), order="F")
    with pytest.raises(kiln.TypeMismatch, match="integers"):
        kiln.reshape(kiln.TensorXf, x, (2.5, 2.4))
    with pytest.raises(kiln.TypeMismatch, match="components"):
        kiln.reshape(kiln.Float32, kiln.Array3f(1, 2, 3), 3)
    # a new object: changing it in place leaves the input alone
    same = kiln.reshape(kiln.Float32, x, 6)
    same += 1.0
    assert x.tolist() == [0, 1, 2, 3, 4, 5] and same.tolist() == [1, 2, 3, 4, 5, 6]
    # derivatives pass through, zeros for the dropped elements
    y = kiln.Float64([1.0, 2.0, 3.0, 4.0, 5.0])
    kiln.enable_grad(y)
    z = kiln.reshape(kiln.Float64, y, 3, shrink=True)
    kiln.backward_from(z * z)
    assert y.grad.tolist() == [2.0, 4.0, 6.0, 0.0, 0.0]
