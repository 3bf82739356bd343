"""Frozen functions from Python: record once, replay without running Python, same answers as the
plain function; arguments changed in place; state_fn; limits; AD inside; errors."""

import dataclasses

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("no_leak")  # conftest.py


def step(x, y):
    return kiln.sin(x) * y + kiln.sqrt(kiln.abs(x)), x * 2


def test_replays_give_the_plain_functions_answers_without_running_python():
    calls = []

    def f(x, y):
        calls.append(1)
        return step(x, y)

    frozen = kiln.freeze(f)
    for n in [1000, 1000, 1000, 17, 17, 1000]:
        rng = kiln.PCG32(n, len(calls))
        x, y = rng.next_float32(), rng.next_float32()
        got = frozen(x, y)
        want = step(x, y)
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    # sizes are parameters of a recording: one recording serves both sizes
    assert frozen.n_recordings == len(calls)
    assert frozen.n_recordings + frozen.n_replays == 6
    assert frozen.n_replays >= 4


def test_decorator_forms_and_kwargs():
    @kiln.freeze
    def f(x, scale=1.0):
        return x * scale

    @kiln.freeze(limit=2, warn_after=100)
    def g(x):
        return x + 1

    x = kiln.Float32([1, 2])
    assert f(x, scale=3.0).tolist() == [3, 6]
    assert f(x, scale=3.0).tolist() == [3, 6]
    assert f(x, scale=4.0).tolist() == [4, 8]  # a Python number is part of the layout
    assert f.n_recordings == 2
    assert g(x).tolist() == [2, 3]


def test_arguments_changed_in_place_are_changed_on_replays():
    @kiln.freeze
    def bump(counts, idx):
        kiln.scatter_reduce(kiln.ReduceOp.Add, counts, 1, idx)

    counts = kiln.opaque(kiln.UInt32, 0, 4)  # evaluated from the start: one layout for all calls
    idx = kiln.opaque(kiln.UInt32, 2, 3)
    idx[0] = 0
    for _ in range(3):
        bump(counts, idx)
    assert counts.tolist() == [3, 0, 6, 0]
    assert bump.n_recordings == 1 and bump.n_replays == 2


@dataclasses.dataclass
class Particles:
    pos: kiln.Float32
    vel: kiln.Float32


class DrJitStyle:
    DRJIT_STRUCT = {"a": kiln.Float64, "b": kiln.Float64}

    def __init__(self, a, b):
        self.a, self.b = a, b


def test_structs_are_looked_into_and_their_fields_updated():
    @kiln.freeze
    def advance(p, dt):
        p.pos = p.pos + p.vel * dt
        p.vel = p.vel * 0.5

    p = Particles(kiln.Float32([0.0, 1.0]), kiln.Float32([1.0, 2.0]))
    for _ in range(3):
        advance(p, 0.5)
    np.testing.assert_allclose(p.pos.numpy(), [0.875, 2.75])
    np.testing.assert_allclose(p.vel.numpy(), [0.125, 0.25])
    assert advance.n_recordings == 1

    @kiln.freeze
    def total(s):
        return s.a + s.b

    assert total(DrJitStyle(kiln.Float64(1.0), kiln.Float64(2.0))).tolist() == [3.0]
    assert total(DrJitStyle(kiln.Float64(5.0), kiln.Float64(2.0))).tolist() == [7.0]


def test_state_fn_makes_captured_arrays_part_of_the_layout():
    w = [kiln.Float32([2.0, 3.0])]

    @kiln.freeze(state_fn=lambda x: w[0])
    def f(x):
        return x * w[0]

    x = kiln.Float32([1.0, 1.0])
    assert f(x).tolist() == [2.0, 3.0]
    w[0] = kiln.Float32([4.0, 5.0])
    assert f(x).tolist() == [4.0, 5.0]


@dataclasses.dataclass
class _Acc:
    total: kiln.Float32
    hits: kiln.UInt32


