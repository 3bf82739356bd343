"""Dr.Jit's AD calls over kiln's passes: ``ADFlag`` and ``ADMode``, the ``flags=`` argument of
``backward``/``forward`` and their ``_from``/``_to`` forms, ``enqueue`` + ``traverse``, and
``enable_grad``/``grad``/``detach`` over nested lists, tuples, dicts, dataclasses and classes
with a ``DRJIT_STRUCT``.

What Dr.Jit's flags mean in kiln's model of AD:

* ``ClearEdges``: a reverse pass consumes the graph it crossed (kiln's ``retain_graph=False``).
  kiln's forward passes never consume the graph, so the flag does not change them.
* ``ClearInput``: the gradients of the arrays a pass starts from are cleared after it; in reverse
  mode, except those with ``enable_grad``, which keep what arrived (their own seed among it).
* ``ClearInterior``: changes nothing. A reverse pass stores gradients only in arrays that
  ``enable_grad`` was called on; a forward pass leaves each array it reaches holding its tangent
  until the next forward pass replaces it (Dr.Jit adds to it instead). Such a tangent counts as
  a gradient set with ``set_grad`` for ``forward_to`` and ``backward_to``: ``clear_grad`` the
  arrays first when they should start afresh.
* ``AllowNoGrad``: a pass from arrays that carry no gradient does nothing. Without it such a pass
  is an error (``NoGradient``), as in Dr.Jit: it almost always means a missing ``enable_grad``.
"""

from __future__ import annotations

import dataclasses
import enum
import threading

from . import _kiln as _k
from . import _vectors as _v


class ADFlag(enum.IntFlag):
    """What a pass clears when it is done (Dr.Jit's values; see the module's notes)."""

    ClearNone = 0
    ClearEdges = 1
    ClearInput = 2
    ClearInterior = 4
    ClearVertices = 6
    Default = 7
    AllowNoGrad = 8


class ADMode(enum.IntEnum):
    """The direction of a pass queued with ``enqueue`` and run by ``traverse``."""

    Primal = 0
    Forward = 1
    Backward = 2


_FLOATS = (_k.Float32, _k.Float64, _k.TensorXf, _k.TensorXf64)
_ARRAYS = (_k.ArrayBase, _k.TensorBase)


def _fields(x):
    """The attribute names of a ``DRJIT_STRUCT`` class or a dataclass instance, else ``None``."""
    if isinstance(x, type):
        return None
    struct = getattr(type(x), "DRJIT_STRUCT", None)
    if isinstance(struct, dict):
        return list(struct)
    if dataclasses.is_dataclass(x):
        return [f.name for f in dataclasses.fields(x)]
    return None


def _leaves(x, out):
    """Append every kiln array of ``x`` (a vector's components; the arrays in lists, tuples,
    dicts, dataclasses and ``DRJIT_STRUCT`` classes) to ``out``; anything else is skipped."""
    if isinstance(x, _ARRAYS):
        out.append(x)
    elif isinstance(x, _v.StaticArrayBase):
        out.extend(x._c)
    elif isinstance(x, (list, tuple)):
        for e in x:
            _leaves(e, out)
    elif isinstance(x, dict):
        for e in x.values():
            _leaves(e, out)
    else:
        for name in _fields(x) or ():
            _leaves(getattr(x, name), out)
    return out


def _map(fn, x):
    """``x`` with ``fn`` applied to each array, tensor and vector in it, the structure kept."""
    if isinstance(x, (_k.ArrayBase, _k.TensorBase, _v.StaticArrayBase)):
        return fn(x)
    if isinstance(x, list):
        return [_map(fn, e) for e in x]
    if isinstance(x, tuple):
        items = [_map(fn, e) for e in x]
        return tuple(items) if type(x) is tuple else type(x)(*items)
    if isinstance(x, dict):
        return type(x)((k, _map(fn, e)) for k, e in x.items())
    names = _fields(x)
    if names is None:
        return fn(x)
    if dataclasses.is_dataclass(x):
        return dataclasses.replace(x, **{n: _map(fn, getattr(x, n)) for n in names})
    out = object.__new__(type(x))
    out.__dict__.update(x.__dict__)
    for n in names:
        setattr(out, n, _map(fn, getattr(x, n)))
    return out


def enable_grad(*args):
    """Track derivatives of the float arrays in ``args`` from now on, in place (Dr.Jit's
    ``dr.enable_grad``). As in Dr.Jit, integer and mask arrays are left as they are: they carry
    no gradient."""
    floats = [a for a in _leaves(args, []) if isinstance(a, _FLOATS)]
    if floats:
        _k.enable_grad(*floats)


def disable_grad(*args):
    """Stop tracking derivatives of the arrays in ``args``, in place."""
    arrays = _leaves(args, [])
    if arrays:
        _k.disable_grad(*arrays)


