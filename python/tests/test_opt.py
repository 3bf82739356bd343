"""kiln.opt (Dr.Jit's optimizers): each update rule against NumPy in float64, the dictionary
interface, learning rates per parameter, masks, bad input, and frozen training steps that replay
with changing learning rates."""

import numpy as np
import pytest

import kiln
from kiln.opt import SGD, RMSProp, Adam

C = np.array([4.0, -1.0, 0.5, 2.0, 0.0, 3.0])
W = np.array([1.0, 0.5, 2.0, 0.0, 1.5, 1.0])  # component 3 never gets a gradient


def loss_grad(x):
    """Gradient of sum(W (x - C)^2)."""
    return 2.0 * W * (x - C)


def np_sgd(x, steps, lr, momentum=0.0, nesterov=False):
    v = np.zeros_like(x)
    for _ in range(steps):
        g = loss_grad(x)
        if momentum == 0:
            x = x - lr * g
            continue
        v = momentum * v + g
        x = x - lr * (g + momentum * v if nesterov else v)
    return x


def np_rmsprop(x, steps, lr, alpha=0.99, eps=1e-8):
    m = np.zeros_like(x)
    for _ in range(steps):
        g = loss_grad(x)
        m = alpha * m + (1 - alpha) * g * g
        x = x - lr * g / (np.sqrt(m) + eps)
    return x


def np_adam(x, steps, lr, b1=0.9, b2=0.999, eps=1e-8, uniform=False, mask=False):
    m, v = np.zeros_like(x), np.zeros_like(x)
    for t in range(1, steps + 1):
        g = loss_grad(x)
        m1 = b1 * m + (1 - b1) * g
        v1 = b2 * v + (1 - b2) * g * g
        vs = v1.max() if uniform else v1
        x1 = x - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m1 / (np.sqrt(vs) + eps)
        if mask:
            keep = g == 0
            x1, m1, v1 = np.where(keep, x, x1), np.where(keep, m, m1), np.where(keep, v, v1)
        x, m, v = x1, m1, v1
    return x


def run(opt, tp, steps, x0=None):
    opt["x"] = tp(*(x0 if x0 is not None else np.linspace(-1, 1, 6)))
    w, c = tp(*W), tp(*C)
    for _ in range(steps):
        x = opt["x"]
        kiln.backward(kiln.sum(w * kiln.square(x - c)))
        opt.step()
    return np.array(opt["x"], dtype=np.float64)


X0 = np.linspace(-1, 1, 6)
CASES = [
    ("sgd", lambda: SGD(lr=0.05), lambda: np_sgd(X0, 7, 0.05)),
    ("momentum", lambda: SGD(lr=0.05, momentum=0.9), lambda: np_sgd(X0, 7, 0.05, 0.9)),
    ("nesterov", lambda: SGD(lr=0.05, momentum=0.8, nesterov=True),
     lambda: np_sgd(X0, 7, 0.05, 0.8, True)),
    ("rmsprop", lambda: RMSProp(lr=0.01, alpha=0.9), lambda: np_rmsprop(X0, 7, 0.01, 0.9)),
    ("rmsprop eps", lambda: RMSProp(lr=0.01, epsilon=0.1), lambda: np_rmsprop(X0, 7, 0.01, eps=0.1)),
    ("adam", lambda: Adam(lr=0.1), lambda: np_adam(X0, 7, 0.1)),
    ("adam betas", lambda: Adam(lr=0.1, beta_1=0.5, beta_2=0.7, epsilon=1e-3),
     lambda: np_adam(X0, 7, 0.1, 0.5, 0.7, 1e-3)),
    ("uniform adam", lambda: Adam(lr=0.1, uniform=True), lambda: np_adam(X0, 7, 0.1, uniform=True)),
    ("masked adam", lambda: Adam(lr=0.1, mask_updates=True), lambda: np_adam(X0, 7, 0.1, mask=True)),
]