class _Model:
    """Reached through `self` (an object kiln does not look into), as in Dr.Jit's test68: only
    `state_fn` tells the frozen function about its arrays."""

    def __init__(self):
        self.acc = _Acc(kiln.Float32([0.0, 0.0, 0.0]), kiln.UInt32([0, 0, 0]))
        self.seen = kiln.Float32([1.0, 1.0, 1.0])

    def step(self, x, i):
        self.acc.total += x                                # in place on the object
        self.acc.hits = self.acc.hits + kiln.UInt32(1)     # the field rebound
        kiln.scatter_reduce(kiln.ReduceOp.Add, self.seen, x, i)
        return self.acc.total * 2.0


_GLOBAL_STATE = {}


def _global_step(x):
    _GLOBAL_STATE["acc"] += x
    return _GLOBAL_STATE["acc"] * 1.0


def test_state_fn_arrays_changed_by_the_function_are_changed_by_replays_too():
    # Dr.Jit's state is input and output: what the function does to the state's arrays (`+=`,
    # a scatter, a dataclass field given a new array) reaches the state on every replay
    def run(frozen):
        m = _Model()
        f = kiln.freeze(_Model.step, state_fn=lambda self, x, i: (self.acc, self.seen)) if frozen else _Model.step
        outs = []
        for k in range(4):
            x = kiln.Float32([1.0, 2.0, 3.0]) * float(k + 1)
            i = kiln.UInt32([k % 3, (k + 1) % 3, 0])
            outs.append(f(m, x, i).tolist())
        return f, outs, m.acc.total.tolist(), m.acc.hits.tolist(), m.seen.tolist()

    f, *frozen = run(True)
    _, *plain = run(False)
    assert frozen == plain
    assert f.n_recordings == 1 and f.n_replays == 3
    assert plain[1] == [10.0, 20.0, 30.0] and plain[2] == [4, 4, 4]


def test_state_fn_reaching_a_global_dict():
    _GLOBAL_STATE["acc"] = kiln.opaque(kiln.Float32, 0.0, 2)
    f = kiln.freeze(_global_step, state_fn=lambda x: _GLOBAL_STATE)
    got = [f(kiln.Float32(1.0)).tolist() for _ in range(4)]
    assert got == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    assert _GLOBAL_STATE["acc"].tolist() == [4.0, 4.0]
    assert f.n_recordings == 1 and f.n_replays == 3
    del _GLOBAL_STATE["acc"]


def test_entries_a_frozen_function_rebinds_in_its_containers_are_rebound_on_replays():
    # Dr.Jit's test11 pattern (`state[k] = x - grad` on an argument dict), a list argument, a
    # captured dict and a state_fn dict: the containers are the caller's own objects
    captured = {"w": kiln.Float32([1.0, 2.0])}
    box = {"w": kiln.Float32([3.0])}

    def step(state, items, x):
        state["p"] = state["p"] - x
        items[0] = items[0] * 2.0
        captured["w"] = captured["w"] + x
        box["w"] += x
        return state["p"] + items[0]

    def run(f):
        captured["w"], box["w"] = kiln.Float32([1.0, 2.0]), kiln.Float32([3.0])
        state, items = {"p": kiln.Float32([10.0])}, [kiln.Float32([1.0])]
        outs = [f(state, items, kiln.Float32([1.0])).tolist() for _ in range(4)]
        return outs, state["p"].tolist(), items[0].tolist(), captured["w"].tolist(), box["w"].tolist()

    plain = run(step)
    f = kiln.freeze(step, state_fn=lambda state, items, x: box)
    assert run(f) == plain
    assert f.n_recordings == 1 and f.n_replays == 3
    assert plain == ([[11.0], [12.0], [15.0], [22.0]], [6.0], [16.0], [5.0, 6.0], [7.0])


