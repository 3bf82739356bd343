"""Dr.Jit's fixed-size vectors (``Array3f`` and kin) over kiln's 1-D arrays.

This module owns the vector classes, their operators, and the versions of kiln's module functions
that also take vectors (``kiln.dot``, ``kiln.select``, ``kiln.enable_grad``, ...); the package
exports these in place of the native functions. A vector holds one kiln array per component
(a structure of arrays, as in Dr.Jit), so every operation on it is the native operation on each
component: traced, fused and differentiated like any other kiln expression.

Each function checks its arguments for vectors first and hands everything else straight to the
native function, so code without vectors pays one ``isinstance`` per call.

Several public names here (``sum``, ``min``, ``max``, ``all``, ``any``, ``eval``) hide Python's
builtins inside this module: code here that needs a builtin imports ``builtins`` for it.
"""

import builtins as _builtins
import dataclasses as _dc
import enum as _enum
import functools as _functools
import numbers as _numbers
import operator as _op

from . import _kiln as _k

_NAMES = "xyzw"


def _component(i):
    def get(self):
        return self._c[i]

    def set(self, value):
        self[i] = value

    return property(get, set, doc=f"Component {i} (a 1-D kiln array).")


class StaticArrayBase:
    """Base class of kiln's vectors: ``Size`` components, each a 1-D kiln array of class ``Value``.

    ``Array3f(x, y, z)`` takes each component as a number, a list, a NumPy array or a kiln array.
    Components of one lane (size 1) broadcast against the others, as the arrays' operators do.
    ``Array3f(v)`` with one value gives every component that value; with another vector it
    casts; with a list or tuple of 3 items it takes them as the components; with a NumPy array
    of shape ``(N, 3)`` it takes one row per lane.

    Where kiln differs from Dr.Jit: ``numpy()`` and the NumPy constructor use shape ``(N, n)``,
    one row per lane, the layout NumPy code and data files use (Dr.Jit's is ``(n, N)``: port with
    ``.T``). As in Dr.Jit, ``a += b`` changes the vector itself (other names bound to it see the
    change) when the result has the same class; a wider result binds ``a`` to a new vector.
    ``len(v)`` is the number of components, as in Dr.Jit; ``kiln.width(v)`` is the number of lanes.
    """

    __slots__ = ("_c",)

    #: The number of components.
    Size = 0
    #: The number of dimensions, as Dr.Jit counts them (components, lanes).
    ndim = 2
    #: The class of each component (``kiln.Float32`` for ``Array3f``).
    Value = None
    #: The components by name, with their class (``{"x": Float32, ...}``): Dr.Jit's struct
    #: protocol, through which ``freeze``, ``while_loop``, ``if_stmt`` and ``switch`` take vectors.
    DRJIT_STRUCT = {}

    # NumPy defers to these operators (`ndarray + vector` raises instead of treating the vector
    # as a sequence of 3 arrays and broadcasting it the wrong way round)
    __array_ufunc__ = None
    # `==` compares lane by lane, so vectors cannot be dict keys
    __hash__ = None

    def __init__(self, *args):
        cls = type(self)
        n = cls.Size
        if len(args) == n:
            comps = [cls.Value(a) for a in args]
        elif len(args) == 1:
            comps = _components_of(cls, args[0])
        elif not args:
            comps = [cls.Value() for _ in range(n)]
        else:
            names = ", ".join(_NAMES[:n])
            raise _k.InvalidArgument(
                f"{cls.__name__} takes {n} components ({names}) or one value for all of them, "
                f"got {len(args)} arguments: pass {cls.__name__}({names}), or use the "
                f"vector type of {len(args)} components"
            )
        _width_of(cls, comps)
        self._c = comps

    # ---- components -----------------------------------------------------------------------

    def __len__(self):
        return type(self).Size

    def __iter__(self):
        return iter(self._c)

    def __getitem__(self, i):
        return self._c[self._position(i)]

    def __setitem__(self, i, value):
        # no check of the lanes here (as in Dr.Jit): kiln's tracing rebuilds a vector one field
        # at a time, so the others may hold the old lanes for a moment; what reads the whole
        # vector (numpy(), width, printing) checks them
        j = self._position(i)
        comps = list(self._c)  # a new list: copies of this vector (copy.copy) keep theirs
        comps[j] = type(self).Value(value)
        self._c = comps

    def _position(self, i):
        n = type(self).Size
        try:
            j = _op.index(i)
        except TypeError:
            raise _k.TypeMismatch(
                f"{_a(type(self))} is indexed by a component number (0 to {n - 1}), "
                f"not a `{type(i).__name__}`"
            ) from None
        if not -n <= j < n:
            raise _k.OutOfRange(f"component {j} is out of range for {_a(type(self))}")
        return j + n if j < 0 else j

    # ---- values ---------------------------------------------------------------------------

    def numpy(self):
        """The values as a NumPy array of shape ``(N, n)``: one row per lane (Dr.Jit's is
        ``(n, N)``). A new, writable array; components of one lane are repeated."""
        import numpy as np

        n = _width_of(type(self), self._c)
        cols = [c.numpy() for c in self._c]
        cols = [np.broadcast_to(col, (n,)) if len(col) != n else col for col in cols]
        return np.stack(cols, axis=1)

    def tolist(self):
        """The values as a list of components, each a list of lanes: ``Array3f(v.tolist())``
        gives ``v`` back (``numpy()`` holds rows of lanes instead)."""
        n = _width_of(type(self), self._c)
        return [c.tolist() * n if len(c) == 1 and n != 1 else c.tolist() for c in self._c]

    def eval(self):
        """Evaluate every component now (in one go, so they share kernels); returns the vector."""
        _k.eval(self._c)
        return self

    # every vector has x and y; the classes of 3 and 4 components add z and w
    x = _component(0)
    y = _component(1)

    @property
    def grad(self):
        """The gradient of each component, as a vector."""
        return _vector_of([_k.grad(c) for c in self._c])

    @grad.setter
    def grad(self, g):
        set_grad(self, g)

    def __repr__(self):
        # lane by lane, as Dr.Jit prints; values formatted by the arrays' own printing
        n = _width_of(type(self), self._c)
        if n == 0:
            return "[]"
        lanes = None if n <= 20 else [*range(5), *range(n - 5, n)]
        shown = n if lanes is None else len(lanes)
        cols = []
        for c in self._c:
            if len(c) == 1:
                cols.append(_printed(c) * shown)
            else:
                cols.append(_printed(c if lanes is None else c[_k.UInt32(lanes)]))
        rows = ["[" + ", ".join(r) + "]" for r in zip(*cols)]
        if lanes is not None:
            rows[5:5] = ["..."]
        return "[" + ",\n ".join(rows) + "]"

    def __bool__(self):
        raise _k.InvalidArgument(
            f"the truth value of {_a(type(self))} is ambiguous: reduce its components "
            "with kiln.all(v) or kiln.any(v), then its lanes with kiln.all or kiln.any again"
        )

    # ---- operators ------------------------------------------------------------------------

    def __neg__(self):
        return _vector_of([-c for c in self._c])

    def __pos__(self):
        return self

    def __abs__(self):
        return _vector_of([_k.abs(c) for c in self._c])

    def __invert__(self):
        return _vector_of([~c for c in self._c])

    def __pow__(self, other, mod=None):
        if mod is not None:
            raise _k.TypeMismatch("pow() with a modulus is not supported for kiln arrays")
        return _apply(_op.pow, self, other, False)

    def __rpow__(self, other):
        return _apply(_op.pow, self, other, True)