@pytest.mark.parametrize("tp,tol", [(kiln.Float64, 1e-12), (kiln.Float32, 2e-5)])
@pytest.mark.parametrize("name,make,want", CASES, ids=[c[0] for c in CASES])
def test_update_rules_match_numpy(name, make, want, tp, tol):
    got = run(make(), tp, 7)
    np.testing.assert_allclose(got, want(), rtol=tol, atol=tol)


def test_masked_components_keep_their_value_and_state():
    # component 1's gradient is zero in the second step: with momentum it still moves unless
    # masked, and masked its velocity is kept for the third step
    def run3(mask):
        opt = SGD(lr=1.0, momentum=0.5, mask_updates=mask)
        opt["x"] = kiln.Float64(0.0, 0.0)
        out = []
        for w in ([1.0, 1.0], [1.0, 0.0], [1.0, 1.0]):
            kiln.backward(kiln.sum(opt["x"] * kiln.Float64(*w)))
            opt.step()
            out.append(np.array(opt["x"]).tolist())
        return out

    assert run3(False) == [[-1.0, -1.0], [-2.5, -1.5], [-4.25, -2.75]]
    assert run3(True) == [[-1.0, -1.0], [-2.5, -1.0], [-4.25, -2.5]]


def test_step_gives_fresh_gradients_and_eval_false_fuses_later():
    opt = SGD(lr=0.5)
    opt["x"] = kiln.Float32(1.0, 2.0)
    kiln.backward(kiln.sum(opt["x"] * 3.0))
    opt.step(eval=False)
    assert np.array(kiln.grad(opt["x"])).tolist() == [0.0, 0.0]
    assert np.array(opt["x"]).tolist() == [-0.5, 0.5]
    assert kiln.grad_enabled(opt["x"])


def test_learning_rates_global_and_per_parameter():
    opt = SGD(lr=1.0, params={"a": kiln.Float64(0.0), "b": kiln.Float64(0.0)})
    opt.set_learning_rate({"a": 0.5})
    opt.set_learning_rate(b=0.25)
    assert (opt.learning_rate(), opt.learning_rate("a"), opt.learning_rate("b")) == (1.0, 0.5, 0.25)

    def step():
        kiln.backward(opt["a"] + opt["b"])  # both gradients 1
        opt.step()
        return float(np.array(opt["a"])[0]), float(np.array(opt["b"])[0])

    assert step() == (-0.5, -0.25)
    opt.set_learning_rate(2.0)  # the per-parameter rates still win
    assert step() == (-1.0, -0.5)
    opt.set_learning_rate(a=None)  # back to the global rate
    assert opt.learning_rate("a") is None
    assert step() == (-3.0, -0.75)
    opt.set_learning_rate(kiln.Float64(0.5))  # a one-element array works too
    assert step() == (-3.5, -1.0)
    opt.set_learning_rate(np.float32(0.5))  # and a NumPy number
    assert opt.learning_rate() == 0.5 and type(opt.learning_rate()) is float
    assert step() == (-4.0, -1.25)
    with pytest.raises(TypeError, match="must be a number"):
        opt.set_learning_rate(np.bool_(True))


def test_the_dictionary_interface():
    opt = Adam(lr=0.1, params={"x": kiln.Float32(1, 2)})
    opt.update({"y": kiln.Float32(3)}, z=kiln.Float64(4, 5, 6))
    assert len(opt) == 3 and "y" in opt and "w" not in opt
    assert opt.keys() == ["x", "y", "z"] and list(opt) == ["x", "y", "z"]
    assert [k for k, _ in opt.items()] == ["x", "y", "z"]
    assert len(opt.values()) == 3
    del opt["y"]
    assert opt.keys() == ["x", "z"]
    # the optimizer holds a copy: changing the caller's array changes nothing
    mine = kiln.Float32(7, 8)
    opt["x"] = mine
    mine += 1
    assert np.array(opt["x"]).tolist() == [7, 8]
    with pytest.raises(KeyError, match='no parameter named "nope"'):
        opt["nope"]
    r = repr(opt)
    assert "Adam[" in r and "total_count = 5" in r


