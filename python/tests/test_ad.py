"""Dr.Jit's AD calls from Python: reverse and forward mode against central differences in float64
and against each other, suspend/resume, detach, errors for arrays that carry no gradient."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def f(x):
    """A function through most of the math library."""
    return kiln.sin(x) * kiln.exp(-x * x) + kiln.sqrt(x * x + 1.0) / (2.0 + kiln.tanh(x)) + x**3 * 0.1


def f_np(x):
    return np.sin(x) * np.exp(-x * x) + np.sqrt(x * x + 1) / (2 + np.tanh(x)) + x**3 * 0.1


def central(fn, a, h=1e-6):
    return (fn(a + h) - fn(a - h)) / (2 * h)


def test_reverse_mode_matches_central_differences():
    a = np.linspace(-2, 2, 101)
    x = kiln.Float64(a)
    kiln.enable_grad(x)
    assert kiln.grad_enabled(x)
    y = f(x)
    kiln.backward(y)  # Dr.Jit's rule: every element seeded with 1
    np.testing.assert_allclose(kiln.grad(x).numpy(), central(f_np, a), rtol=1e-7, atol=1e-8)


def test_forward_mode_matches_reverse_mode():
    a = np.linspace(-2, 2, 33)
    x = kiln.Float64(a)
    kiln.enable_grad(x)
    y = f(x)
    kiln.forward(x)
    fwd = kiln.grad(y).numpy()
    x2 = kiln.Float64(a)
    kiln.enable_grad(x2)
    kiln.backward(f(x2))
    np.testing.assert_allclose(fwd, x2.grad.numpy(), rtol=1e-12)


def test_gradient_of_a_scalar_loss_and_the_grad_property():
    x = kiln.Float32([1.0, 2.0, 3.0])
    w = kiln.Float32([0.5])
    kiln.enable_grad(x, w)
    loss = kiln.sum((x * w - 1.0) ** 2)
    kiln.backward(loss)
    r = np.array([1, 2, 3]) * 0.5 - 1
    np.testing.assert_allclose(x.grad.numpy(), 2 * r * 0.5, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), [np.sum(2 * r * np.array([1, 2, 3]))], rtol=1e-6)


def test_backward_from_a_seed_and_retain_graph():
    x = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(x)
    y = x * 3.0
    kiln.backward_from(y, kiln.Float64([1.0, 10.0]), retain_graph=True)
    assert x.grad.tolist() == [3.0, 30.0]
    kiln.backward_from(y, 1.0)
    assert x.grad.tolist() == [6.0, 33.0]  # gradients accumulate
    with pytest.raises(ValueError):
        kiln.backward(y)  # the second pass consumed the graph


def test_set_grad_and_forward_to():
    a, b = kiln.Float64(2.0), kiln.Float64(5.0)
    kiln.enable_grad(a, b)
    y = a * b + kiln.sin(a)
    kiln.set_grad(a, 1.0)
    kiln.forward_to(y)
    np.testing.assert_allclose(kiln.grad(y).numpy(), [5.0 + np.cos(2.0)], rtol=1e-14)


def test_suspend_and_resume_grad():
    x = kiln.Float32([1.0, 2.0])
    kiln.enable_grad(x)
    with kiln.suspend_grad():
        y = x * 2.0
        with kiln.resume_grad():
            z = x * 3.0
    assert not kiln.grad_enabled(y)
    assert kiln.grad_enabled(z)
    assert kiln.grad_enabled(x * 4.0)  # recording is back on after the block
    with pytest.raises(ValueError, match="takes no arguments"):
        kiln.suspend_grad(x)


def test_suspend_grad_is_restored_when_the_block_raises():
    x = kiln.Float32([1.0])
    kiln.enable_grad(x)
    with pytest.raises(RuntimeError):
        with kiln.suspend_grad():
            raise RuntimeError("inside")
    assert kiln.grad_enabled(x * 2.0)


def test_detach_disable_and_clear():
    x = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(x)
    d = kiln.detach(x)
    assert not kiln.grad_enabled(d) and d.tolist() == [1.0, 2.0]
    kiln.backward(x * x)
    assert x.grad.tolist() == [2.0, 4.0]
    kiln.clear_grad(x)
    assert x.grad.tolist() == [0.0, 0.0]
    kiln.disable_grad(x)
    assert not kiln.grad_enabled(x)


def test_gradients_through_gather_scatter_and_select():
    a = np.array([1.0, -2.0, 3.0, 4.0])
    x = kiln.Float64(a)
    kiln.enable_grad(x)
    g = kiln.gather(kiln.Float64, x, kiln.UInt32([0, 0, 3]))
    s = kiln.select(x > 0, x * x, -x)
    loss = kiln.sum(g * 2.0) + kiln.sum(s)
    kiln.backward(loss)
    want = np.array([4.0, 0.0, 0.0, 2.0]) + np.where(a > 0, 2 * a, -1.0)
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_integer_arrays_carry_no_gradient():
    with pytest.raises(TypeError, match="Float32 and Float64"):
        kiln.enable_grad(kiln.Int32([1]))
    with pytest.raises(TypeError):
        kiln.backward(kiln.Int32([1]))
    assert kiln.grad(kiln.Int32([1, 2])).tolist() == [0, 0]


def test_gradient_descent_fits_a_line():
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, 256)
    ys = 3.0 * xs - 0.5 + rng.normal(0, 0.01, 256)
    X, Y = kiln.Float64(xs), kiln.Float64(ys)
    w, b = kiln.Float64(0.0), kiln.Float64(0.0)
    for _ in range(200):
        kiln.enable_grad(w, b)
        loss = kiln.mean((w * X + b - Y) ** 2)
        kiln.backward(loss)
        w = kiln.detach(w) - 0.5 * w.grad
        b = kiln.detach(b) - 0.5 * b.grad
    assert abs(float(w) - 3.0) < 0.01 and abs(float(b) + 0.5) < 0.01