def _operators(op):
    def forward(self, other):
        return _apply(op, self, other, False)

    def reflected(self, other):
        return _apply(op, self, other, True)

    return forward, reflected


for _name, _fn in [
    ("add", _op.add), ("sub", _op.sub), ("mul", _op.mul), ("truediv", _op.truediv),
    ("floordiv", _op.floordiv), ("mod", _op.mod), ("and", _op.and_), ("or", _op.or_),
    ("xor", _op.xor), ("lshift", _op.lshift), ("rshift", _op.rshift),
]:  # fmt: skip
    _fwd, _rev = _operators(_fn)
    _fwd.__name__, _rev.__name__ = f"__{_name}__", f"__r{_name}__"
    setattr(StaticArrayBase, _fwd.__name__, _fwd)
    setattr(StaticArrayBase, _rev.__name__, _rev)


def _inplace(op):
    def inplace(self, other):
        # Dr.Jit's and NumPy's `v += w` change the vector itself (every name bound to it sees
        # the change); a result of another class (a wider type) binds the name to it instead
        r = _apply(op, self, other, False)
        if r is NotImplemented or type(r) is not type(self):
            return r
        self._c = r._c
        return self

    return inplace


for _name, _fn in [
    ("add", _op.add), ("sub", _op.sub), ("mul", _op.mul), ("truediv", _op.truediv),
    ("floordiv", _op.floordiv), ("mod", _op.mod), ("and", _op.and_), ("or", _op.or_),
    ("xor", _op.xor), ("lshift", _op.lshift), ("rshift", _op.rshift), ("pow", _op.pow),
]:  # fmt: skip
    _fwd = _inplace(_fn)
    _fwd.__name__ = f"__i{_name}__"
    setattr(StaticArrayBase, _fwd.__name__, _fwd)

# comparisons need no reflected forms: Python swaps `a < v` into `v > a` itself
for _name, _fn in [("lt", _op.lt), ("le", _op.le), ("gt", _op.gt), ("ge", _op.ge),
                   ("eq", _op.eq), ("ne", _op.ne)]:  # fmt: skip
    _fwd, _ = _operators(_fn)
    _fwd.__name__ = f"__{_name}__"
    setattr(StaticArrayBase, _fwd.__name__, _fwd)
del _name, _fn, _fwd, _rev, _


def _apply(op, v, other, reflected):
    """``op`` on each component of ``v`` and the matching part of ``other`` (a vector of the same
    size, or one array or number for every component)."""
    if isinstance(other, StaticArrayBase):
        if other.Size != v.Size:
            raise _k.InvalidArgument(
                f"{_a(type(v))} and {_a(type(other))} do not combine: they have "
                f"{v.Size} and {other.Size} components"
            )
        parts = other._c
    elif isinstance(other, (_k.ArrayBase, _numbers.Real)):  # NumPy's scalars are Real too
        parts = (other,) * v.Size
    elif isinstance(other, (list, tuple)):
        # a list holds components, as in the constructor (Dr.Jit's `v == [4, 5, 6, 7]`); left
        # to Python, `==` would fall back to identity and say False without a word
        if len(other) != v.Size:
            raise _k.InvalidArgument(
                f"{_a(type(v))} and a list of {len(other)} items do not combine: a list "
                f"beside a vector holds its {v.Size} components"
            )
        parts = other
    else:
        # NumPy arrays are not guessed at (rows of lanes, or components?): wrap them in a
        # vector or array class
        return NotImplemented
    if reflected:
        out = [op(b, a) for a, b in zip(v._c, parts)]
    else:
        out = [op(a, b) for a, b in zip(v._c, parts)]
    if not isinstance(out[0], _k.ArrayBase):
        # a number kiln does not take (a Fraction): `==` fell back to identity, a bool
        return NotImplemented
    return _vector_of(out)