def test_a_replay_rebinds_entries_instead_of_writing_into_the_callers_objects():
    # `state["p"] = state["p"] - x` leaves the old array as it was (another name may hold it)
    init = kiln.Float32([10.0])

    @kiln.freeze
    def step(state, items, x):
        state["p"] = state["p"] - x
        items[0] = items[0] * 2.0
        return state["p"]

    for _ in range(3):
        state, items = {"p": init, "name": "w", "shape": (1, 2)}, [init]
        old = state["p"]
        assert step(state, items, kiln.Float32([1.0])).tolist() == [9.0]
        assert state["p"] is not old and state["p"].tolist() == [9.0] and items[0].tolist() == [20.0]
        assert init.tolist() == [10.0]
    assert step.n_recordings == 1 and step.n_replays == 2


def test_tensor_parameters_rebound_in_a_dict_are_rebound_on_replays():
    # a training step over a dict of tensors: `params["W"] = params["W"] - lr * g`
    def step(params, x):
        params["W"] = params["W"] - 0.5 * x
        params["b"] = params["b"] * 2.0
        return kiln.sum(params["W"].array)

    def run(f):
        w0 = kiln.TensorXf(kiln.Float32([1.0, 2.0, 3.0, 4.0]), (2, 2))
        params = {"W": w0, "b": kiln.TensorXf(kiln.Float32([1.0]), (1,))}
        outs = [f(params, kiln.TensorXf(kiln.Float32([1.0, 1.0, 1.0, 1.0]), (2, 2))).tolist() for _ in range(4)]
        return outs, params["W"].numpy().tolist(), params["b"].numpy().tolist(), w0.numpy().tolist()

    plain = run(step)
    f = kiln.freeze(step)
    assert run(f) == plain
    assert f.n_recordings == 1 and f.n_replays == 3
    assert plain[1] == [[-1.0, 0.0], [1.0, 2.0]] and plain[2] == [16.0] and plain[3] == [[1.0, 2.0], [3.0, 4.0]]


def test_adding_items_to_a_container_inside_a_frozen_function_is_an_error():
    @kiln.freeze
    def f(log, d, x):
        log.append(x)
        return x * 2

    @kiln.freeze
    def g(d, x):
        d["new"] = x
        return x * 2

    with pytest.raises(ValueError, match="added or removed items of a list"):
        f([kiln.Float32([1.0])], {}, kiln.Float32([1.0]))
    with pytest.raises(ValueError, match="added or removed items of a dict"):
        g({"a": kiln.Float32([1.0])}, kiln.Float32([1.0]))


def test_gradients_inside_a_frozen_step():
    @kiln.freeze
    def train_step(w, x, y):
        kiln.enable_grad(w)
        loss = kiln.sum((w * x - y) ** 2)
        kiln.backward(loss)
        return kiln.detach(w) - 0.1 * w.grad, loss

    x, y = kiln.Float64([1.0, 2.0, 3.0]), kiln.Float64([2.0, 4.0, 6.0])
    w = kiln.Float64([0.0])
    plain_w = kiln.Float64([0.0])
    for _ in range(5):
        w, loss = train_step(w, x, y)
        kiln.enable_grad(plain_w)
        pl = kiln.sum((plain_w * x - y) ** 2)
        kiln.backward(pl)
        plain_w = kiln.detach(plain_w) - 0.1 * plain_w.grad
        assert w.tolist() == plain_w.tolist()
    assert train_step.n_recordings == 1


