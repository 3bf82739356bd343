"""Tensors (TensorXf…): construction, NumPy round trips without copies, broadcasting operators,
indexing views and matmul, against NumPy."""

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
