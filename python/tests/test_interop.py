"""NumPy → kiln without a copy (`kiln.from_numpy`, `kiln.from_dlpack`): what is shared, what kiln
never writes, how long the NumPy memory lives, and what is copied or refused and why."""

import faulthandler
import gc
import sys
import threading

import numpy as np
import pytest

import kiln

NUMERIC = [
    (np.float32, kiln.Float32),
    (np.float64, kiln.Float64),
    (np.int32, kiln.Int32),
    (np.uint32, kiln.UInt32),
    (np.int64, kiln.Int64),
    (np.uint64, kiln.UInt64),
]


def shareable(n, dtype, fill=None):
    """A NumPy array of n elements whose memory kiln can read in place: its end lies at least
    256 bytes before a page boundary (kiln's condition, see `from_numpy`)."""
    item = np.dtype(dtype).itemsize
    buf = np.zeros(n + 8192 // item, dtype=dtype)
    base = buf.ctypes.data
    for k in range(8192 // item):
        end = base + (k + n) * item
        if 0 < end % 4096 <= 4096 - 256:
            a = buf[k : k + n]
            a[:] = np.arange(n) if fill is None else fill
            return a
    raise AssertionError("no offset found")


def address(x):
    return x.numpy().ctypes.data


@pytest.mark.parametrize("dt,cls", NUMERIC)
@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 4097])
def test_shared_arrays_read_numpy_memory_and_see_later_writes(dt, cls, n):
    a = shareable(n, dt)
    x = kiln.from_numpy(a, copy=False)
    assert isinstance(x, cls) and len(x) == n
    assert address(x) == a.ctypes.data
    np.testing.assert_array_equal((x * 2).numpy(), a * 2)
    a[n - 1] = 7
    assert (x + 0).numpy()[n - 1] == 7


def test_tensors_and_dlpack_share_too():
    a = shareable(12, np.float64).reshape(3, 4)
    t = kiln.from_numpy(a, copy=False)
    assert isinstance(t, kiln.TensorXf64) and t.shape == (3, 4)
    assert address(t) == a.ctypes.data
    np.testing.assert_array_equal(kiln.sum(t, axis=1).numpy(), a.sum(axis=1))
    b = shareable(100, np.int32)
    d = kiln.from_dlpack(b, copy=False)  # NumPy as the DLPack producer
    assert isinstance(d, kiln.Int32) and address(d) == b.ctypes.data


def test_kiln_never_writes_into_numpy_memory():
    n = 5000
    a = shareable(n, np.float32)
    want = a.copy()
    x = kiln.from_numpy(a, copy=False)
    x += 1  # a uniquely held kiln buffer would be updated in place
    assert x.numpy()[3] == want[3] + 1
    y = kiln.from_numpy(a, copy=False)
    y[kiln.UInt32([0, 4999])] = kiln.Float32([-1, -2])  # a scatter
    assert y.numpy()[0] == -1 and y.numpy()[4999] == -2
    z = kiln.from_numpy(a, copy=False)
    kiln.scatter_reduce(kiln.ReduceOp.Add, z, kiln.Float32(1.0), kiln.UInt32([5, 5]))
    assert z.numpy()[5] == want[5] + 2

    @kiln.freeze
    def step(v):
        v *= 0.5  # an in-place update of the argument, written back

    for _ in range(3):
        w = kiln.from_numpy(a, copy=False)
        step(w)
        assert w.numpy()[10] == want[10] * 0.5
    np.testing.assert_array_equal(a, want)


def test_numpy_memory_lives_as_long_as_a_kiln_value_reads_it():
    a = shareable(1000, np.float64)
    keep = a.base  # the buffer `a` is a slice of
    before = sys.getrefcount(a)
    x = kiln.from_numpy(a, copy=False)
    lazy = x * 3
    assert sys.getrefcount(a) == before + 1
    del a
    gc.collect()
    np.testing.assert_array_equal(lazy.numpy(), np.arange(1000) * 3.0)
    b = keep[: len(keep)]  # (reach the slice's memory again through the parent)
    assert b.base is keep
    del x, lazy
    gc.collect()


def test_the_reference_is_dropped_with_the_last_kiln_value():
    a = shareable(64, np.float32)
    before = sys.getrefcount(a)
    x = kiln.from_numpy(a, copy=False)
    y = x + 1
    del x
    assert sys.getrefcount(a) == before + 1  # y's pending expression still reads it
    kiln.eval(y)
    del y
    gc.collect()
    assert sys.getrefcount(a) == before