# ---- helpers -------------------------------------------------------------------------------


def _components_of(cls, value):
    """The components a one-argument constructor call gives."""
    n = cls.Size
    if isinstance(value, StaticArrayBase):
        if value.Size != n:
            picked = ", ".join(f"v.{c}" for c in _NAMES[:n])
            raise _k.InvalidArgument(
                f"{cls.__name__} has {n} components and {_a(type(value))} has "
                f"{value.Size}: pick the ones to keep ({cls.__name__}({picked}))"
            )
        return [cls.Value(c) for c in value._c]
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise _k.InvalidArgument(
                f"{cls.__name__} takes a list of {n} components, got {len(value)} items: a list "
                f"holds components (as the arguments do); for rows of lanes pass a NumPy array "
                f"of shape (N, {n})"
            )
        return [cls.Value(c) for c in value]
    if not isinstance(value, _k.ArrayBase) and (
        hasattr(value, "__array_interface__") or hasattr(value, "__array__")
    ):
        return _from_numpy(cls, value)
    # one number or array for every component; each component gets its own array object, so
    # an in-place call on one (enable_grad, scatter) leaves the others alone
    return [cls.Value(value) for _ in range(n)]


def _from_numpy(cls, value):
    import numpy as np

    n = cls.Size
    a = np.asarray(value)
    if a.ndim == 0:
        return [cls.Value(a) for _ in range(n)]
    if a.ndim == 1 and a.shape[0] == n:
        return [cls.Value(a[k : k + 1]) for k in range(n)]
    if a.ndim == 2 and a.shape[1] == n:
        return [cls.Value(a[:, k]) for k in range(n)]
    if a.ndim == 2 and a.shape[0] == n:
        fix = "transpose it (`a.T`): kiln takes one row per lane"
    elif a.ndim == 1:
        fix = f"for the same values in every component pass {cls.Value.__name__}(a)"
    else:
        fix = f"reshape it to (N, {n})"
    raise _k.InvalidArgument(
        f"{cls.__name__} takes a NumPy array of shape (N, {n}) or ({n},), got shape "
        f"{a.shape}: {fix}"
    )


def _width_of(cls, comps):
    """The number of lanes of these components (of a vector of class ``cls``); each has that many
    or one (broadcast)."""
    n = 1
    for c in comps:
        m = len(c)
        if m != 1 and m != n:
            if n != 1:
                sizes = ", ".join(str(len(c)) for c in comps)
                raise _k.InvalidArgument(
                    f"the components of {_a(cls)} have {sizes} lanes: each has the same number "
                    "of lanes, or one (broadcast to all)"
                )
            n = m
    return n


def _a(cls):
    """The class's name with its article, for messages (``an Array3f``, ``a Float32``)."""
    name = cls.__name__
    return ("an " if name[0] in "AEIO" else "a ") + name


def _printed(a):
    """The values of a short array, as the array prints them (``str`` gives ``[v0, v1, …]``)."""
    s = str(a)[1:-1]
    return s.split(", ") if s else []


# (component class, size) -> vector class; every result of a component operation finds its
# vector class here, as the native classes are closed under kiln's type promotion
_CLASSES = {}


def _new(cls, comps):
    v = object.__new__(cls)
    v._c = comps
    return v


def _vector_of(comps):
    """The vector of these components (of one class, as component operations give them)."""
    return _new(_CLASSES[type(comps[0]), len(comps)], comps)


def _make_class(name, value, size):
    ns = {"__slots__": (), "Size": size, "Value": value, "__module__": "kiln"}
    # Dr.Jit's struct protocol: kiln's freeze, while_loop, if_stmt and switch look into the
    # classes that declare it (their fields read with getattr, written with setattr)
    ns["DRJIT_STRUCT"] = {_NAMES[i]: value for i in range(size)}
    ns["__doc__"] = (
        f"{size} components of {value.__name__} (Dr.Jit's `{name}`): `{name}("
        + ", ".join(_NAMES[:size])
        + ")`. See StaticArrayBase for construction and where kiln differs."
    )
    for i in range(2, size):  # x and y are the base class's
        ns[_NAMES[i]] = _component(i)
    cls = type(name, (StaticArrayBase,), ns)
    _CLASSES[value, size] = cls
    return cls


StaticArrayBase.__module__ = "kiln"

