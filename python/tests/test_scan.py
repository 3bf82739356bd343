"""Scans from Python: PyTensor's face (taps, outputs that do not feed back, non-sequences,
n_steps, go_backwards, until) and JAX's (pytrees, reverse, length), against NumPy loops; gradients
through both against central differences."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def test_pytensor_rnn_with_scalar_weights():
    u = np.array([1.0, 2.0, 3.0, 4.0])
    out, updates = kiln.scan(
        lambda u_t, x_tm1, w_in, w: u_t * w_in + x_tm1 * w,
        sequences=kiln.TensorXf64(u),
        outputs_info=kiln.TensorXf64(np.array(1.0)),
        non_sequences=[kiln.TensorXf64(np.array(2.0)), kiln.TensorXf64(np.array(0.5))],
    )
    assert updates == {}
    np.testing.assert_allclose(out.numpy(), [2.5, 5.25, 8.625, 12.3125])


def test_pytensor_taps_and_outputs_without_feedback():
    # Fibonacci with taps [-2, -1], and a second output that does not feed back
    x0 = kiln.TensorXi64(np.array([0, 1]))
    (fib, double), _ = kiln.scan(
        lambda f2, f1: (f2 + f1, (f2 + f1) * 2),
        outputs_info=[dict(initial=x0, taps=[-2, -1]), None],
        n_steps=10,
    )
    want = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89]
    assert fib.numpy().tolist() == want
    assert double.numpy().tolist() == [2 * v for v in want]


def test_pytensor_sequence_taps_go_backwards_and_until():
    x = np.arange(10, dtype=np.float64)
    out, _ = kiln.scan(
        lambda a, b: a * 10 + b,
        sequences=dict(input=kiln.TensorXf64(x), taps=[-1, 1]),
    )
    np.testing.assert_allclose(out.numpy(), [x[t - 1] * 10 + x[t + 1] for t in range(1, 9)])

    back, _ = kiln.scan(lambda v: v * 2, sequences=kiln.TensorXf64(x), go_backwards=True)
    np.testing.assert_allclose(back.numpy(), x[::-1] * 2)

    def step(v, acc):
        s = acc + v
        return s, kiln.until(s > 10)

    stopped, _ = kiln.scan(step, sequences=kiln.TensorXf64(x), outputs_info=kiln.TensorXf64(np.array(0.0)))
    np.testing.assert_allclose(stopped.numpy(), [0, 1, 3, 6, 10, 15])  # stops after the step where 15 > 10


def test_pytensor_gradient():
    a_np, xs = 0.7, np.array([1.0, -2.0, 0.5, 3.0])
    a = kiln.Float64(a_np)
    kiln.enable_grad(a)
    ta = kiln.TensorXf64(a, ())
    out, _ = kiln.scan(lambda x, h, w: kiln.tanh(h * w + x), sequences=kiln.TensorXf64(xs),
                       outputs_info=kiln.TensorXf64(np.array(0.0)), non_sequences=ta)
    kiln.backward(kiln.sum((out * out).array))

    def loss(w):
        h, total = 0.0, 0.0
        for x in xs:
            h = np.tanh(h * w + x)
            total += h * h
        return total

    fd = (loss(a_np + 1e-6) - loss(a_np - 1e-6)) / 2e-6
    np.testing.assert_allclose(a.grad.numpy(), [fd], rtol=1e-6)


def test_jax_scan_with_pytrees_reverse_and_length():
    xs = {"u": kiln.TensorXf64(np.arange(6.0).reshape(3, 2)), "k": kiln.TensorXi(np.array([1, 2, 3]))}
    init = (kiln.TensorXf64(np.zeros(2)), kiln.TensorXi(np.array(0)))

    def f(c, x):
        s, n = c
        s2 = s + x["u"]
        return (s2, n + x["k"]), {"running": s2}

    (s, n), ys = kiln.lax.scan(f, init, xs)
    np.testing.assert_allclose(s.numpy(), [6.0, 9.0])
    assert n.numpy().tolist() == 6
    np.testing.assert_allclose(ys["running"].numpy(), [[0, 1], [2, 4], [6, 9]])

    _, rev = kiln.lax.scan(lambda c, x: (c + x, c + x), kiln.TensorXi64(np.array(0)),
                           kiln.TensorXi64(np.array([3, 1, 4, 1, 5, 9])), reverse=True)
    assert rev.numpy().tolist() == [23, 20, 19, 15, 14, 9]

    c, ys = kiln.lax.scan(lambda c, _: (c + 1, c), kiln.TensorXi64(np.array(0)), None, length=5)
    assert c.numpy().tolist() == 5 and ys.numpy().tolist() == [0, 1, 2, 3, 4]


def test_jax_scan_gradient():
    w_np = np.array([0.5, -0.3])
    w = kiln.Float64(w_np)
    kiln.enable_grad(w)
    tw = kiln.TensorXf64(w, (2,))
    xs = np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 0.0]])
    c, _ = kiln.lax.scan(lambda c, x: (kiln.TensorXf64(c) * tw + x, None), kiln.TensorXf64(np.ones(2)),
                         kiln.TensorXf64(xs))
    kiln.backward(kiln.sum(c.array))

    def final(wv):
        c = np.ones(2)
        for x in xs:
            c = c * wv + x
        return c.sum()

    fd = [(final(w_np + e) - final(w_np - e)) / 2e-6 for e in np.eye(2) * 1e-6]
    np.testing.assert_allclose(w.grad.numpy(), fd, rtol=1e-6)


def test_scan_errors():
    with pytest.raises(ValueError, match="returned 2 output"):
        kiln.scan(lambda h: (h, h), outputs_info=kiln.TensorXf64(np.array(0.0)), n_steps=3)
    with pytest.raises(ValueError, match="updates"):
        kiln.scan(lambda h: (h + 1, {"x": 1}), outputs_info=kiln.TensorXf64(np.array(0.0)), n_steps=3)
    with pytest.raises(ValueError, match="length"):
        kiln.lax.scan(lambda c, x: (c, c), kiln.TensorXf64(np.array(0.0)))

    class Boom(Exception):
        pass

    def bad(c, x):
        raise Boom()

    with pytest.raises(Boom):
        kiln.lax.scan(bad, kiln.TensorXf64(np.array(0.0)), kiln.TensorXf64(np.ones(3)))