def test_a_backward_inside_reaches_the_arrays_passed_in():
    # the function-freezing document's pattern: backward inside, the optimizer step outside
    @kiln.freeze
    def loss_and_grad(params, x, y):
        loss = kiln.sum(kiln.square(params["w"] * x + params["b"] - y))
        kiln.backward(loss)
        return loss

    x = kiln.Float64(np.linspace(0.0, 1.0, 50))
    y = 3.0 * x + 0.5
    frozen = {"w": kiln.Float64([0.0]), "b": kiln.Float64([0.0])}
    plain = {"w": kiln.Float64([0.0]), "b": kiln.Float64([0.0])}
    for _ in range(4):
        for p in (frozen, plain):
            kiln.enable_grad(p["w"], p["b"])
        loss_and_grad(frozen, x, y)
        loss_and_grad.function(plain, x, y)
        for k in ("w", "b"):
            assert frozen[k].grad.tolist() == plain[k].grad.tolist()
            assert frozen[k].grad.tolist() != [0.0]
        for p in (frozen, plain):
            for k in ("w", "b"):
                p[k] = kiln.detach(p[k]) - 0.01 * p[k].grad
    assert loss_and_grad.n_recordings == 1

    # gradients add up over calls, as Dr.Jit's do
    w = kiln.Float64([1.0, 2.0])
    kiln.enable_grad(w)
    twice = kiln.freeze(lambda w: kiln.backward(kiln.sum(w * w)))
    twice(w)
    twice(w)
    assert w.grad.tolist() == [4.0, 8.0]


def test_a_python_exception_records_nothing():
    @kiln.freeze
    def f(x, fail):
        if fail:
            raise KeyError("inside")
        return x + 1

    x = kiln.Float32([1.0])
    with pytest.raises(KeyError):
        f(x, True)
    assert f(x, False).tolist() == [2.0]
    assert f.n_recordings == 1


def test_reading_a_value_inside_is_an_error_naming_the_fix():
    @kiln.freeze
    def f(x):
        return x * float(kiln.sum(x))

    with pytest.raises(kiln.Error, match="frozen|recording"):
        f(kiln.Float32([1.0, 2.0]))


def test_recursion_is_refused():
    @kiln.freeze
    def f(x):
        return f(x)

    with pytest.raises(ValueError, match="called itself"):
        f(kiln.Float32([1.0]))


@dataclasses.dataclass
class Model:
    scale: kiln.Float32

    @kiln.freeze
    def apply(self, x):
        return x * self.scale


def test_frozen_methods():
    m = Model(kiln.Float32([3.0]))
    assert m.apply(kiln.Float32([1.0, 2.0])).tolist() == [3.0, 6.0]
    m.scale = kiln.Float32([4.0])
    assert m.apply(kiln.Float32([2.0, 2.0])).tolist() == [8.0, 8.0]
    assert Model.apply.n_recordings == 1
    # through an instance too (Dr.Jit's `obj.method.n_recordings`), shared by all instances
    assert m.apply.n_recordings == 1 and m.apply.__self__ is m
    assert Model(kiln.Float32([1.0])).apply.n_recordings == 1
    Model.apply.clear()  # a frozen function keeps its recordings (and what they hold) until cleared


class Holder:
    """An object kiln cannot look into (no dataclass, no DRJIT_STRUCT)."""


def test_an_array_hidden_in_an_object_is_an_error_naming_state_fn():
    h = Holder()
    h.w = kiln.Float32([3.0])
    h.w.eval()

    @kiln.freeze
    def f(x):
        return x * h.w

    with pytest.raises(ValueError, match="state_fn"):
        f(kiln.Float32([1.0, 2.0]))


def test_captured_values_are_inputs():
    w = kiln.Float32([3.0])
    scale = 2.0

    @kiln.freeze
    def f(x):
        return x * w * scale

    x = kiln.Float32([1.0, 2.0])
    assert f(x).tolist() == [6.0, 12.0]
    w = kiln.Float32([4.0])  # a captured array rebound: bound on the replay
    assert f(x).tolist() == [8.0, 16.0]
    scale = 3.0  # a captured number changed: recorded again
    assert f(x).tolist() == [12.0, 24.0]
    assert f.n_recordings == 2

    total = kiln.Float32([0.0, 0.0])

    @kiln.freeze
    def accumulate(x):
        nonlocal total
        total = total + x

    for _ in range(3):
        accumulate(x)
    assert total.tolist() == [3.0, 6.0]  # the rebinding happens on replays too
    assert accumulate.n_recordings == 1