Array2f = _make_class("Array2f", _k.Float32, 2)
Array3f = _make_class("Array3f", _k.Float32, 3)
Array4f = _make_class("Array4f", _k.Float32, 4)
Array2f64 = _make_class("Array2f64", _k.Float64, 2)
Array3f64 = _make_class("Array3f64", _k.Float64, 3)
Array4f64 = _make_class("Array4f64", _k.Float64, 4)
Array2i = _make_class("Array2i", _k.Int32, 2)
Array3i = _make_class("Array3i", _k.Int32, 3)
Array4i = _make_class("Array4i", _k.Int32, 4)
Array2u = _make_class("Array2u", _k.UInt32, 2)
Array3u = _make_class("Array3u", _k.UInt32, 3)
Array4u = _make_class("Array4u", _k.UInt32, 4)
Array2i64 = _make_class("Array2i64", _k.Int64, 2)
Array3i64 = _make_class("Array3i64", _k.Int64, 3)
Array4i64 = _make_class("Array4i64", _k.Int64, 4)
Array2u64 = _make_class("Array2u64", _k.UInt64, 2)
Array3u64 = _make_class("Array3u64", _k.UInt64, 3)
Array4u64 = _make_class("Array4u64", _k.UInt64, 4)
Array2b = _make_class("Array2b", _k.Bool, 2)
Array3b = _make_class("Array3b", _k.Bool, 3)
Array4b = _make_class("Array4b", _k.Bool, 4)


def _is_vector_class(dtype):
    return isinstance(dtype, type) and issubclass(dtype, StaticArrayBase)


def _componentwise(fn, *args):
    """``fn`` on the components of the vectors among ``args`` (of one size), with every other
    argument passed whole to each call."""
    n = None
    for a in args:
        if isinstance(a, StaticArrayBase):
            if n is None:
                n, first = a.Size, a
            elif a.Size != n:
                raise _k.InvalidArgument(
                    f"{fn.__name__}: {_a(type(first))} and {_a(type(a))} do not "
                    f"combine: they have {n} and {a.Size} components"
                )
    cols = [a._c if isinstance(a, StaticArrayBase) else (a,) * n for a in args]
    return _vector_of([fn(*parts) for parts in zip(*cols)])


def _has_vector(items):
    """Whether a vector is among ``items`` or in the lists, tuples and dicts among them (a plain
    loop, arrays first: ``kiln.eval(x)`` and ``kiln.enable_grad(x)`` pay little for it)."""
    for o in items:
        if isinstance(o, _k.ArrayBase):
            continue
        if isinstance(o, StaticArrayBase):
            return True
        if isinstance(o, (list, tuple)):
            if _has_vector(o):
                return True
        elif isinstance(o, dict):
            if _has_vector(o.values()):
                return True
    return False