def set_grad_enabled(arg, value):
    """``enable_grad(arg)`` when ``value`` is true, else ``disable_grad(arg)`` (Dr.Jit's
    ``dr.set_grad_enabled``); ``arg`` may be a structure of arrays."""
    (enable_grad if value else disable_grad)(arg)


def grad_enabled(*args):
    """Whether any array in ``args`` tracks derivatives (always ``False`` in ``suspend_grad``)."""
    arrays = _leaves(args, [])
    return bool(arrays) and _k.grad_enabled(*arrays)


def clear_grad(*args):
    """Forget the gradient of every array in ``args``."""
    arrays = _leaves(args, [])
    if arrays:
        _k.clear_grad(*arrays)


def _set_or_accum(native, x, g):
    if not grad_enabled(x):
        return  # Dr.Jit's rule: an array without derivative tracking takes no gradient
    if native is _k.set_grad and isinstance(g, _ARRAYS) and len(g) == 0:
        clear_grad(x)  # Dr.Jit's ``set_grad(x, Float32())``: no gradient
        return
    if isinstance(x, _k.ArrayBase) and len(x) == 1 and not isinstance(g, (int, float)):
        # the gradient of one value used for many lanes is the sum over them (Dr.Jit's rule:
        # the adjoint of broadcasting)
        g = g if isinstance(g, _k.ArrayBase) else type(x)(g)
        if len(g) > 1:
            g = _k.sum(g)
    _v._set_grads(native, x, g)


def set_grad(x, g):
    """Set the gradient of ``x`` to ``g`` (one value, one per element, or a vector of the same
    size for a vector ``x``; an empty array clears it; for an ``x`` of one element, the sum of a
    longer ``g``). As in Dr.Jit, an array that does not
    track derivatives is left as it is (see ``enable_grad``)."""
    _set_or_accum(_k.set_grad, x, g)


def accum_grad(x, g):
    """Add ``g`` to the gradient of ``x`` (per component for a vector); as ``set_grad``, nothing
    on an array that does not track derivatives."""
    _set_or_accum(_k.accum_grad, x, g)


def grad(x, preserve_type=True):
    """The gradient of ``x``, of the same structure (Dr.Jit's ``dr.grad``): zeros where none
    arrived. ``preserve_type`` is accepted for Dr.Jit's sake; kiln's array types are the same
    with and without derivative tracking."""
    return _map(_v.grad, x)


_detach_one = _v.lift_unary(_k.detach)


def detach(x, preserve_type=True):
    """``x`` without derivative tracking, of the same structure (Dr.Jit's ``dr.detach``).
    ``preserve_type`` is accepted for Dr.Jit's sake; kiln's types are the same either way."""
    return _map(lambda a: a if isinstance(a, (int, float, bool)) else _detach_one(a), x)


def _replace(a, b):
    if isinstance(a, _v.StaticArrayBase) or isinstance(b, _v.StaticArrayBase):
        va = a if isinstance(a, _v.StaticArrayBase) else None
        vb = b if isinstance(b, _v.StaticArrayBase) else None
        if va is not None and vb is not None and va.Size != vb.Size:
            raise TypeError(f"incompatible input types. (vectors of {va.Size} and {vb.Size} "
                            "components)")
        n = (va if va is not None else vb).Size
        ca = va._c if va is not None else [a] * n
        cb = vb._c if vb is not None else [b] * n
        return _v._vector_of([_replace(x, y) for x, y in zip(ca, cb)])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        items = [_replace(x, y) for x, y in zip(a, b)]
        return items if isinstance(a, list) else tuple(items)
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return {k: _replace(a[k], b[k]) for k in a}
    if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, _k.ArrayBase):
        a = type(b)(a)  # a number takes the array's type (and broadcasts)
    if not (isinstance(a, _k.ArrayBase) and isinstance(b, _k.ArrayBase)):
        raise TypeError(
            f"incompatible input types. ({type(a).__name__} and {type(b).__name__}: replace_grad "
            "takes two float arrays of one type, or vectors, lists, tuples or dicts of them)"
        )
    na, nb = _k.width(a), _k.width(b)
    if na != nb and 1 not in (na, nb):
        raise ValueError(f"incompatible input sizes: {na} and {nb} (sizes must match, or one "
                         "of them be 1)")
    return _k._replace_grad(a, b)


def replace_grad(a, b):
    """``a``'s values with ``b``'s gradient (Dr.Jit's ``dr.replace_grad``): what is computed
    from the result differentiates as if computed from ``b``, so gradients reach what ``b``
    depends on (a straight-through estimator: ``replace_grad(kiln.round(x), x)``). Vectors go
    component by component (a flat ``b`` with each), lists, tuples and dicts item by item; a
    size-1 array is broadcast. Incompatible inputs raise ``RuntimeError`` as in Dr.Jit (its
    ``__cause__`` says what did not match)."""
    try:
        return _replace(a, b)
    except (TypeError, ValueError) as e:
        raise RuntimeError(f"kiln.replace_grad(): {e}") from e