def test_cyclic_arguments_and_tensor_arguments():
    loop = [kiln.Float32([1.0])]
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        kiln.freeze(lambda v: v[0] + 1)(loop)

    @kiln.freeze
    def total(t):
        return kiln.sum(t) + t.array

    t = kiln.TensorXf(kiln.Float32([0, 1, 2, 3, 4, 5]), (2, 3))
    assert total(t).tolist() == [15, 16, 17, 18, 19, 20]
    assert total(kiln.TensorXf(kiln.Float32([1] * 6), (2, 3))).tolist() == [7] * 6
    assert total.n_recordings == 1
    total.clear()
    assert total.n_recordings == 0


def test_warn_after_warns_in_python():
    q = kiln.freeze(lambda x: x + 1, warn_after=2)
    with pytest.warns(RuntimeWarning, match="recorded 3 times"):
        for k in (1, 2, 3):
            q(kiln.Float32([1.0] * k) if k != 2 else kiln.Float64([1.0]))


def test_kernel_history_lists_what_a_replay_launches():
    f = kiln.freeze(lambda x: (kiln.block_sum(x, 2), x * 2.0, kiln.compress(x > 1.0)))
    x = kiln.arange(kiln.Float32, 8)
    kiln.eval(x)
    with kiln.scoped_set_flag(kiln.JitFlag.KernelHistory, True):
        assert kiln.flag(kiln.JitFlag.KernelHistory)
        f(x)
        rec = kiln.kernel_history()
        f(x)
        rep = kiln.kernel_history()
        (x + 1).numpy()
        plain = kiln.kernel_history()
    assert not kiln.flag(kiln.JitFlag.KernelHistory)
    keys = ("type", "hash", "size", "input_count", "output_count", "operation_count", "op")
    assert [tuple(k[n] for n in keys) for k in rec] == [tuple(k[n] for n in keys) for k in rep]
    assert {k["type"] for k in rec} >= {kiln.KernelType.Reduce, kiln.KernelType.Other}
    assert all(k["recording_mode"] == kiln.KernelRecordingMode.Recorded for k in rec)
    assert all(k["recording_mode"] == kiln.KernelRecordingMode.Replayed for k in rep)
    assert [(k["type"], k["size"]) for k in plain] == [(kiln.KernelType.JIT, 8)]
    assert plain[0]["operation_count"] > 0 and plain[0]["execution_time"] >= 0
    assert plain[0]["recording_mode"] == kiln.KernelRecordingMode.None_


def test_enabled_can_change_and_cached_recordings_are_counted():
    f = kiln.freeze(lambda x: x + 1, enabled=False)
    assert not f.enabled
    x = kiln.arange(kiln.Float32, 5)
    assert f(x).tolist() == [1, 2, 3, 4, 5] and f.n_recordings == 0
    f.enabled = True
    f(x)
    f(kiln.arange(kiln.Float32, 7))  # another size replays the same recording
    assert (f.n_recordings, f.n_cached_recordings, f.n_replays) == (1, 1, 1)
    f.enabled = False
    f(x)
    assert (f.n_recordings, f.n_cached_recordings) == (1, 1)
    f.clear()
    assert f.n_cached_recordings == 0


def test_a_captured_array_changed_in_place_stays_the_callers_object():
    def make():
        total = kiln.Float32([0.0])

        def step(x):
            nonlocal total
            total += x

        return step, total

    for frozen in (True, False):
        step, total = make()
        f = kiln.freeze(step) if frozen else step
        for _ in range(4):
            f(kiln.Float32([1.0]))
        assert total.tolist() == [4.0], frozen


def test_past_the_limit_the_least_recently_used_recording_is_replaced():
    f = kiln.freeze(lambda x, k: x * k, limit=2)
    x = kiln.Float32([1.0, 2.0])
    for k, recordings in [(1, 1), (2, 2), (1, 2), (3, 3), (1, 3), (2, 4), (3, 5)]:
        assert f(x, k).tolist() == [k, 2.0 * k]
        assert (f.n_recordings, f.n_cached_recordings) == (recordings, min(recordings, 2)), k
    unbounded = kiln.freeze(lambda x, k: x * k, limit=-1)
    for k in range(5):
        unbounded(x, k)
    assert unbounded.n_cached_recordings == 5
    with pytest.raises(kiln.InvalidArgument, match="None or -1 for no limit"):
        kiln.freeze(lambda x: x, limit=-2)
    with pytest.raises(TypeError, match="whole number"):
        kiln.freeze(lambda x: x, limit=2.5)