def _expand(obj):
    """``obj`` with each vector replaced by the list of its components (for the native calls
    that walk lists, tuples and dicts of arrays)."""
    if isinstance(obj, StaticArrayBase):
        return list(obj._c)
    if isinstance(obj, (list, tuple)):
        return [_expand(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _expand(o) for k, o in obj.items()}
    return obj


def _native_doc(native, note):
    return f"{native.__doc__ or ''}\n\n{note}".strip()


def lift_unary(native):
    """``native`` (a function of one array) made to take vectors too, component by component."""

    def f(x):
        if isinstance(x, StaticArrayBase):
            return _vector_of([native(c) for c in x._c])
        return native(x)

    f.__name__ = f.__qualname__ = native.__name__
    f.__module__ = "kiln"
    f.__doc__ = _native_doc(native, "A vector gives a vector, component by component.")
    return f


# ---- lanewise functions of several arguments -------------------------------------------------


def minimum(a, b):
    """Lanewise minimum (``kiln.min(x)`` is the reduction); vectors component by component."""
    if isinstance(a, StaticArrayBase) or isinstance(b, StaticArrayBase):
        return _componentwise(_k.minimum, a, b)
    return _k.minimum(a, b)


def maximum(a, b):
    """Lanewise maximum (``kiln.max(x)`` is the reduction); vectors component by component."""
    if isinstance(a, StaticArrayBase) or isinstance(b, StaticArrayBase):
        return _componentwise(_k.maximum, a, b)
    return _k.maximum(a, b)


def atan2(y, x):
    """``atan2(y, x)``; vectors component by component."""
    if isinstance(y, StaticArrayBase) or isinstance(x, StaticArrayBase):
        return _componentwise(_k.atan2, y, x)
    return _k.atan2(y, x)


def power(x, y):
    """``x ** y`` (Dr.Jit's ``dr.power``); vectors component by component."""
    if isinstance(x, StaticArrayBase) or isinstance(y, StaticArrayBase):
        return _componentwise(_k.power, x, y)
    return _k.power(x, y)


def copysign(x, y):
    """``|x|`` with the sign of ``y``; vectors component by component."""
    if isinstance(x, StaticArrayBase) or isinstance(y, StaticArrayBase):
        return _componentwise(_k.copysign, x, y)
    return _k.copysign(x, y)


def clip(x, lo, hi):
    """``x`` limited to ``[lo, hi]``; vectors component by component."""
    if isinstance(x, StaticArrayBase) or isinstance(lo, StaticArrayBase) or isinstance(hi, StaticArrayBase):
        return _componentwise(_k.clip, x, lo, hi)
    return _k.clip(x, lo, hi)


def fma(a, b, c):
    """``a * b + c`` (one rounding on hosts with FMA); vectors component by component."""
    if isinstance(a, StaticArrayBase) or isinstance(b, StaticArrayBase) or isinstance(c, StaticArrayBase):
        return _componentwise(_k.fma, a, b, c)
    return _k.fma(a, b, c)


def select(mask, a, b):
    """``mask ? a : b`` lane by lane (Dr.Jit's ``dr.select``). With vectors, component by
    component: an ``Array3b`` mask picks per component, a ``Bool`` mask the whole lane."""
    if isinstance(mask, StaticArrayBase) or isinstance(a, StaticArrayBase) or isinstance(b, StaticArrayBase):
        return _componentwise(_k.select, mask, a, b)
    return _k.select(mask, a, b)


# ---- reductions ------------------------------------------------------------------------------
# Of an array, over its lanes (a one-element array, or a Python value where the native function
# gives one). Of a vector, over its components, lane by lane: Dr.Jit's reduction along axis 0.


def _fold(fn, comps):
    return _functools.reduce(fn, comps)


def _counted(v):
    """A vector's components as numbers: masks count as 0 and 1, as the native ``sum`` counts."""
    if v.Value is _k.Bool:
        return [_k.UInt32(c) for c in v._c]
    return v._c


def sum(x, axis=None):
    """Sum of all lanes, a one-element array (masks are counted). Of a tensor: a 0-d tensor, or
    with ``axis`` (an int or a tuple) the sums along those axes. Of a vector: the sum of its
    components, lane by lane (``v.x + v.y + v.z``), as Dr.Jit's ``dr.sum`` along axis 0."""
    if isinstance(x, StaticArrayBase):
        return _fold(_op.add, _counted(x))
    return _k.sum(x, axis)


def prod(x, axis=None):
    """Product of all lanes. Of a vector: the product of its components, lane by lane."""
    if isinstance(x, StaticArrayBase):
        return _fold(_op.mul, _counted(x))
    return _k.prod(x, axis)


def _arrays_list(x):
    """A list or tuple of kiln arrays (a stencil window): reduced element by element."""
    return (
        isinstance(x, (list, tuple))
        and len(x) > 0
        and _builtins.all(isinstance(v, (_k.ArrayBase, StaticArrayBase)) for v in x)
    )


def min(x, axis=None):
    """The smallest lane (``kiln.minimum`` is lanewise). Of a vector: the smallest component,
    lane by lane. Of a list of arrays (a stencil window ``a[-1:2]``): the smallest, lane by lane."""
    if isinstance(x, StaticArrayBase):
        return _fold(_k.minimum, x._c)
    if _arrays_list(x):
        return _fold(minimum, list(x))
    return _k.min(x, axis)


def max(x, axis=None):
    """The largest lane. Of a vector: the largest component, lane by lane. Of a list of arrays
    (a stencil window): the largest, lane by lane."""
    if isinstance(x, StaticArrayBase):
        return _fold(_k.maximum, x._c)
    if _arrays_list(x):
        return _fold(maximum, list(x))
    return _k.max(x, axis)


def mean(x, axis=None):
    """The mean of all lanes (in floating point). Of a vector: the mean of its components, lane
    by lane."""
    if isinstance(x, StaticArrayBase):
        return _fold(_op.add, _counted(x)) / x.Size
    return _k.mean(x, axis)


def _masks(v):
    return [_k.Bool(c) for c in v._c]


def _bool_axis(name, axis):
    if axis not in (0, None):
        raise _k.InvalidArgument(
            f"kiln.{name}(axis={axis!r}): kiln reduces along axis 0 (a vector's components, "
            f"an array's lanes) or over everything (axis=None)"
        )


def all(x, axis=0):
    """Whether every lane is true, a Python bool. Of a vector: whether every component is true,
    lane by lane, a ``Bool`` array (Dr.Jit's ``dr.all`` along axis 0); with ``axis=None``, or
    ``kiln.all`` of that, the Python bool."""
    _bool_axis("all", axis)
    if isinstance(x, StaticArrayBase):
        m = _fold(_op.and_, _masks(x))
        return m if axis == 0 else _k.all(m)
    return _k.all(x)


def any(x, axis=0):
    """Whether any lane is true, a Python bool. Of a vector: whether any component is true, lane
    by lane, a ``Bool`` array; with ``axis=None`` the Python bool."""
    _bool_axis("any", axis)
    if isinstance(x, StaticArrayBase):
        m = _fold(_op.or_, _masks(x))
        return m if axis == 0 else _k.any(m)
    return _k.any(x)


def none(x, axis=0):
    """Whether no lane is true, a Python bool. Of a vector: whether no component is true, lane
    by lane, a ``Bool`` array; with ``axis=None`` the Python bool."""
    _bool_axis("none", axis)
    if isinstance(x, StaticArrayBase):
        m = ~_fold(_op.or_, _masks(x))
        return m if axis == 0 else _k.all(m)
    return _k.none(x)


def count(x):
    """How many lanes are true, a Python int. Of a vector: how many components are true, lane by
    lane, a ``UInt32`` array."""
    if isinstance(x, StaticArrayBase):
        return _fold(_op.add, [_k.UInt32(m) for m in _masks(x)])
    return _k.count(x)


# ---- geometry --------------------------------------------------------------------------------


def dot(a, b):
    """Inner product. Of two arrays: over their lanes, a one-element array. Of two vectors: over
    their components, lane by lane (``a.x*b.x + a.y*b.y + a.z*b.z``), as in Dr.Jit."""
    if isinstance(a, StaticArrayBase) or isinstance(b, StaticArrayBase):
        return _fold(_op.add, _componentwise(_op.mul, a, b)._c)
    return _k.dot(a, b)


def squared_norm(x):
    """``dot(x, x)``: of a vector, lane by lane; of an array, over its lanes."""
    return dot(x, x)


def norm(x):
    """Euclidean length: of a vector, lane by lane; of an array, over its lanes."""
    if isinstance(x, StaticArrayBase):
        return _k.sqrt(dot(x, x))
    return _k.norm(x)


def normalize(x):
    """``x`` divided by its length (``x * rsqrt(squared_norm(x))``, as Dr.Jit; a zero vector
    gives NaN or infinity, as there)."""
    return x * _k.rsqrt(dot(x, x))


def cross(a, b):
    """The cross product of two 3-component vectors, lane by lane."""
    if not (isinstance(a, StaticArrayBase) and isinstance(b, StaticArrayBase) and a.Size == b.Size == 3):
        names = " and ".join(_a(type(v)) for v in (a, b))
        raise _k.InvalidArgument(
            f"cross takes two 3-component vectors (Array3f, Array3f64, ...), got {names}: "
            "make them with Array3f(x, y, z)"
        )
    (ax, ay, az), (bx, by, bz) = a._c, b._c
    return _vector_of([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx])


# ---- construction ----------------------------------------------------------------------------


def zeros(dtype, shape=None):
    """``shape`` zeros of ``dtype``: an array class, or a vector class (zeros in every
    component)."""
    if _is_vector_class(dtype):
        return _new(dtype, [_k.zeros(dtype.Value, shape) for _ in range(dtype.Size)])
    return _k.zeros(dtype, shape)


def ones(dtype, shape=None):
    """``shape`` ones of ``dtype`` (an array or a vector class)."""
    if _is_vector_class(dtype):
        return _new(dtype, [_k.ones(dtype.Value, shape) for _ in range(dtype.Size)])
    return _k.ones(dtype, shape)


def empty(dtype, shape=None):
    """Like ``zeros`` (kiln has no uninitialised memory)."""
    return zeros(dtype, shape)


def _per_component(dtype, value):
    """``value`` split over the components of a vector class: a vector, list or tuple gives
    one value each, anything else the same value to all."""
    if isinstance(value, (StaticArrayBase, list, tuple)):
        if len(value) != dtype.Size:
            raise _k.InvalidArgument(
                f"{dtype.__name__} has {dtype.Size} components, the value has {len(value)}: "
                "pass one number, or one per component"
            )
        return list(value)
    return [value] * dtype.Size


def full(dtype, value, shape=None):
    """An array of ``shape`` lanes equal to ``value`` (Dr.Jit's ``dr.full``). For a vector class,
    ``value`` is one number for every component or one per component."""
    if _is_vector_class(dtype):
        return _new(dtype, [_k.full(dtype.Value, v, shape) for v in _per_component(dtype, value)])
    return _k.full(dtype, value, shape)


def opaque(dtype, value, shape=None):
    """An evaluated array filled with ``value`` (Dr.Jit's ``dr.opaque``); for a vector class,
    one number for every component or one per component."""
    if _is_vector_class(dtype):
        return _new(dtype, [_k.opaque(dtype.Value, v, shape) for v in _per_component(dtype, value)])
    return _k.opaque(dtype, value, shape)


def make_opaque(*args):
    """Give each argument a buffer of its own, in place: arrays, vectors, tensors, and the
    arrays inside lists, tuples, dicts and Dr.Jit-style structs (as Dr.Jit's ``make_opaque``)."""
    arrays, tensors = [], []

    def visit(a):
        if isinstance(a, StaticArrayBase):
            arrays.extend(a._c)
        elif isinstance(a, _k.TensorBase):
            flat = a.array
            arrays.append(flat)
            tensors.append((a, flat))
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)
        elif hasattr(type(a), "DRJIT_STRUCT"):
            for name in type(a).DRJIT_STRUCT:
                visit(getattr(a, name))
        elif a is not None and not isinstance(a, (_numbers.Number, str)):
            arrays.append(a)  # an array (anything else: the native call names it)

    for a in args:
        visit(a)
    _k.make_opaque(*arrays)
    for t, flat in tensors:  # the evaluated values go back into the tensors
        _k._assign(t, type(t)(flat, t.shape))


