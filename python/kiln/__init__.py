"""kiln: array programs traced lazily, fused into kernels, compiled at run time and run on all
cores, with Dr.Jit's Python face.

Write ordinary arithmetic on whole arrays; kiln records it instead of computing it and compiles
everything of one size into one kernel when a value is needed::

    import kiln
    x = kiln.linspace(kiln.Float32, 0, 1, 1000)
    y = kiln.sqrt(x * x + 1)        # traced, nothing runs yet
    print(kiln.sum(y))              # one fused kernel and a reduction

Porting Dr.Jit code means changing ``import drjit as dr`` to ``import kiln as dr`` and the type
names (``dr.llvm.Float`` -> ``kiln.Float32``). Where kiln differs, the docstring says how.

Dr.Jit's vectors (``kiln.Array3f(x, y, z)``, ``Array4i``, ``Array2b``, ...) hold one array per
component; the math library, ``dot``/``cross``/``norm``/``normalize``, ``select``, ``gather``/``scatter``,
``eval`` and the derivative calls take them as they take arrays.
"""

from ._kiln import *  # noqa: F401,F403
from ._kiln import __version__  # noqa: F401
from . import _kiln
import atexit as _atexit
import builtins as _builtins
from . import _vectors

# Vectors (Array3f, ...) and the module functions that take them, in place of the native ones.
from ._vectors import *  # noqa: F401,F403,E402

# The math functions of one argument take vectors too, component by component; a plain array
# goes straight to the native function after one isinstance check.
_UNARY = (
    "abs", "sqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "erf", "floor", "ceil", "round", "trunc", "rcp", "rsqrt", "square",
    "sign", "isnan", "isinf", "isfinite", "detach",
)  # fmt: skip
globals().update({_n: _vectors.lift_unary(getattr(_kiln, _n)) for _n in _UNARY})

# As the interpreter exits, daemon threads still using kiln stop at their next evaluation (waiting,
# without the GIL) instead of meeting the interpreter's teardown inside kiln (see gil.rs).
_atexit.register(_kiln._hold_engine_at_exit)

# Dr.Jit's in-place rule for a loop's state (see _inplace.py)
from ._inplace import while_loop  # noqa: E402,F811
# ... and its rule for exceptions the functions of control flow raise (a RuntimeError from them)
from ._inplace import if_stmt, switch  # noqa: E402,F811

#: Dr.Jit's short names for the default types.
Float = _kiln.Float32
UInt = _kiln.UInt32
Int = _kiln.Int32

def freeze(f=None, *, state_fn=None, limit=None, warn_after=10, backend=None, auto_opaque=True, enabled=True):
    """Freeze a function (Dr.Jit's ``@dr.freeze``): the first call with a new layout of arguments
    runs it and records its kernels; later calls with the same layout replay them without running
    Python. Usable as ``@kiln.freeze`` or ``@kiln.freeze(limit=...)``.

    ``state_fn(*args, **kwargs)`` returns extra values (arrays the function reaches without taking
    them as arguments, e.g. through ``self``) that are inputs and outputs like the arguments: part
    of the layout, and what the function does to them (``+=``, a scatter, a struct field given a
    new array) reaches them on replays too; ``limit`` bounds the recordings kept (None or -1: no bound; past it, a new layout replaces the recording
    used longest ago, as in Dr.Jit; ``JitFlag.KernelFreezing`` off runs every frozen function
    unfrozen on this thread); ``warn_after`` warns when a function keeps being
    re-recorded; ``auto_opaque`` (the default) makes literals that change between calls opaque
    (one extra recording), and ``auto_opaque=False`` makes every literal input opaque before the
    call, in the caller's variables too, as Dr.Jit does (no recording per value); ``enabled=False`` runs the function plainly (evaluating what a frozen call
    evaluates). ``backend`` is accepted for Dr.Jit compatibility and must be None (kiln picks its
    backend once per process).

    The function's closure cells are inputs too (Dr.Jit traverses them): a captured array is bound
    on every replay, a captured number that changes records anew, and a captured name the function
    rebinds (``nonlocal y; y = y + x``) is rebound on replays.

    Gradients: as in Dr.Jit, a ``dr.backward`` inside the function adds to the gradients of the
    arrays passed in (``dr.grad(params)`` after the call), recorded and replayed alike, and on to
    what an argument was computed from (``y = f(x)`` passed in: ``x`` gets its part, as when an
    ``isolate_grad`` block ends). Where kiln
    differs: a frozen function is a boundary of derivative tracking, as in kiln's Rust API: its
    results come back detached and arrays passed in that carry gradients are fresh leaves inside
    (inside, ``dr.grad(params)`` shows only what this call's passes brought; ``kiln.backward`` on a
    result outside gives zeros). Lists and dicts among the arguments (and those it captures or
    ``state_fn`` returns) are the caller's own: entries the function rebinds (``state[k] = x - g``)
    are rebound on replays too (with new objects, as in Python); adding or removing keys or items
    there is an error (Dr.Jit raises ``RuntimeError``); a
    frozen function may not call itself, and an argument may not contain itself.
    """
    if backend is not None:
        raise InvalidArgument("kiln.freeze(backend=...): kiln picks its backend once per process (KILN_BACKEND)")
    if f is None:
        return lambda g: freeze(g, state_fn=state_fn, limit=limit, warn_after=warn_after,
                                auto_opaque=auto_opaque, enabled=enabled)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise TypeError(f"kiln.freeze(limit=...): limit is a whole number of recordings or None, not {limit!r}")
    if limit is not None and limit < -1:
        raise InvalidArgument(f"kiln.freeze(limit={limit}): pass None or -1 for no limit, or the number of recordings "
                              "to keep (>= 0)")
    if limit == -1:
        limit = None  # Dr.Jit's -1: no limit
    frozen = _kiln.FrozenFunction(f, state_fn, limit, warn_after, auto_opaque, enabled)
    try:
        frozen.__doc__ = f.__doc__
    except AttributeError:
        pass
    return frozen