def test_copy_true_never_shares():
    a = shareable(100, np.float32)
    x = kiln.from_numpy(a, copy=True)
    assert address(x) != a.ctypes.data
    a[0] = 55
    assert x.numpy()[0] == 0


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda: np.arange(20, dtype=np.float32)[::2], "C-contiguous"),
        (lambda: np.ones(10, dtype=np.bool_), "bool"),
        (lambda: np.ones(10, dtype=np.float16), "no element type"),
        (lambda: np.ones(10, dtype=">f4"), "no element type"),
        (lambda: np.frombuffer(bytearray(41), dtype=np.float32, offset=1), "aligned"),
        (lambda: np.zeros(0, dtype=np.float32), "empty"),
    ],
)
def test_what_cannot_be_shared_is_copied_or_refused_with_the_reason(make, why):
    a = make()
    with pytest.raises(ValueError, match=why):
        kiln.from_numpy(a, copy=False)
    x = kiln.from_numpy(a)  # copy=None: copied
    want = np.asarray(a).astype(np.float32 if a.dtype == np.float16 else a.dtype.newbyteorder("="))
    np.testing.assert_array_equal(x.numpy(), want)


def test_memory_ending_near_a_page_boundary_is_copied():
    buf = np.zeros(4096, dtype=np.float32)
    base = buf.ctypes.data
    k = next(k for k in range(1024, 4096) if (base + 4 * (k + 10)) % 4096 == 4096 - 64)
    a = buf[k : k + 10]
    with pytest.raises(ValueError, match="page boundary"):
        kiln.from_numpy(a, copy=False)
    assert address(kiln.from_numpy(a)) != a.ctypes.data


def test_a_numpy_view_of_a_kiln_array_comes_back_as_that_array():
    x = kiln.Float32([1, 2, 3]) * 2
    v = x.numpy()
    y = kiln.from_numpy(v, copy=False)
    assert address(y) == address(x)
    part = v[1:]  # part of a kiln buffer: copied, never held through NumPy
    with pytest.raises(ValueError, match="part or a reinterpretation of a kiln array"):
        kiln.from_numpy(part, copy=False)
    assert kiln.from_numpy(part).tolist() == [4, 6]
    # through DLPack and back, then dropped in any order
    z = kiln.from_dlpack(np.from_dlpack(x))
    assert z.tolist() == [2, 4, 6]
    del x, v, y, part
    gc.collect()
    assert (z + 1).tolist() == [3, 5, 7]
    # a scatter copies z's buffer first and lets the old one go with the engine locked: the
    # owner chain (DLPack → NumPy view → kiln handle) is released after the lock, no deadlock
    z[kiln.UInt32([0])] = kiln.Float32(9)
    assert z.tolist() == [9, 4, 6]


def test_threads_share_and_drop_numpy_memory_at_once():
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(50):
                a = shareable(int(rng.integers(1, 3000)), np.float64, fill=rng.random(1)[0])
                x = kiln.from_numpy(a)
                y = kiln.sum(x * 2)
                assert abs(y.numpy()[0] - 2 * a.sum()) <= 1e-9 * abs(a.sum()) + 1e-12
                del x, a
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize(
    "make",
    [
        lambda v: v.reshape(2, 3).T,  # same memory, another order
        lambda v: v.reshape(3, 2, order="F"),
        lambda v: v.view(np.int32),  # same bytes, another type
        lambda v: v.view(">f4"),  # same bytes, another byte order
        lambda v: np.lib.stride_tricks.as_strided(v, shape=(6,), strides=(0,)),
    ],
)
def test_a_reinterpreted_view_of_a_kiln_buffer_is_read_as_numpy_reads_it(make):
    x = kiln.Float32([1, 2, 3, 4, 5, 6])
    v = make(x.numpy())
    got = kiln.from_numpy(v)
    want = np.asarray(v)
    np.testing.assert_array_equal(
        got.numpy().reshape(want.shape), want.astype(want.dtype.newbyteorder("="))
    )