# ---- memory ----------------------------------------------------------------------------------


def _flat_index(index, size, k):
    """Where component ``k`` of item ``index`` sits in a flat buffer of ``size``-component items."""
    if not isinstance(index, _k.ArrayBase):
        index = _k.UInt32(index)
    return index * size + k


def _like(name, x, make):
    """``make(cls, shape)`` for each array, vector and tensor of ``x`` (lists, tuples and dicts
    of them too), of its class and shape."""
    if isinstance(x, _k.TensorBase):
        return make(type(x), tuple(x.shape))
    if isinstance(x, (_k.ArrayBase, StaticArrayBase)):
        return make(type(x), width(x))
    if isinstance(x, (list, tuple)):
        items = [_like(name, e, make) for e in x]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, dict):
        return {k: _like(name, e, make) for k, e in x.items()}
    raise TypeError(f"{name}(): {type(x).__name__} is not a kiln array, vector or tensor (or a "
                    "list, tuple or dict of them)")


def zeros_like(x):
    """Zeros of ``x``'s class and shape (Dr.Jit's ``dr.zeros_like``); lists, tuples and dicts
    item by item."""
    return _like("zeros_like", x, zeros)


def ones_like(x):
    """Ones of ``x``'s class and shape (Dr.Jit's ``dr.ones_like``)."""
    return _like("ones_like", x, ones)