def test_assigning_keeps_state_for_the_same_shape_and_resets_otherwise():
    def momentum_step(opt, value):
        opt["x"] = value
        kiln.backward(kiln.sum(opt["x"]))  # gradient 1
        opt.step()
        return np.array(opt["x"]).tolist()

    opt = SGD(lr=1.0, momentum=0.5)
    assert momentum_step(opt, kiln.Float64(0.0, 0.0)) == [-1.0, -1.0]        # v = 1
    assert momentum_step(opt, kiln.Float64(0.0, 0.0)) == [-1.5, -1.5]        # v = 1.5: kept
    assert momentum_step(opt, kiln.Float64(0.0, 0.0, 0.0)) == [-1.0] * 3     # new shape: reset
    opt.reset("x")
    assert momentum_step(opt, kiln.Float64(0.0, 0.0, 0.0)) == [-1.0] * 3
    opt.reset()
    assert momentum_step(opt, kiln.Float64(0.0, 0.0, 0.0)) == [-1.0] * 3


def test_tensors_and_vectors_are_parameters():
    opt = Adam(lr=0.1)
    opt["t"] = kiln.TensorXf(kiln.Float32(1, 2, 3, 4), (2, 2))
    opt["v"] = kiln.Array3f(1, 2, 3)
    for _ in range(3):
        t, v = opt["t"], opt["v"]
        kiln.backward(kiln.sum(t.array * t.array) + kiln.sum(v.x + v.y * 2.0 + v.z * 3.0))
        opt.step()
    assert opt["t"].shape == (2, 2) and isinstance(opt["v"], kiln.Array3f)
    # Adam's first steps move every component by about lr against its gradient's sign
    np.testing.assert_allclose(np.array(opt["t"].array), [0.7, 1.7, 2.7, 3.7], atol=2e-3)
    np.testing.assert_allclose([float(np.array(c)[0]) for c in (opt["v"].x, opt["v"].y, opt["v"].z)],
                               [0.7, 1.7, 2.7], atol=2e-3)


def test_grad_scale_and_active():
    opt = SGD(lr=1.0)
    opt["x"] = kiln.Float32(0.0)
    kiln.backward(opt["x"] * 4.0)
    opt.step(grad_scale=0.25)
    assert np.array(opt["x"]).tolist() == [-1.0]
    kiln.backward(opt["x"] * 4.0)
    opt.step(active=kiln.Bool(False))
    assert np.array(opt["x"]).tolist() == [-1.0]
    a = Adam(lr=0.1)
    a["x"] = kiln.Float32(0.0)
    kiln.backward(a["x"] * 4.0)
    a.step(active=kiln.Bool(False))  # nothing moves, the step count neither
    kiln.backward(a["x"] * 4.0)
    a.step()
    np.testing.assert_allclose(np.array(a["x"]), [-0.1], rtol=1e-5)


def test_uniform_adam_takes_the_largest_moment_over_the_whole_parameter():
    vec, flat = Adam(lr=0.1, uniform=True), Adam(lr=0.1, uniform=True)
    vec["p"] = kiln.Array3f(0.0, 0.0, 0.0)
    flat["p"] = kiln.Float32(0.0, 0.0, 0.0)
    p = vec["p"]
    kiln.backward(kiln.sum(p.x * 1.0 + p.y * 10.0 + p.z * 100.0))
    vec.step()
    kiln.backward(kiln.sum(flat["p"] * kiln.Float32(1.0, 10.0, 100.0)))
    flat.step()
    got = [float(np.array(c)[0]) for c in (vec["p"].x, vec["p"].y, vec["p"].z)]
    np.testing.assert_allclose(got, np.array(flat["p"]), rtol=1e-6)
    assert abs(got[0]) < abs(got[2]) / 50  # one scale for all three: small gradient, small step


