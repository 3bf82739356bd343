"""Dr.Jit's AD calls from Python: reverse and forward mode against central differences in float64
and against each other, suspend/resume, detach, errors for arrays that carry no gradient."""

import dataclasses
import gc

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


def test_a_copy_made_while_suspended_is_detached():
    x = kiln.Float32([1.0, 2.0])
    kiln.enable_grad(x)
    kept = kiln.Float32(x)  # outside: the same array, still tracked
    with kiln.suspend_grad():
        copy = kiln.Float32(x)
        wider = kiln.Float64(x)
    with kiln.resume_grad():
        assert kiln.grad_enabled(x) and kiln.grad_enabled(kept)
        assert not kiln.grad_enabled(copy) and not kiln.grad_enabled(wider)
    assert copy.tolist() == [1.0, 2.0] and wider.tolist() == [1.0, 2.0]
    t = kiln.TensorXf(x, (2,))
    with kiln.suspend_grad():
        tcopy = kiln.TensorXf(t)
    assert kiln.grad_enabled(t) and not kiln.grad_enabled(tcopy)


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
    # as in Dr.Jit, enable_grad leaves integer arrays as they are (generic code over types runs)
    i, f = kiln.Int32([1]), kiln.Float32([1.0])
    kiln.enable_grad(i, f)
    assert not kiln.grad_enabled(i) and kiln.grad_enabled(f)
    with pytest.raises(kiln.InvalidArgument, match="enable_grad"):
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


# ---- Dr.Jit's flags, queues and trees ------------------------------------------------------------


def test_flags_choose_what_a_reverse_pass_clears():
    x = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(x)
    y = x * x
    kiln.backward(y, kiln.ADFlag.ClearNone)  # keeps the graph
    kiln.backward(y)  # Default: consumes it
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(kiln.InvalidArgument, match="consumed"):
        kiln.backward(y)
    with pytest.raises(kiln.InvalidArgument, match="AllowNoGrad"):
        kiln.backward(kiln.Float64([1.0]))
    kiln.backward_from(kiln.Float64([1.0]), flags=kiln.ADFlag.Default | kiln.ADFlag.AllowNoGrad)


def test_enqueue_and_traverse_run_one_pass_from_several_arrays():
    a, b = kiln.Float64([2.0]), kiln.Float64([5.0])
    kiln.enable_grad(a, b)
    y, z = a * b, a * a
    # forward: tangents from both seeds add up where their paths meet
    kiln.set_grad(a, 1.0)
    kiln.set_grad(b, 10.0)
    kiln.enqueue(kiln.ADMode.Forward, a, b)
    kiln.traverse(kiln.ADMode.Forward, kiln.ADFlag.ClearEdges)
    assert kiln.grad(y).tolist() == [5.0 + 10.0 * 2.0] and kiln.grad(z).tolist() == [4.0]
    assert kiln.grad(a).tolist() == [1.0]  # ClearInput left out: the seeds keep theirs
    # reverse: the seeds' gradients are the cotangents of one pass
    kiln.clear_grad(a, b)
    kiln.set_grad(y, 1.0)
    kiln.set_grad(z, 100.0)
    kiln.enqueue(kiln.ADMode.Backward, (y, z))
    kiln.traverse(kiln.ADMode.Backward)  # Default: clears the seeds' gradients
    assert kiln.grad(a).tolist() == [5.0 + 100.0 * 4.0] and kiln.grad(b).tolist() == [2.0]
    assert kiln.grad(y).tolist() == [0.0] and kiln.grad(z).tolist() == [0.0]