def empty_like(x):
    """An array of ``x``'s class and shape whose values are to be written (Dr.Jit's
    ``dr.empty_like``; kiln's are zeros)."""
    return _like("empty_like", x, empty)


def full_like(x, value):
    """``value`` in an array of ``x``'s class and shape (Dr.Jit's ``dr.full_like``)."""
    return _like("full_like", x, lambda cls, shape: full(cls, value, shape))


class ReduceMode(_enum.IntEnum):
    """How Dr.Jit carries out a scatter or a gather's derivative (``mode=`` of ``scatter``,
    ``scatter_add``, ``scatter_reduce`` and ``gather``; Dr.Jit's names). kiln accepts every mode
    and picks its own strategy, the same result in each: ``Permute`` and ``NoConflicts`` (no two
    lanes write one element) need no atomics in kiln either, ``Local`` and ``Expand`` (per-thread
    copies) are what kiln does for a reduction's conflicts when they pay."""

    Auto = 0
    Direct = 1
    Local = 2
    NoConflicts = 3
    Permute = 4
    Expand = 5


def _check_mode(name, mode):
    if mode is not None and not isinstance(mode, ReduceMode):
        raise TypeError(f"{name}(): mode= takes a kiln.ReduceMode (or None), not "
                        f"{type(mode).__name__}")


def gather(dtype, source, index, active=None, mode=None):
    """``source[index]`` as ``dtype`` (Dr.Jit's ``dr.gather``). For a vector class, ``source`` is
    a vector (each component gathered) or a flat array holding the vectors one after another
    (component ``k`` of item ``i`` at ``i * Size + k``). ``mode`` (a ``ReduceMode``) is accepted
    for Dr.Jit's sake."""
    _check_mode("gather", mode)
    if not _is_vector_class(dtype):
        return _k.gather(dtype, source, index, active)
    n = dtype.Size
    if isinstance(source, StaticArrayBase):
        if source.Size != n:
            raise _k.InvalidArgument(
                f"gather: {_a(dtype)} has {n} components, the source "
                f"{type(source).__name__} has {source.Size}"
            )
        comps = [_k.gather(dtype.Value, s, index, active) for s in source._c]
    else:
        comps = [_k.gather(dtype.Value, source, _flat_index(index, n, k), active) for k in range(n)]
    return _new(dtype, comps)


def _scattered(name, native, target, value, index, active):
    if isinstance(target, StaticArrayBase):
        if isinstance(value, StaticArrayBase) and value.Size != target.Size:
            raise _k.InvalidArgument(
                f"{name}: the target {type(target).__name__} has {target.Size} components, "
                f"the value {type(value).__name__} has {value.Size}"
            )
        parts = value._c if isinstance(value, StaticArrayBase) else (value,) * target.Size
        for t, v in zip(target._c, parts):
            native(t, v, index, active)
    elif isinstance(value, StaticArrayBase):
        # vectors into a flat buffer, one after another
        for k, v in enumerate(value._c):
            native(target, v, _flat_index(index, value.Size, k), active)
    else:
        native(target, value, index, active)


def scatter(target, value, index, active=None, mode=None):
    """``target[index] = value`` for the active lanes, in place (Dr.Jit's ``dr.scatter``). A
    vector target is written component by component; a vector value into a flat array is
    written as items of ``Size`` values (component ``k`` of item ``i`` at ``i * Size + k``).
    ``mode`` (a ``ReduceMode``) is accepted for Dr.Jit's sake."""
    _check_mode("scatter", mode)
    _scattered("scatter", _k.scatter, target, value, index, active)


def scatter_add(target, value, index, active=None, mode=None):
    """``target[index] += value``, in place (Dr.Jit's ``dr.scatter_add``); vectors and ``mode``
    as in ``scatter``."""
    _check_mode("scatter_add", mode)
    _scattered("scatter_add", _k.scatter_add, target, value, index, active)


def scatter_reduce(op, target, value, index, active=None, mode=None):
    """``target[index] op= value`` for the active lanes, in place (Dr.Jit's
    ``dr.scatter_reduce``); vectors and ``mode`` as in ``scatter``."""
    _check_mode("scatter_reduce", mode)

    def native(t, v, i, a):
        _k.scatter_reduce(op, t, v, i, a)

    _scattered("scatter_reduce", native, target, value, index, active)


# ---- evaluation and inspection ---------------------------------------------------------------


def eval(*args):
    """Evaluate the arrays and vectors given (lists, tuples and dicts of them too), all together,
    or everything pending when called with none."""
    if _has_vector(args):
        args = _expand(args)
    _k.eval(*args)


def schedule(*args):
    """Mark arrays and vectors (lists, tuples and dicts of them too) to be evaluated with this
    thread's next evaluation (Dr.Jit's ``dr.schedule``): the next ``eval()``, or the next read
    of any value, computes them too, sharing kernels where their sizes match."""
    if _has_vector(args):
        args = _expand(args)
    _k.schedule(*args)