# PyTensor's and JAX's scans
from ._scan import lax, scan, until  # noqa: E402

# Dr.Jit's @dr.syntax: Python while/if on arrays traced into kernels
from ._syntax import hint, syntax  # noqa: E402

# Dr.Jit's JIT flags that kiln honours (per thread)
from ._flags import (  # noqa: E402
    JitFlag, KernelRecordingMode, KernelType, LogLevel, VarState, flag, kernel_history, log_level,
    scoped_set_flag, set_flag, set_log_level)

# Dr.Jit's type traits (uint32_array_t, mask_t, value_t, ...)
from . import _traits  # noqa: E402
from ._traits import *  # noqa: F401,F403,E402

# ---- Dr.Jit helpers composed from kiln's operations (derivatives follow from the composition) ----


def allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Whether ``a`` and ``b`` agree within ``atol + rtol * |b|`` everywhere (Dr.Jit's and
    NumPy's ``allclose``; broadcasts, evaluates both). Vectors compare component by component."""
    import numpy as _np

    if isinstance(a, _vectors.StaticArrayBase) or isinstance(b, _vectors.StaticArrayBase):
        def parts(v, n):
            # a vector's components; a list or tuple of n items beside a vector of n components
            # is its components too (Dr.Jit converts it to the vector's type); else broadcast
            if isinstance(v, _vectors.StaticArrayBase):
                return v._c
            if isinstance(v, (list, tuple)) and len(v) == n:
                return list(v)
            return [v] * n

        n = (a if isinstance(a, _vectors.StaticArrayBase) else b).Size
        ca, cb = parts(a, n), parts(b, n)
        if len(ca) != len(cb):
            return False
        return _builtins.all(allclose(x, y, rtol, atol, equal_nan) for x, y in zip(ca, cb))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and not _builtins.all(
            isinstance(v, (int, float)) for v in (*a, *b)):
        # sequences of arrays (a gradient per argument): pair by pair, each broadcasting itself
        return len(a) == len(b) and _builtins.all(
            allclose(x, y, rtol, atol, equal_nan) for x, y in zip(a, b))

    def values(v):
        if isinstance(v, (_kiln.ArrayBase, _kiln.TensorBase)):
            return v.numpy()
        return _np.asarray(v)

    return bool(_np.allclose(values(a), values(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def shape(x):
    """The shape: ``(width,)`` for an array, the tensor's shape, ``(n, width)`` for a vector."""
    if isinstance(x, _kiln.TensorBase):
        return tuple(x.shape)
    if isinstance(x, _vectors.StaticArrayBase):
        return (len(x._c), width(x))  # noqa: F405
    return (len(x),)


def sincos(x):
    """``(sin(x), cos(x))``."""
    return sin(x), cos(x)  # noqa: F405


def sincosh(x):
    """``(sinh(x), cosh(x))``."""
    return sinh(x), cosh(x)  # noqa: F405


def cbrt(x):
    """The real cube root."""
    return sign(x) * power(abs(x), 1.0 / 3.0)  # noqa: F405


def _small(x):
    return abs(x) < 1e-4  # noqa: F405


def asinh(x):
    """Inverse hyperbolic sine: ``x - x³/6`` near 0, ``log(2|x|)`` far out, else
    ``log(|x| + sqrt(x² + 1))``, with the sign of ``x`` (no cancellation for negative ``x``, no
    overflow of ``x²``)."""
    a = abs(x)  # noqa: F405
    far = log(a) + 0.6931471805599453  # noqa: F405
    mid = log(a + sqrt(a * a + 1.0))  # noqa: F405
    near = a - a * a * a / 6.0
    r = select(a > 1e4, far, select(a < 1e-4, near, mid))  # noqa: F405
    return copysign(r, x)  # noqa: F405


def acosh(x):
    """Inverse hyperbolic cosine (x ≥ 1; NaN below): ``log(2x)`` far out, else
    ``log(x + sqrt(x² - 1))``."""
    far = log(x) + 0.6931471805599453  # noqa: F405
    mid = log(x + sqrt(x * x - 1.0))  # noqa: F405
    return select(x > 1e4, far, mid)  # noqa: F405


def atanh(x):
    """Inverse hyperbolic tangent (|x| < 1): ``x + x³/3`` near 0, else
    ``log((1 + x) / (1 - x)) / 2``."""
    near = x + x * x * x / 3.0
    return select(_small(x), near, 0.5 * log((1.0 + x) / (1.0 - x)))  # noqa: F405


def dispatch(index, instances, target, *args, mode=None, label=None):
    """Indirect call (Dr.Jit's ``dr.dispatch``): lane ``i`` runs
    ``target(instances[index[i]], *args)``, each instance's call traced once (or, in evaluated
    mode, run on its lanes alone), gradients flowing through as in ``switch``; a lane whose index
    is out of range gets zeros. Where kiln differs: Dr.Jit dispatches on an array of instance
    pointers from its registry; kiln has no such arrays, so ``instances`` is a Python sequence of
    any objects and ``index`` a ``UInt32`` of positions in it. An ``int`` index calls that
    instance alone."""
    import functools as _functools

    targets = [_functools.partial(target, inst) for inst in instances]
    return switch(index, targets, *args, mode=mode, label=label)  # noqa: F405


def reshape(dtype, value, shape, order="A", shrink=False):
    """``value``'s elements as a ``dtype`` of the given ``shape`` (Dr.Jit's ``dr.reshape``): an
    array class takes an ``int`` shape, a tensor class a tuple, with at most one ``-1`` inferred.
    A tensor's elements are read in row-major order. ``shrink=True`` lets the result keep only the
    first elements; otherwise the sizes must match. A dataclass or ``DRJIT_STRUCT`` value is
    reshaped field by field. Differentiable (the shrinking is a gather). Where kiln differs:
    ``order`` is ``"A"`` or ``"C"`` (row-major); ``"F"`` is refused: transpose the tensor first."""
    import copy as _copy
    import dataclasses as _dc
    import math as _math

    if order not in ("A", "C"):
        raise InvalidArgument(  # noqa: F405
            f"reshape(order={order!r}): kiln reshapes in row-major order ('C', or 'A' which means "
            "it for arrays and tensors); transpose the tensor first for column-major order")
    if isinstance(value, _vectors.StaticArrayBase):
        raise TypeMismatch(  # noqa: F405
            f"reshape of a {type(value).__name__}: reshape its components, or build a tensor "
            "from them (kiln.TensorXf(...))")
    fields = list(getattr(type(value), "DRJIT_STRUCT", None) or ())
    if not fields and _dc.is_dataclass(value) and not isinstance(value, type):
        fields = [f.name for f in _dc.fields(value)]
    if fields:
        out = _copy.copy(value)
        for name in fields:
            v = getattr(value, name)
            if isinstance(v, (_kiln.ArrayBase, _kiln.TensorBase)) or _dc.is_dataclass(v) or \
                    getattr(type(v), "DRJIT_STRUCT", None):
                v = reshape(type(v), v, shape, order, shrink)
            object.__setattr__(out, name, v)
        return out
    flat = value.array if isinstance(value, _kiln.TensorBase) else value
    if not isinstance(flat, _kiln.ArrayBase):
        raise TypeMismatch(  # noqa: F405
            f"reshape takes a kiln array, tensor or struct of them, not a {type(value).__name__}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not _builtins.all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise TypeMismatch(f"reshape: the shape {shape} holds integers only")  # noqa: F405
    dims = shape
    n = len(flat)
    if dims.count(-1) > 1 or _builtins.any(d < -1 for d in dims):
        raise InvalidArgument(f"reshape: shape {dims} may hold one -1 and no other negative size")  # noqa: F405
    if -1 in dims:
        known = _math.prod(d for d in dims if d != -1)
        if known == 0 or n % known:
            raise InvalidArgument(  # noqa: F405
                f"reshape: {n} elements do not divide into shape {dims}")
        dims = tuple(n // known if d == -1 else d for d in dims)
    total = _math.prod(dims)
    if total != n:
        if not (shrink and total < n):
            more = "; pass shrink=True to keep the first ones" if total < n else ""
            raise InvalidArgument(  # noqa: F405
                f"reshape: a {type(flat).__name__} of {n} elements does not fill shape {dims} "
                f"({total} elements){more}")
        flat = gather(type(flat), flat, arange(UInt32, total))  # noqa: F405
    if isinstance(dtype, type) and issubclass(dtype, _kiln.TensorBase):
        return dtype(flat, dims)
    if isinstance(dtype, type) and issubclass(dtype, _kiln.ArrayBase):
        if len(dims) != 1:
            raise InvalidArgument(  # noqa: F405
                f"reshape: {dtype.__name__} is one-dimensional; shape {dims} needs a tensor class")
        # a new object, as for any other type: an in-place `+=` on it leaves `value` alone
        return dtype(flat)
    raise TypeMismatch(  # noqa: F405
        f"reshape(dtype={getattr(dtype, '__name__', dtype)}): the type is a kiln array or tensor class")


# Dr.Jit's AD calls with their flags, over trees of arrays (in place of the ones above)
from . import _ad  # noqa: E402
from ._ad import *  # noqa: F401,F403,E402
from . import _custom  # noqa: E402
from ._custom import *  # noqa: F401,F403,E402

def matmul(a, b):
    """The matrix product of two float tensors (Dr.Jit's ``dr.matmul``, NumPy's rules): ``[.., m,
    k] @ [.., k, n]`` with the leading (batch) axes broadcast; a 1-D operand is a row on the left
    and a column on the right, its axis leaving the result. Differentiable; frozen functions
    record it. Where kiln differs: tensors only (wrap arrays with ``kiln.TensorXf(x, shape)``), and
    a batch runs one 2-D product per element rather than one batched kernel."""
    if not (isinstance(a, _kiln.TensorBase) and isinstance(b, _kiln.TensorBase)):
        raise TypeError(f"kiln.matmul multiplies tensors, not {type(a).__name__} and {type(b).__name__}: "
                        "wrap arrays as tensors, e.g. kiln.TensorXf(x, (m, k))")
    return a @ b


# running reductions over arrays and tensor axes (in place of the native 1-D prefix_sum, cumsum)
from ._prefix import cumsum, prefix_reduce, prefix_sum  # noqa: E402,F811

# Dr.Jit's optimizers (``drjit.opt``): kiln.opt.SGD, RMSProp, Adam
from . import opt  # noqa: E402


# Dr.Jit's aliases
sync = _kiln.sync_thread
pow = power  # noqa: F405 (the vector-aware one, from _vectors)

__all__ = sorted(
    {n for n in dir(_kiln) if not n.startswith("_")}
    | set(_vectors.__all__)
    | {"Float", "UInt", "Int", "sync", "pow", "freeze", "scan", "until", "lax", "allclose", "shape",
       "sincos", "sincosh", "cbrt", "asinh", "acosh", "atanh", "syntax", "hint", "dispatch",
       "reshape", "opt", "matmul", "prefix_reduce"}
    | set(_ad.__all__)
    | set(_custom.__all__)
    | set(_traits.__all__)
    | {"JitFlag", "VarState", "KernelType", "KernelRecordingMode", "kernel_history", "flag", "scoped_set_flag", "set_flag",
       "LogLevel", "log_level", "set_log_level"}
)