def test_python_bools_and_other_precisions_as_step_options():
    opt = SGD(lr=0.5)
    opt["x"] = kiln.Float32(1.0, 2.0)
    kiln.backward(kiln.sum(opt["x"] * opt["x"]))
    opt.step(active=True)
    assert np.array(opt["x"]).tolist() == [0.0, 0.0]
    kiln.backward(kiln.sum(opt["x"] + 1.0))
    opt.step(active=False)
    assert np.array(opt["x"]).tolist() == [0.0, 0.0]
    kiln.backward(kiln.sum(opt["x"] * 4.0))
    opt.step(grad_scale=kiln.Float64(0.5))  # cast to the parameter's precision
    assert np.array(opt["x"]).tolist() == [-1.0, -1.0]
    assert type(opt["x"]) is kiln.Float32


def test_bad_input_names_the_fix():
    opt = SGD(lr=0.1)
    with pytest.raises(TypeError, match="floating-point"):
        opt["i"] = kiln.Int32(1, 2)
    with pytest.raises(TypeError, match="floating-point"):
        opt["p"] = 1.5
    with pytest.raises(ValueError, match="empty"):
        opt["e"] = kiln.Float32()
    with pytest.raises(TypeError, match="names are strings"):
        opt[1] = kiln.Float32(1)
    for make, what in [(lambda: SGD(lr=-1.0), ">= 0"), (lambda: SGD(lr=0.1, nesterov=True), "momentum > 0"),
                       (lambda: Adam(lr=0.1, beta_1=1.0), "beta_1"), (lambda: RMSProp(lr=0.1, alpha=1.5), "alpha"),
                       (lambda: Adam(lr=kiln.Float32(1, 2)), "one float element")]:
        with pytest.raises(kiln.InvalidArgument, match=what):
            make()
    with pytest.raises(KeyError):
        opt.set_learning_rate(missing=0.1)


def training_step(target, opt):
    loss = kiln.mean(kiln.square(opt["x"] - target) + kiln.square(opt["y"]))
    kiln.backward(loss)
    opt.step()
    return [opt["x"], opt["y"]], loss


@pytest.mark.parametrize("make", [lambda: SGD(lr=0.01, momentum=0.9), lambda: RMSProp(lr=0.01),
                                  lambda: Adam(lr=0.01), lambda: Adam(lr=0.01, uniform=True)],
                         ids=["sgd", "rmsprop", "adam", "uniform adam"])
def test_a_frozen_training_step_replays_with_changing_rates(make):
    frozen = kiln.freeze(training_step)
    a, b = make(), make()
    target = kiln.Float32(*np.linspace(-1, 1, 10))
    for opt in (a, b):
        opt["x"] = kiln.full(kiln.Float32, 1, 10)
        opt["y"] = kiln.full(kiln.Float32, -1, 10)
    for i in range(12):
        for opt in (a, b):  # a schedule: new data, not a new recording
            opt.set_learning_rate(0.01 / (1 + i))
            opt.set_learning_rate(y=0.002 * (i % 3 + 1))
        got, gl = frozen(target, a)
        want, wl = training_step(target, b)
        for g, w in zip(got, want):
            assert np.array(g).tolist() == np.array(w).tolist()
        assert np.array(gl).tolist() == np.array(wl).tolist()
    assert frozen.n_recordings == 1 and frozen.n_replays == 11
    # the state moved on every call, replays included
    assert np.array(a["x"]).tolist() == np.array(b["x"]).tolist() != [1.0] * 10
    # a changed hyper-parameter is a new recording
    for opt in (a, b):
        setattr(opt, "momentum" if isinstance(opt, SGD) else
                "alpha" if isinstance(opt, RMSProp) else "beta_1", 0.5)
    frozen(target, a)
    training_step(target, b)
    assert frozen.n_recordings == 2
    assert np.array(a["x"]).tolist() == np.array(b["x"]).tolist()


def test_the_adam_example_runs(capsys, monkeypatch):
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "fit_with_adam.py"
    monkeypatch.setattr("sys.argv", [str(example), "5000", "150"])
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "1 recording, 149 replays" in out and "agree bit for bit: True" in out