def relative_grad(x):
    """Ones with ``x``'s derivative divided by ``x`` (Dr.Jit's ``dr.relative_grad``): the
    relative change ``dx / x``, so a gradient through it is relative to ``x``'s size."""
    return _map(lambda a: a / _detach_one(a), x)


def _safe(fn, x, lo, hi):
    """``fn`` of ``x`` clamped to ``[lo, hi]`` (``hi`` None: no upper bound), whose derivative is
    0 where ``x`` is outside the open interval (where ``fn``'s is infinite or undefined): the
    differentiated ``fn`` only sees inner values, the others' come detached (a NaN stays NaN)."""
    if isinstance(x, _v.StaticArrayBase):
        return _v._vector_of([_safe(fn, c, lo, hi) for c in x._c])
    inner = (x > lo) if hi is None else ((x > lo) & (x < hi))
    mid = lo + 1.0 if hi is None else (lo + hi) / 2
    clamped = _v.maximum(_detach_one(x), lo) if hi is None else _v.clip(_detach_one(x), lo, hi)
    return _v.select(inner, fn(_v.select(inner, x, mid)), fn(clamped))


def safe_sqrt(x):
    """``sqrt(max(x, 0))`` whose derivative at ``x <= 0`` is 0, not infinite or NaN (Dr.Jit's
    ``dr.safe_sqrt``)."""
    return _safe(_k.sqrt, x, 0.0, None)


def safe_asin(x):
    """``asin`` of ``x`` clamped to ``[-1, 1]``, whose derivative at ``|x| >= 1`` is 0 (Dr.Jit's
    ``dr.safe_asin``)."""
    return _safe(_k.asin, x, -1.0, 1.0)


def safe_acos(x):
    """``acos`` of ``x`` clamped to ``[-1, 1]``, whose derivative at ``|x| >= 1`` is 0 (Dr.Jit's
    ``dr.safe_acos``)."""
    return _safe(_k.acos, x, -1.0, 1.0)


def _describe(x):
    arrays = _leaves(x, [])
    if not arrays:
        return f"a `{type(x).__name__}` holding no kiln array"
    kinds = sorted({type(a).__name__ for a in arrays})
    return f"{'/'.join(kinds)} ({len(arrays)} array{'s' if len(arrays) != 1 else ''})"


class NoGradient(_k.InvalidArgument, RuntimeError):
    """A pass from (or to) arrays that carry no gradient: an ``InvalidArgument`` (a
    ``ValueError``), and a ``RuntimeError`` as Dr.Jit raises for it."""


def _differentiable(what, x, flags):
    """Whether a pass from ``x`` has anything to do; an error when not, unless ``AllowNoGrad``."""
    if grad_enabled(x):
        return True
    if ADFlag(flags) & ADFlag.AllowNoGrad:
        return False
    raise NoGradient(
        f"{what}: the argument does not depend on the input: {_describe(x)} carries no gradient "
        "(no array it was computed from has enable_grad), so every gradient would be zero; call "
        "kiln.enable_grad(x) on the inputs before computing from them, or pass "
        "flags=kiln.ADFlag.AllowNoGrad to make this pass do nothing"
    )


def _trailing_flags(args, flags):
    """Dr.Jit's ``forward_to(a, b, flags)``: an ``ADFlag`` or ``int`` last among the arrays."""
    if args and isinstance(args[-1], int) and not isinstance(args[-1], bool):
        return args[:-1], ADFlag(args[-1])
    return args, ADFlag(flags)


def _retain(flags, retain_graph):
    if isinstance(flags, bool):
        raise TypeError(
            "the second argument of kiln.backward/backward_from's flags is Dr.Jit's ADFlag, not a "
            "bool: write retain_graph=True (or flags=kiln.ADFlag.ClearNone) to keep the graph"
        )
    if retain_graph is not None:
        return bool(retain_graph)
    return not ADFlag(flags) & ADFlag.ClearEdges


def backward_from(y, seed=None, flags=ADFlag.Default, *, retain_graph=None):
    """Reverse mode from ``y`` seeded with ``seed`` (default: 1 for every element), Dr.Jit's
    ``dr.backward_from``: the gradients reach every array with ``enable_grad`` that ``y`` depends
    on. ``flags`` as in Dr.Jit (see ``ADFlag``); ``retain_graph=True`` is ``ClearEdges`` left
    out. The GIL is released while the pass runs."""
    if not _differentiable("backward_from", y, flags):
        return
    # ClearInput: the pass stores nothing into ``y`` unless it has enable_grad (then ``y`` keeps
    # what arrived, as every array with enable_grad does), so there is nothing to clear
    _v.backward_from(y, seed, _retain(flags, retain_graph))