def test_grad_and_detach_keep_the_structure_of_trees():
    @dataclasses.dataclass
    class Params:
        w: kiln.Float64
        n: kiln.UInt32

    p = Params(kiln.Float64([1.0, 2.0]), kiln.UInt32([3]))
    tree = {"p": p, "v": [kiln.Array2f64(1.0, 2.0)]}
    kiln.enable_grad(tree)  # the integer field is left as it is, as in Dr.Jit
    assert kiln.grad_enabled(p.w) and not kiln.grad_enabled(p.n)
    loss = kiln.sum(p.w * p.w) + kiln.sum(tree["v"][0].x * 3.0)
    kiln.backward(loss)
    g = kiln.grad(tree)
    assert isinstance(g["p"], Params) and g["p"].w.tolist() == [2.0, 4.0]
    assert g["v"][0].x.tolist() == [3.0] and g["v"][0].y.tolist() == [0.0]
    d = kiln.detach(tree)
    assert not kiln.grad_enabled(d) and kiln.grad_enabled(tree)
    kiln.set_grad(kiln.Float64([1.0]), 5.0)  # no tracking: nothing to set (Dr.Jit's rule)
    assert kiln.is_float_v(kiln.Array3f) and not kiln.is_float_v(kiln.UInt32)
    assert kiln.backend_v(kiln.Float32) == kiln.JitBackend.LLVM and kiln.size_v(kiln.Array3f) == 3


def test_backward_to_reaches_its_targets_only():
    a, b = kiln.Float64([1.0]), kiln.Float64([3.0])
    with pytest.raises(RuntimeError, match="does not depend on the input"):
        kiln.backward_to(a)  # Dr.Jit's RuntimeError; also a kiln.InvalidArgument
    kiln.enable_grad(a, b)
    c = a * b * 2.0
    kiln.set_grad(c, 1.0)
    assert kiln.backward_to(a, flags=kiln.ADFlag.ClearInterior).tolist() == [6.0]
    assert kiln.grad(b).tolist() == [0.0] and kiln.grad(c).tolist() == [1.0]
    ga, gb = kiln.backward_to(a, b)  # Default: consumes the graph, clears the seed c
    assert ga.tolist() == [12.0] and gb.tolist() == [2.0] and kiln.grad(c).tolist() == [0.0]


def test_isolate_grad_holds_gradients_at_its_boundary_until_it_ends():
    a = kiln.Float64([1.0])
    kiln.enable_grad(a)
    b = a * 2.0
    with kiln.isolate_grad():
        c = b * 2.0
        with kiln.isolate_grad():
            kiln.backward(c * 2.0)
            assert kiln.grad(a).tolist() == [0.0]
        assert kiln.grad(a).tolist() == [0.0]  # still held at b
    assert kiln.grad(a).tolist() == [8.0]
    with pytest.raises(ZeroDivisionError):  # an exception in the block ends the scope and passes
        with kiln.isolate_grad():
            1 / 0
    x = kiln.Float64([3.0])
    kiln.enable_grad(x)
    kiln.backward(x * x)  # no scope left open: the pass reaches x at once
    assert kiln.grad(x).tolist() == [6.0]


def test_a_gradient_for_one_value_used_by_many_lanes_is_their_sum():
    a = kiln.Float64([1.0])
    kiln.enable_grad(a)
    kiln.set_grad(a, kiln.Float64([3.0, 4.0, 5.0]))
    assert kiln.grad(a).tolist() == [12.0]
    kiln.accum_grad(a, [1.0, 2.0])
    assert kiln.grad(a).tolist() == [15.0]
    with pytest.raises(kiln.InvalidArgument, match="2 elements"):
        b = kiln.Float64([1.0, 2.0, 3.0])
        kiln.enable_grad(b)
        kiln.set_grad(b, kiln.Float64([1.0, 2.0]))


# ---- custom operations (Dr.Jit's CustomOp) --------------------------------------------------------


class _LogSumExp(kiln.CustomOp):
    """A stable log(exp(a) + exp(b)) with both derivatives written by hand."""

    def eval(self, a, b):
        m = kiln.maximum(a, b)
        self.wa = kiln.exp(a - m)
        self.wb = kiln.exp(b - m)
        return m + kiln.log(self.wa + self.wb)

    def backward(self):
        g = self.grad_out()
        s = self.wa + self.wb
        self.set_grad_in("a", g * self.wa / s)
        self.set_grad_in("b", g * self.wb / s)

    def forward(self):
        s = self.wa + self.wb
        self.set_grad_out((self.grad_in("a") * self.wa + self.grad_in("b") * self.wb) / s)