def set_label(*args, **kwargs):
    """Name arrays in messages and ``whos()`` (Dr.Jit's ``dr.set_label``): ``set_label(x, name)``
    or ``set_label(x=x, y=y)`` (each keyword the name). A vector's components, a list's or
    tuple's items get ``name_0``, ``name_1``, ...; a dict's items and a dataclass's or
    ``DRJIT_STRUCT`` class's fields ``name_key``."""
    if (args and kwargs) or (args and len(args) != 2):
        raise TypeError("set_label(): incompatible function arguments: give (array, name) or "
                        "name=array keywords")
    for x, name in ([tuple(args)] if args else [(v, k) for k, v in kwargs.items()]):
        _label(x, name)


def _label(x, name):
    if isinstance(x, StaticArrayBase):
        for i, c in enumerate(x._c):
            _label(c, f"{name}_{i}")
    elif isinstance(x, (list, tuple)):
        for i, c in enumerate(x):
            _label(c, f"{name}_{i}")
    elif isinstance(x, dict):
        for k, c in x.items():
            _label(c, f"{name}_{k}")
    elif isinstance(x, _k.ArrayBase):
        _k.set_label(x, name)
    else:
        struct = getattr(type(x), "DRJIT_STRUCT", None)
        fields = list(struct) if isinstance(struct, dict) else (
            [f.name for f in _dc.fields(x)] if _dc.is_dataclass(x) and not isinstance(x, type)
            else None)
        if fields is None:
            raise TypeError(f"set_label(): {type(x).__name__} is not a kiln array, or a vector, "
                            "list, tuple, dict or struct of them")
        for f in fields:
            _label(getattr(x, f), f"{name}_{f}")


def width(x):
    """The number of lanes (Dr.Jit's ``dr.width``); of a vector, that of its components."""
    if isinstance(x, StaticArrayBase):
        return _width_of(type(x), x._c)
    return _k.width(x)


def type_of(x):
    """The class of ``x``: the array class of its element type, or its vector class."""
    if isinstance(x, StaticArrayBase):
        return type(x)
    return _k.type_of(x)


# ---- automatic differentiation (the module's AD calls are kiln/_ad.py's, over these) ----------


def grad(x):
    """The gradient of ``x`` (Dr.Jit's ``dr.grad``); of a vector, a vector of gradients."""
    if isinstance(x, StaticArrayBase):
        return _vector_of([_k.grad(c) for c in x._c])
    return _k.grad(x)


def _set_grads(native, x, g):
    if isinstance(x, StaticArrayBase):
        if isinstance(g, StaticArrayBase) and g.Size != x.Size:
            raise _k.InvalidArgument(
                f"{_a(type(x))} has {x.Size} components, the gradient "
                f"{type(g).__name__} has {g.Size}"
            )
        parts = g._c if isinstance(g, StaticArrayBase) else (g,) * x.Size
        for c, p in zip(x._c, parts):
            native(c, p)
    else:
        native(x, g)


def set_grad(x, g):
    """Set the gradient of ``x`` to ``g``; of a vector, per component (``g`` a vector of the same
    size, or one value for every component)."""
    _set_grads(_k.set_grad, x, g)


def _seeded_sum(y, seed):
    """One array whose reverse pass from a seed of ones seeds component ``k`` of ``y`` with
    ``seed[k]`` (or 1): a single pass, where a pass per component would find the graph that the
    components share consumed by the first."""
    if seed is None:
        return _fold(_op.add, y._c)
    parts = seed._c if isinstance(seed, StaticArrayBase) else (seed,) * y.Size
    return _fold(_op.add, [c * _k.detach(y.Value(s)) for c, s in zip(y._c, parts)])


def backward_from(y, seed=None, retain_graph=False):
    """Reverse mode from ``y`` seeded with ``seed`` (default ones); for a vector ``y``, ``seed``
    is a vector of the same size or one value for every component."""
    if isinstance(y, StaticArrayBase):
        if isinstance(seed, StaticArrayBase) and seed.Size != y.Size:
            raise _k.InvalidArgument(
                f"backward_from: y is {_a(type(y))}, the seed {_a(type(seed))}"
            )
        _k.backward_from(_seeded_sum(y, seed), None, retain_graph)
    else:
        _k.backward_from(y, seed, retain_graph)


def forward_to(y):
    """Forward mode from every array whose gradient is set, to ``y`` (Dr.Jit's
    ``dr.forward_to``); returns ``y``'s gradient (a vector ``y``: a vector of its components'
    gradients)."""
    if isinstance(y, StaticArrayBase):
        return _vector_of([_k.forward_to(c) for c in y._c])
    return _k.forward_to(y)


__all__ = [
    "StaticArrayBase",
    *(name for name in globals() if name.startswith("Array")),
    "minimum", "maximum", "atan2", "power", "copysign", "clip", "fma", "select",
    "sum", "prod", "min", "max", "mean", "all", "any", "none", "count",
    "dot", "squared_norm", "norm", "normalize", "cross",
    "zeros", "ones", "empty", "full", "opaque", "make_opaque",
    "zeros_like", "ones_like", "empty_like", "full_like",
    "gather", "scatter", "scatter_add", "scatter_reduce", "ReduceMode",
    "eval", "schedule", "set_label", "width", "type_of",
    "grad", "set_grad", "backward_from", "forward_to",
]  # fmt: skip