def backward(y, flags=ADFlag.Default, *, retain_graph=None):
    """Reverse mode from ``y`` with a seed of ones (Dr.Jit's ``dr.backward``)."""
    backward_from(y, None, flags, retain_graph=retain_graph)


def backward_to(*args, flags=ADFlag.Default):
    """Reverse mode towards ``args`` only (Dr.Jit's ``dr.backward_to``): every array computed
    from them that holds a gradient (set with ``set_grad``) is a seed; only ``args`` get what
    arrives, added to what they hold. Returns their gradients (one value for one argument, else a
    tuple). With ``ClearInput`` (in ``Default``) the seeds' gradients are cleared afterwards."""
    args, flags = _trailing_flags(args, flags)
    if _differentiable("backward_to", args, flags):
        _k.backward_to_all(*_leaves(args, []), retain_graph=_retain(flags, None),
                           clear_seeds=bool(flags & ADFlag.ClearInput))
    out = tuple(grad(a) for a in args)
    return out[0] if len(out) == 1 else out


def forward_from(x, flags=ADFlag.Default):
    """Forward mode from ``x`` (Dr.Jit's ``dr.forward_from``): its gradient (1 for every element
    unless one was set; every component's, for a vector; every array's, for a tree) is pushed to
    every array computed from it; read the tangents with ``grad``. With ``ClearInput`` (in
    ``Default``) ``x``'s gradient is cleared afterwards."""
    if not _differentiable("forward_from", x, flags):
        return
    seeds = [a for a in _leaves(x, []) if _k.grad_enabled(a)]
    _k.forward_from_all(*seeds, unset_is_one=True)
    if ADFlag(flags) & ADFlag.ClearInput:
        clear_grad(seeds)


forward = forward_from


def forward_to(*args, flags=ADFlag.Default):
    """Forward mode from every array whose gradient is set, towards ``args`` (Dr.Jit's
    ``dr.forward_to``); returns their gradients (one value for one argument, else a tuple).
    Dr.Jit's ``flags`` may also come last among ``args``."""
    args, flags = _trailing_flags(args, flags)
    if not _differentiable("forward_to", args, flags):
        out = tuple(grad(a) for a in args)
        return out[0] if len(out) == 1 else out
    out = tuple(_v.forward_to(a) if grad_enabled(a) else grad(a) for a in args)
    return out[0] if len(out) == 1 else out


_queue = threading.local()


def _queued():
    if not hasattr(_queue, "items"):
        _queue.items = []
    return _queue.items


def enqueue(mode, *args):
    """Queue the arrays in ``args`` as starting points of the next ``traverse(mode)`` (Dr.Jit's
    ``dr.enqueue``); their gradients (set with ``set_grad``/``accum_grad``) are the seeds.
    The queue is this thread's."""
    mode = ADMode(mode)
    if mode == ADMode.Primal:
        raise _k.InvalidArgument("enqueue: give ADMode.Forward or ADMode.Backward")
    _queued().extend((mode, a) for a in _leaves(args, []))


def traverse(mode, flags=ADFlag.Default):
    """Run the pass queued with ``enqueue(mode, ...)`` (Dr.Jit's ``dr.traverse``). Forward: the
    seeds' gradients are pushed at once, tangents adding where paths meet. Backward: the
    seeds' gradients are carried back in one pass to the arrays with ``enable_grad``. ``flags`` as in Dr.Jit (see ``ADFlag``)."""
    mode, flags = ADMode(mode), ADFlag(flags)
    items = _queued()
    seeds = [a for m, a in items if m == mode]
    items[:] = [(m, a) for m, a in items if m != mode]
    seeds = [a for a in seeds if grad_enabled(a)]
    if not seeds:
        return
    clear = bool(flags & ADFlag.ClearInput)
    if mode == ADMode.Forward:
        _k.forward_from_all(*seeds)
        if clear:
            clear_grad(seeds)
    else:
        _k.backward_from_all(*seeds, retain_graph=_retain(flags, None), clear_seeds=clear)


__all__ = [
    "ADFlag", "ADMode", "NoGradient", "enable_grad", "disable_grad", "set_grad_enabled", "grad_enabled", "clear_grad", "grad",
    "set_grad", "accum_grad",
    "detach", "backward", "backward_from", "backward_to", "forward", "forward_from",
    "forward_to", "enqueue", "traverse", "replace_grad", "relative_grad", "safe_sqrt", "safe_asin",
    "safe_acos",
]  # fmt: skip