def test_custom_op_gradients_match_differences_in_both_modes():
    av, bv = np.array([0.5, -800.0, 3.0]), np.array([1.5, -801.0, -2.0])

    def f(a, b):
        return np.logaddexp(a, b)

    a, b = kiln.Float64(av), kiln.Float64(bv)
    kiln.enable_grad(a, b)
    y = kiln.custom(_LogSumExp, a, b=b)
    np.testing.assert_allclose(y.numpy(), f(av, bv), rtol=1e-12)
    w = np.array([1.0, 2.0, -3.0])
    kiln.backward(kiln.sum(y * kiln.Float64(w)))
    h = 1e-6
    for x, g in ((av, a.grad.numpy()), (bv, b.grad.numpy())):
        e = np.eye(3)
        fd = [((f(*(x + h * e[i], bv) if x is av else (av, x + h * e[i]))
                - f(*(x - h * e[i], bv) if x is av else (av, x - h * e[i]))) * w).sum() / (2 * h)
              for i in range(3)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    # forward mode along (1, 0) gives the reverse gradient's a-part lane by lane
    a2, b2 = kiln.Float64(av), kiln.Float64(bv)
    kiln.enable_grad(a2, b2)
    kiln.set_grad(a2, 1.0)
    y2 = kiln.custom(_LogSumExp, a2, b2)
    t = kiln.forward_to(y2)
    np.testing.assert_allclose(t.numpy() * w, a.grad.numpy(), rtol=1e-12)


def test_custom_op_errors_are_exceptions_and_leave_nothing_behind():
    class Broken(kiln.CustomOp):
        def eval(self, x):
            return x * 2.0

        def backward(self):
            raise ZeroDivisionError("inside backward")

    class NoForward(kiln.CustomOp):
        def eval(self, x):
            return x * 2.0

        def backward(self):
            self.set_grad_in("x", self.grad_out() * 2.0)

    class WrongName(NoForward):
        def backward(self):
            self.set_grad_in("y", self.grad_out())

    gc.collect()
    before = kiln.stats()["vars_alive"]
    x = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(x)
    with pytest.raises(ZeroDivisionError, match="inside backward"):
        kiln.backward(kiln.sum(kiln.custom(Broken, x)))
    with pytest.raises(kiln.InvalidArgument, match="no parameter 'y'"):
        kiln.backward(kiln.sum(kiln.custom(WrongName, x)))
    kiln.set_grad(x, 1.0)
    with pytest.raises(kiln.Error, match="forward"):
        kiln.forward_to(kiln.custom(NoForward, x))
    with pytest.raises(kiln.InvalidArgument, match="add_input"):
        class Implicit(NoForward):
            def eval(self, x):
                self.add_input(x)
        kiln.custom(Implicit, x)
    # the op still works after the failures, and the arrays go when their names do
    kiln.clear_grad(x)
    kiln.backward(kiln.sum(kiln.custom(NoForward, x)))
    assert x.grad.tolist() == [2.0, 2.0]
    del x
    gc.collect()
    assert kiln.stats()["vars_alive"] == before


def test_backward_to_after_a_forward_pass_through_a_custom_op():
    # a forward pass leaves tangents only in arrays someone holds: none in the op's own nodes
    x, w = kiln.Float64([0.3, -1.2]), kiln.Float64(1.5)
    kiln.enable_grad(x, w)
    y = kiln.custom(_LogSumExp, x * w, x)
    kiln.forward(x)
    kiln.clear_grad(x, w, y)
    z = kiln.sum(y * y)
    kiln.set_grad(z, 1.0)
    gx = kiln.backward_to(x)
    x2, w2 = kiln.Float64([0.3, -1.2]), kiln.Float64(1.5)
    kiln.enable_grad(x2)
    y2 = kiln.custom(_LogSumExp, x2 * w2, x2)
    kiln.backward(kiln.sum(y2 * y2))
    np.testing.assert_allclose(gx.numpy(), x2.grad.numpy(), rtol=1e-12)
    assert kiln.grad(w).tolist() == [0.0]


def test_the_custom_gradients_example_runs(capsys, monkeypatch):
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "custom_gradients.py"
    monkeypatch.setattr("sys.argv", [str(example), "2000"])
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "softplus fit over 2000 lanes" in out and "backward_to(x)" in out


def test_replace_grad_gives_one_array_the_gradient_of_another():
    # a straight-through estimator: rounded values forward, the identity's gradient backward
    x = kiln.Float64([0.4, 1.6, -2.2])
    kiln.enable_grad(x)
    q = kiln.replace_grad(kiln.round(x), x)
    assert q.tolist() == [0.0, 2.0, -2.0] and q.index_ad == x.index_ad != 0
    kiln.backward(q * q)  # d(q^2) = 2 q dq, dq = dx
    assert kiln.grad(x).tolist() == [0.0, 4.0, -4.0]
    # a size-1 gradient source receives the lanes' sum; a number takes the array's type
    y = kiln.Float64([1.0])
    kiln.enable_grad(y)
    kiln.backward(kiln.replace_grad(kiln.Float64([5.0, 6.0]), y) * 3.0)
    assert kiln.grad(y).tolist() == [6.0]
    assert type(kiln.replace_grad(4.0, y)) is kiln.Float64
    with pytest.raises(RuntimeError, match="incompatible input sizes"):
        kiln.replace_grad(kiln.Float64([1.0, 2.0]), kiln.Float64([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError) as e:
        kiln.replace_grad(kiln.Float64([1.0]), kiln.Float32([1.0]))
    assert "incompatible input types" in str(e.value.__cause__)


def test_relative_grad_and_the_safe_functions_against_central_differences():
    a = np.array([0.3, 1.7, 2.5])
    x = kiln.Float64(a)
    kiln.enable_grad(x)
    r = kiln.relative_grad(x * x)
    assert np.allclose(r.numpy(), 1.0)
    kiln.backward(r)  # d(x^2) / x^2 = 2 / x
    assert np.allclose(kiln.grad(x).numpy(), 2.0 / a)
    for fn, ref, lo, hi in [(kiln.safe_sqrt, np.sqrt, 0.0, None),
                            (kiln.safe_asin, np.arcsin, -1.0, 1.0),
                            (kiln.safe_acos, np.arccos, -1.0, 1.0)]:
        inner = np.array([0.25, 0.5, 0.75]) if hi is None else np.array([-0.6, 0.1, 0.9])
        outer = np.array([-1.0, lo]) if hi is None else np.array([-1.5, -1.0, 1.0, 2.0])
        v = np.concatenate([inner, outer])
        x = kiln.Float64(v)
        kiln.enable_grad(x)
        y = fn(x)
        clamped = np.maximum(v, lo) if hi is None else np.clip(v, lo, hi)
        assert np.allclose(y.numpy(), ref(clamped))
        kiln.backward(y)
        g = kiln.grad(x).numpy()
        assert np.allclose(g[: len(inner)], central(ref, inner))  # the function's own inside
        assert (g[len(inner):] == 0).all()  # no infinite or NaN derivative at or past the edge
    nan = kiln.safe_sqrt(kiln.Float64([float("nan")]))
    assert np.isnan(nan.numpy()).all()  # a NaN stays NaN


def test_reduce_modes_are_accepted_and_change_nothing():
    for mode in kiln.ReduceMode:
        t = kiln.zeros(kiln.Float32, 4)
        kiln.scatter_add(t, kiln.Float32([1, 2, 3]), kiln.UInt32([0, 0, 3]), mode=mode)
        kiln.scatter(t, 7.0, kiln.UInt32([1]), mode=mode)
        assert t.tolist() == [3.0, 7.0, 0.0, 3.0]
        assert kiln.gather(kiln.Float32, t, kiln.UInt32([3]), mode=mode).tolist() == [3.0]
    with pytest.raises(TypeError, match="ReduceMode"):
        kiln.scatter(t, 1.0, kiln.UInt32([0]), mode="local")


def test_like_constructors_keep_class_and_shape():
    t = kiln.zeros(kiln.TensorXf, (2, 3))
    v = kiln.Array3f(kiln.Float32([1, 2]), 3, 4)
    z, o = kiln.zeros_like([t, v]), kiln.ones_like({"v": v})
    assert type(z[0]) is kiln.TensorXf and z[0].shape == (2, 3)
    assert type(z[1]) is kiln.Array3f and kiln.width(z[1]) == 2
    assert o["v"].y.tolist() == [1.0, 1.0]
    assert kiln.full_like(kiln.Int32([1, 2, 3]), 5).tolist() == [5, 5, 5]
    with pytest.raises(TypeError, match="not a kiln array"):
        kiln.zeros_like(3.0)