def test_numpy_arrays_inside_frozen_functions_are_copied_into_the_recording():
    x = kiln.arange(kiln.Float32, 1000)

    @kiln.freeze
    def h(x, arr):
        return x * kiln.from_numpy(arr)  # made inside the recording: a copy, as before

    for it in range(3):
        c = shareable(1000, np.float32, fill=it + 1)
        np.testing.assert_array_equal(h(x, c).numpy(), np.arange(1000) * (it + 1))
    with pytest.raises(ValueError, match="frozen function's recording"):
        kiln.freeze(lambda a: kiln.from_numpy(a, copy=False) + 1)(shareable(10, np.float32))

    @kiln.stencil
    def diff(a):
        return a[1] - a[0]

    @kiln.freeze
    def g(a):
        return diff(a) * 2

    # a stencil on a NumPy array returns one: a value read inside the recording, refused (a
    # replay would return it again)
    with pytest.raises(kiln.InvalidArgument, match="NumPy inside a frozen function"):
        g(np.arange(5, dtype=np.float64))
    # on kiln values it records once and replays with each call's values
    for it in range(3):
        a = kiln.TensorXf64(np.arange(5, dtype=np.float64) * (it + 1))
        np.testing.assert_array_equal(g(a).numpy(), [2 * (it + 1)] * 4 + [0])
    assert g.n_recordings == 1

    f = kiln.freeze(lambda x: (x * 2).numpy())
    with pytest.raises(kiln.InvalidArgument, match="return the array and convert it after"):
        f(kiln.arange(kiln.Float32, 4))


def test_frozen_functions_on_several_threads_do_not_deadlock():
    # a recording holds the engine's evaluation lock while its Python body needs the GIL; a frozen
    # call on another thread evaluating its inputs must not wait for that lock holding the GIL
    done = []

    def work(seed):
        for it in range(60):
            x = kiln.arange(kiln.Float64, 100 + it + seed) * (seed + 1.5)  # lazy input

            @kiln.freeze
            def f(q):
                q += 1
                return q * 2

            kiln.eval(f(x))
            kiln.eval(kiln.sin(x) * it)
        done.append(seed)

    faulthandler.dump_traceback_later(240, exit=True)  # a deadlock holding the GIL blocks join
    try:
        ts = [threading.Thread(target=work, args=(s,), daemon=True) for s in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert sorted(done) == [0, 1, 2], "a thread is stuck: the frozen calls deadlocked"


def test_a_frozen_function_never_replays_another_numpy_argument_at_a_reused_address():
    # NumPy arguments are keyed by identity: a serial number per object (held through a weak
    # reference), so a new array at a freed address records anew instead of replaying with the
    # old array's copied values, and the recording does not keep the array alive
    import weakref

    @kiln.freeze
    def h(arr):
        return kiln.from_numpy(arr) * 2

    for it in range(6):
        a = np.full(100, it, dtype=np.float32)
        np.testing.assert_array_equal(h(a).numpy(), np.full(100, 2 * it))
        gone = weakref.ref(a)
        del a
        gc.collect()
        assert gone() is None
    kept = np.full(100, 7, dtype=np.float32)
    before = sys.getrefcount(kept)
    h(kept)
    assert sys.getrefcount(kept) == before


def test_memory_already_read_by_kiln_gets_no_second_name():
    # a frozen recording tells inputs apart by buffer address: one memory, one kiln array
    a = shareable(1000, np.float32)
    x = kiln.from_numpy(a, copy=False)
    y = kiln.from_numpy(a, copy=False)  # the same array again: both see NumPy's writes
    assert address(y) == address(x)
    a[3] = -1
    assert (x + 0).numpy()[3] == -1 and (y + 0).numpy()[3] == -1
    # a strict part of `a` that kiln could read in place on its own (its end lies at least 256
    # bytes before a page boundary), so that the overlap is what refuses it, wherever `a` landed
    start = next(k for k in range(100, 800) if 0 < (a[k : k + 100].ctypes.data + 400) % 4096 <= 3840)
    for part in (a[start : start + 100], a.view(np.int32)):
        with pytest.raises(ValueError, match="already reads part of this memory"):
            kiln.from_numpy(part, copy=False)
        np.testing.assert_array_equal(kiln.from_numpy(part).numpy(), part)  # copied

    @kiln.freeze
    def f(p, q):
        return p + kiln.Float32(q)

    got = f(x, kiln.from_numpy(a.view(np.int32)))  # two different inputs over one memory
    np.testing.assert_array_equal(got.numpy(), a + a.view(np.int32).astype(np.float32))
