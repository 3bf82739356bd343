"""Running reductions (Dr.Jit's ``dr.prefix_reduce``, ``dr.prefix_sum``, ``dr.cumsum``) over
arrays and along one axis of a tensor, for every ``ReduceOp`` (``Add``, ``Mul``, ``Min``,
``Max``, and ``And``/``Or`` on integers and masks), exclusive or inclusive, forward or reversed.

A 1-D running sum is kiln's device scan (one pass). Any other operation, and any tensor axis, is
a Hillis-Steele scan: ceil(log2(n)) passes, each one kernel combining every element with the one
``2^k`` places before it along the axis (gathers and selects, so the result is differentiable
wherever the operation is: sums, products, min and max).
"""

from . import _kiln as _k


def _identity(op, tp):
    """The value that leaves ``op`` unchanged, for element type ``tp``."""
    R = _k.ReduceOp
    if op == R.Add or op == R.Or:
        return False if tp is _k.Bool else 0
    if op == R.Mul:
        return 1
    if op == R.And:
        return True if tp is _k.Bool else -1
    info = {_k.Int32: (-2**31, 2**31 - 1), _k.UInt32: (0, 2**32 - 1), _k.Int64: (-2**63, 2**63 - 1),
            _k.UInt64: (0, 2**64 - 1)}
    lo, hi = info.get(tp, (-float("inf"), float("inf")))
    return hi if op == R.Min else lo


def _combine(op, a, b):
    R = _k.ReduceOp
    if op == R.Add:
        return a + b
    if op == R.Mul:
        return a * b
    if op == R.Min:
        return _k.minimum(a, b)
    if op == R.Max:
        return _k.maximum(a, b)
    if op == R.And:
        return a & b
    if op == R.Or:
        return a | b
    raise _k.InvalidArgument(f"prefix_reduce: {op} has no running form; use Add, Mul, Min, Max, And or Or")


def _scan_flat(op, x, shape, axis, exclusive, reverse):
    """The running reduction of the flat row-major array ``x`` of ``shape`` along ``axis``."""
    tp = type(x)
    n = _k.width(x)
    length = shape[axis]
    stride = 1
    for s in shape[axis + 1:]:
        stride *= s
    if n == 0 or length == 0:
        return x
    idx = _k.arange(_k.UInt32, n)
    pos = (idx // stride) % length  # the place along the axis
    if reverse:
        pos = (length - 1) - pos
    step = -stride if reverse else stride
    y = x
    d = 1
    while d < length:
        has = pos >= d
        src = _k.select(has, _k.Int64(idx) - d * step, _k.Int64(idx))
        y = _k.select(has, _combine(op, _k.gather(tp, y, _k.UInt32(src)), y), y)
        d *= 2
    if exclusive:
        first = pos == 0
        src = _k.select(first, _k.Int64(idx), _k.Int64(idx) - step)
        y = _k.select(first, tp(_identity(op, tp)), _k.gather(tp, y, _k.UInt32(src)))
    return y


def prefix_reduce(op, value, axis=0, exclusive=True, reverse=False):
    """The running reduction of ``value`` with ``op`` (a ``kiln.ReduceOp``): element ``i`` is
    ``op`` over the elements before it (``exclusive=True``, Dr.Jit's default; the first is the
    operation's identity) or up to and including it; ``reverse=True`` runs from the end. On a
    tensor it runs along ``axis`` (default 0); on a vector, over each component."""
    if isinstance(value, _k.TensorBase):
        shape = tuple(value.shape)
        if not shape:
            raise _k.InvalidArgument("prefix_reduce of a 0-d tensor: give it at least one axis")
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise _k.InvalidArgument(f"prefix_reduce: axis {axis!r} of a tensor of shape {shape}")
        axis %= len(shape)
        return type(value)(_scan_flat(op, value.array, shape, axis, exclusive, reverse), shape)
    comps = getattr(type(value), "DRJIT_STRUCT", None)
    if comps is not None and not isinstance(value, _k.ArrayBase):
        return type(value)(*[prefix_reduce(op, getattr(value, c), 0, exclusive, reverse) for c in comps])
    if not isinstance(value, _k.ArrayBase):
        raise TypeError(f"prefix_reduce takes a kiln array, vector or tensor, not a {type(value).__name__}")
    if axis not in (0, -1):
        raise _k.InvalidArgument(f"prefix_reduce: an array has one axis (0), not {axis!r}")
    if op == _k.ReduceOp.Add and not reverse and type(value) is not _k.Bool:
        return _k.prefix_sum(value, exclusive)  # the one-pass device scan
    return _scan_flat(op, value, (_k.width(value),), 0, exclusive, reverse)


def prefix_sum(value, exclusive=True, axis=0, reverse=False):
    """Running sum (Dr.Jit's ``dr.prefix_sum``): exclusive by default; along ``axis`` of a
    tensor."""
    return prefix_reduce(_k.ReduceOp.Add, value, axis, exclusive, reverse)


def cumsum(value, axis=0, reverse=False):
    """Inclusive running sum (NumPy's and Dr.Jit's ``cumsum``), along ``axis`` of a tensor."""
    return prefix_reduce(_k.ReduceOp.Add, value, axis, False, reverse)


__all__ = ["prefix_reduce", "prefix_sum", "cumsum"]
