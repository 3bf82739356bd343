"""Numba's @stencil face: kernels with relative indexing on NumPy arrays and kiln tensors,
against a pure-Python reference of Numba's rule (border elements get cval) and of kiln's
boundary modes."""

import itertools

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def reference(kernel, arrays, neighborhood, cval=0.0, mode="skip"):
    """Apply `kernel` element by element in Python: `kernel` gets callables `a(i, j)` that read
    at an offset; border elements (whose neighbourhood leaves the array) get cval under 'skip'."""
    a0 = arrays[0]
    out = np.zeros(a0.shape, dtype=np.float64)
    shape = a0.shape

    def reader(arr, idx):
        def read(*off):
            pos = []
            for d, (i, o) in enumerate(zip(idx, off)):
                p, n = i + o, shape[d]
                if mode == "wrap":
                    p %= n
                elif mode == "nearest":
                    p = min(max(p, 0), n - 1)
                elif mode == "reflect":
                    while p < 0 or p >= n:
                        p = -p - 1 if p < 0 else 2 * n - p - 1
                elif mode == "constant" and not 0 <= p < n:
                    return cval
                pos.append(p)
            return arr[tuple(pos)]

        return read

    for idx in itertools.product(*[range(n) for n in shape]):
        inside = all(lo + i >= 0 and hi + i < n for (lo, hi), i, n in zip(neighborhood, idx, shape))
        if mode == "skip" and not inside:
            out[idx] = cval
        else:
            out[idx] = kernel(*[reader(a, idx) for a in arrays])
    return out


LAP = lambda a: a(0, 1) + a(0, -1) + a(1, 0) + a(-1, 0) - 4 * a(0, 0)  # noqa: E731


@kiln.stencil
def lap(a):
    return a[0, 1] + a[0, -1] + a[1, 0] + a[-1, 0] - 4 * a[0, 0]


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 3), (5, 7), (17, 16), (33, 65)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_laplacian_matches_the_reference(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    a = (rng.uniform(-5, 5, shape) * 10).astype(dtype)
    got = lap(a)
    assert isinstance(got, np.ndarray) and got.shape == shape
    np.testing.assert_allclose(got, reference(LAP, [a], [(-1, 1), (-1, 1)]), rtol=1e-6)


@pytest.mark.parametrize("mode", ["wrap", "nearest", "reflect", "constant"])
def test_boundary_modes(mode):
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (6, 5))
    k = kiln.stencil(boundary=mode, cval=2.5)(lambda a: a[0, 1] + a[0, -1] + a[1, 0] + a[-1, 0] - 4 * a[0, 0])
    np.testing.assert_allclose(k(a), reference(LAP, [a], [(-1, 1), (-1, 1)], cval=2.5, mode=mode), rtol=1e-12)


def test_neighborhood_cval_and_out():
    @kiln.stencil(neighborhood=((-2, 0),), cval=-1.0)
    def trailing(a):
        return (a[-2] + a[-1] + a[0]) / 3.0

    x = np.arange(8, dtype=np.float64)
    want = np.array([-1.0, -1.0] + [(x[i - 2] + x[i - 1] + x[i]) / 3 for i in range(2, 8)])
    np.testing.assert_allclose(trailing(x), want)

    out = np.full((4, 5), 7.0)
    lap(np.ones((4, 5)), out=out)
    assert out[0, 0] == 7.0 and out[1, 1] == 0.0  # the border keeps out's values without a cval


def test_several_inputs_standard_indexing_and_scalars():
    @kiln.stencil(standard_indexing=("w",))
    def k(a, b, w, s):
        return a[0, 0] * w[0] + b[0, 1] * w[1] + s

    rng = np.random.default_rng(2)
    a, b = rng.uniform(size=(4, 4)), rng.uniform(size=(4, 4))
    w = np.array([2.0, -3.0])
    got = k(a, b, w, 0.5)
    want = reference(lambda a, b: a(0, 0) * 2.0 + b(0, 1) * -3.0 + 0.5, [a, b], [(0, 0), (0, 1)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_windows_and_integer_kernels():
    @kiln.stencil
    def box(a):
        return sum(a[-1:2, -1:2])

    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    want = reference(lambda a: sum(a(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1)), [x], [(-1, 1), (-1, 1)])
    got = box(x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_tensors_in_give_lazy_tensors_that_fuse():
    g = kiln.TensorXf(np.arange(30, dtype=np.float32).reshape(5, 6) ** 2)
    r = lap(g) * 2.0 + 1.0
    assert isinstance(r, kiln.TensorXf) and r.shape == (5, 6)
    want = reference(LAP, [g.numpy()], [(-1, 1), (-1, 1)]) * 2 + 1
    np.testing.assert_allclose(r.numpy(), want, rtol=1e-6)


def test_gradient_through_a_stencil():
    a = np.random.default_rng(3).uniform(size=(5, 5))
    x = kiln.Float64(a.ravel())
    kiln.enable_grad(x)
    t = kiln.TensorXf64(x, (5, 5))
    k = kiln.stencil(boundary="wrap")(lambda a: a[0, 1] * 2.0 - a[1, 0])
    loss = kiln.sum((k(t).array) ** 2)
    kiln.backward(loss)

    def f(v):
        r = reference(lambda a: a(0, 1) * 2.0 - a(1, 0), [v.reshape(5, 5)], [(0, 1), (0, 1)], mode="wrap")
        return np.sum(r**2)

    h, fd = 1e-6, np.zeros(25)
    for i in range(25):
        e = np.zeros(25)
        e[i] = h
        fd[i] = (f(a.ravel() + e) - f(a.ravel() - e)) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_gradient_of_a_weight_the_kernel_captures():
    # a one-element weight read by every lane: its gradient sums theirs (issue 26)
    a = np.random.default_rng(4).uniform(size=(5, 5))
    w = kiln.Float64([0.7])
    kiln.enable_grad(w)
    t = kiln.TensorXf64(kiln.Float64(a.ravel()), (5, 5))
    k = kiln.stencil(boundary="wrap")(lambda r: r[0, 1] * w - r[1, 0] * w * w)
    kiln.backward(kiln.sum((k(t).array) ** 2))

    def f(v):
        r = v * np.roll(a, -1, axis=1) - v * v * np.roll(a, -1, axis=0)
        return np.sum(r**2)

    fd = (f(0.7 + 1e-6) - f(0.7 - 1e-6)) / 2e-6
    np.testing.assert_allclose(w.grad.numpy(), [fd], rtol=1e-7)


def test_errors():
    with pytest.raises(ValueError, match="argument"):
        lap(np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="boundary"):
        kiln.stencil(boundary="periodic")(lambda a: a[0])
    with pytest.raises(ValueError, match="standard_indexing"):
        kiln.stencil(standard_indexing=("zz",))(lambda a: a[0])
    with pytest.raises(TypeError, match="offsets"):
        kiln.stencil(lambda a: a["x"])(np.ones(3))
    with pytest.raises(ValueError):
        kiln.stencil(lambda a: a[0, 1])(np.ones(4))  # two offsets on a 1-D input


def test_window_min_and_max():
    x = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    assert kiln.stencil(lambda a: kiln.max(a[-1:2]))(x).tolist() == [0, 5, 4, 4, 0]
    assert kiln.stencil(lambda a: kiln.min(a[-1:2]))(x).tolist() == [0, 1, 1, 2, 0]
    with pytest.raises(ValueError, match="stencil kernel"):
        kiln.stencil(lambda a: max(a[-1:2]))(x)  # Python's max compares values: a read