def test_kernel_freezing_off_runs_frozen_functions_plainly_on_this_thread():
    import threading

    calls = []

    def f(x):
        calls.append(1)
        return x + 1.0

    frozen = kiln.freeze(f)
    x = kiln.Float32([1.0])
    frozen(x)
    frozen(x)
    assert len(calls) == 1
    with kiln.scoped_set_flag(kiln.JitFlag.KernelFreezing, False):
        assert not kiln.flag(kiln.JitFlag.KernelFreezing)
        assert frozen(x).tolist() == [2.0]
        assert len(calls) == 2  # the Python function ran
        other = []
        t = threading.Thread(target=lambda: other.append(kiln.flag(kiln.JitFlag.KernelFreezing)))
        t.start()
        t.join()
        assert other == [True]  # per thread
    frozen(x)
    assert len(calls) == 2 and kiln.flag(kiln.JitFlag.KernelFreezing)


def test_flushing_the_kernel_cache_records_again():
    f = kiln.freeze(lambda x: x * 3.0 + 1.0)
    x = kiln.Float32([1.0, 2.0])
    f(x)
    f(x)
    kiln.flush_kernel_cache()
    kiln.flush_malloc_cache()
    assert f(x).tolist() == [4.0, 7.0]
    assert (f.n_recordings, f.n_replays) == (2, 1)


def test_auto_opaque_false_makes_every_literal_input_opaque_once():
    f = kiln.freeze(lambda x, k: x * k, auto_opaque=False)
    x = kiln.Float32([1.0, 2.0])
    for v in [1.0, 2.0, 3.0]:
        k = kiln.Float32(v)  # a literal
        assert f(x, k).tolist() == [v, 2 * v]
        assert k.state == kiln.VarState.Evaluated  # opaque in the caller's variable too
    assert f.n_recordings == 1
    g = kiln.freeze(lambda x, k: x * k)  # the default: one more recording when a value changes
    for v in [1.0, 2.0, 3.0]:
        g(x, kiln.Float32(v))
    assert g.n_recordings == 2


def test_a_backward_inside_reaches_what_an_argument_was_computed_from():
    def step(y):
        kiln.backward(y * 3.0)

    frozen = kiln.freeze(step)
    for _ in range(3):
        x = kiln.arange(kiln.Float32, 3)
        kiln.enable_grad(x)
        y = x * 2.0
        frozen(y)
        assert kiln.grad(x).tolist() == [6.0, 6.0, 6.0]  # as after `with kiln.isolate_grad()`
    assert frozen.n_recordings == 1


def test_enabling_or_disabling_gradients_inside_reaches_the_caller():
    # a frozen call leaves its arguments tracking derivatives or not as the function does
    def f(p, x, on):
        kiln.set_grad_enabled(p, on)
        return x * 2.0

    frozen = kiln.freeze(f)
    for call in range(3):
        for on in (False, True):
            p = kiln.Float32([1.0, 2.0, 3.0])
            kiln.set_grad_enabled(p, not on)
            unfrozen_p = kiln.Float32([1.0, 2.0, 3.0])
            kiln.set_grad_enabled(unfrozen_p, not on)
            f(unfrozen_p, kiln.Float32([1.0]), on)
            frozen(p, kiln.Float32([1.0]), on)
            assert kiln.grad_enabled(p) == on == kiln.grad_enabled(unfrozen_p), (call, on)
    assert frozen.n_recordings == 2  # one per (tracking on entry, on): both replay afterwards
    frozen.clear()
