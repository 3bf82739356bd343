"""Our shim (not PyTensor code): the names that PyTensor's tests/scan/test_basic.py imports, built on
kiln so that the ported file can run with only its imports changed.

PyTensor is symbolic: a test declares typed placeholders (``vector("u")``, ``scalar()``,
``shared(value)``), builds a graph from them (arithmetic, ``dot``, ``scan``, ``grad``...) and
compiles it with ``function(inputs, outputs, updates=...)``. This module keeps that face and
records the same kind of graph in Python (``Variable``s owned by small nodes), but it has no
compiler and no rewrites of its own: calling a ``function`` walks the recorded graph once and
computes every node with kiln, on kiln tensors (``TensorXf64``...).

* ``scan(fn, ...)`` calls ``fn`` once on typed placeholders, as PyTensor does, to record the inner
  graph. Running it is one call of ``kiln.scan``: its step function evaluates the recorded inner
  graph on the step values kiln passes in. Outer values the body uses without declaring them
  (PyTensor's implicit non-sequences, e.g. shared variables) are passed to ``kiln.scan`` as extra
  non-sequences (or captured, with ``strict=True``, so that kiln's strict check sees them). Shared
  variables that the body updates (``{shared: new}``) become extra recurrent outputs of the kiln
  scan, and the update is their last value. Taps, ``go_backwards``, ``n_steps``, ``until``,
  ``truncate_gradient`` and their checks are kiln's (the tap layout is checked by kiln when the
  scan is built, with a dummy one-step scan of zeros).
* ``grad(cost, wrt)`` records a node; running it evaluates ``cost`` again with fresh
  ``kiln.enable_grad`` copies of the ``wrt`` values, calls ``kiln.backward`` and reads
  ``kiln.grad``: every derivative comes from kiln's reverse mode (through ``kiln.scan`` too).
  kiln has no higher-order AD, so a gradient of a graph holding a gradient raises.
* ``shared(np.random.Generator)`` supports the ``uniform``/``normal`` draws of the file's helper
  ``scan_project_sum`` (random projections of test data, drawn by NumPy).
* ``utt`` (PyTensor's tests/unittest_tools): ``fetch_seed``, ``assert_allclose`` (PyTensor's
  tolerances) and ``verify_grad`` (central differences against ``grad``).

Everything PyTensor has and this module does not (graph objects and rewrites: ``owner``, ``Op``,
``Apply``, ``FunctionGraph``, ``Scan``/``ScanInfo``, modes other than a record of their
arguments, random streams, ``pushforward``...) exists only as a name that raises
``NotImplementedError`` saying so when it is used, so those tests fail instead of passing
without testing anything.
"""

import contextlib
import copy
import types

import numpy as np

import kiln

# ---- errors and unsupported names ----------------------------------------------------------------


class MissingInputError(Exception):
    """PyTensor's: a graph needs an input the function was not given."""


class DisconnectedInputError(ValueError):
    """PyTensor's: ``grad`` with respect to a variable the cost does not depend on."""


class NullTypeGradError(TypeError):
    pass


def _unsupported_msg(name):
    return (
        f"{name}: PyTensor graph internals are not provided by the kiln shim (_pytensor_shim.py); "
        "kiln has no symbolic graph, compiler modes or random streams"
    )


class _Unsupported:
    """Base of the names this shim only declares: constructing or calling one raises."""

    _name = "?"

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_unsupported_msg(type(self)._name))


def _unsupported_class(name):
    return type(name, (_Unsupported,), {"_name": name})


def _unsupported_func(name):
    def f(*args, **kwargs):
        raise NotImplementedError(_unsupported_msg(name))

    f.__name__ = name
    return f


DebugMode = _unsupported_class("DebugMode")
MonitorMode = _unsupported_class("MonitorMode")
Apply = _unsupported_class("Apply")
FunctionGraph = _unsupported_class("FunctionGraph")
Op = _unsupported_class("Op")
MergeOptimizer = _unsupported_class("MergeOptimizer")
VMLinker = _unsupported_class("VMLinker")
Scan = _unsupported_class("Scan")
ScanInfo = _unsupported_class("ScanInfo")
RandomGeneratorType = _unsupported_class("RandomGeneratorType")
RandomStream = _unsupported_class("RandomStream")
Shape_i = _unsupported_class("Shape_i")
Subtensor = _unsupported_class("Subtensor")
rebuild_collect_shared = _unsupported_func("rebuild_collect_shared")
vectorize_graph = _unsupported_func("vectorize_graph")
ancestors = _unsupported_func("ancestors")
apply_ancestors = _unsupported_func("apply_ancestors")
normal = _unsupported_func("normal")
random_generator_type = _unsupported_func("random_generator_type")
assert_equal_computations = _unsupported_func("assert_equal_computations")
pushforward = _unsupported_func("pushforward (forward-mode gradients)")

# ---- configuration and modes ---------------------------------------------------------------------


class _Config:
    def __init__(self):
        self.floatX = "float64"
        self.mode = "FAST_RUN"
        # the shim "compiles" nothing; kiln's own compiler stands in for PyTensor's C++ one
        self.cxx = "kiln"
        self.on_opt_error = "warn"
        self.on_shape_error = "warn"
        self.compute_test_value = "off"

    def change_flags(self, **kwargs):
        cfg = self

        class _Change(contextlib.ContextDecorator):
            def __enter__(self):
                self.old = {k: getattr(cfg, k, None) for k in kwargs}
                for k, v in kwargs.items():
                    setattr(cfg, k, v)
                return self

            def __exit__(self, *exc):
                for k, v in self.old.items():
                    setattr(cfg, k, v)
                return False

        return _Change()


config = _Config()


class Mode:
    """A record of PyTensor's ``Mode(linker, optimizer)``: kiln has one way to run a graph, so the
    shim runs every mode the same way."""

    def __init__(self, linker=None, optimizer="default", db=None):
        self.linker = linker
        self.optimizer = optimizer

    def __repr__(self):
        return f"Mode(linker={self.linker!r}, optimizer={self.optimizer!r})"


def get_mode(name):
    return name if isinstance(name, Mode) else Mode(linker=str(name))


def get_default_mode():
    return Mode()


# ---- dtypes --------------------------------------------------------------------------------------

# kiln's tensor class that holds each PyTensor dtype (kiln has no 8/16-bit types: those are held
# in 32-bit tensors and given back to NumPy in their own dtype)
_STORE = {
    "float64": kiln.TensorXf64, "float32": kiln.TensorXf, "int64": kiln.TensorXi64,
    "int32": kiln.TensorXi, "int16": kiln.TensorXi, "int8": kiln.TensorXi,
    "uint64": kiln.TensorXu64, "uint32": kiln.TensorXu, "uint16": kiln.TensorXu,
    "uint8": kiln.TensorXu, "bool": kiln.TensorXb,
}  # fmt: skip
_FLAT = {
    kiln.TensorXf64: kiln.Float64, kiln.TensorXf: kiln.Float32, kiln.TensorXi64: kiln.Int64,
    kiln.TensorXi: kiln.Int32, kiln.TensorXu64: kiln.UInt64, kiln.TensorXu: kiln.UInt32,
    kiln.TensorXb: kiln.Bool,
}  # fmt: skip


def _dtype(d):
    if d is None:
        return config.floatX
    if d == "floatX":
        return config.floatX
    return str(np.dtype(d))


def _is_float(dtype):
    return dtype.startswith("float")


def _upcast(*dtypes):
    return str(np.result_type(*[np.dtype(d) for d in dtypes]))


def _weak_value(dtype):
    return 1.5 if dtype.startswith("float") else (True if dtype == "bool" else 1)


def _result_dtype(a, b, op):
    """NumPy 2's promotion (Python numbers are weak), which is PyTensor's for these cases."""
    xs = []
    for v in (a, b):
        xs.append(np.zeros((), v.dtype) if not v._weak else _weak_value(v.dtype))
    with np.errstate(all="ignore"):
        return str(op(*xs).dtype)


def to_kiln(value, dtype):
    arr = np.asarray(value)
    if dtype != "bool" and arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    store = _STORE[dtype]
    held = {kiln.TensorXi: np.int32, kiln.TensorXu: np.uint32}.get(store, dtype)
    return store(np.array(arr, dtype=held, order="C"))


def _cast(t, dtype):
    store = _STORE[dtype]
    if type(t) is store:
        return t
    return store(t)


# ---- graph ---------------------------------------------------------------------------------------


class _Node:
    """One operation: ``compute(ev)`` returns the values of its outputs (a tuple)."""

    def __init__(self, fn, inputs, name="op"):
        self.fn = fn
        self.inputs = list(inputs)
        self.name = name
        self.outputs = []

    def compute(self, ev):
        return self.fn(*[ev(i) for i in self.inputs])

    def deps(self):
        return self.inputs


class TensorType:
    def __init__(self, dtype, shape=None, ndim=None):
        self.dtype = _dtype(dtype)
        if shape is None:
            shape = (None,) * (ndim or 0)
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.broadcastable = tuple(s == 1 for s in self.shape)

    def __call__(self, name=None):
        return _input(self.dtype, self.shape, name)

    def __repr__(self):
        return f"TensorType({self.dtype}, shape={self.shape})"


class Variable:
    """A symbolic value: an input, a constant, a shared variable or an output of a node."""

    __array_priority__ = 1000

    def __init__(self, dtype, ndim, node=None, index=0, name=None, kind="op", shape=None):
        self.dtype = _dtype(dtype)
        self.ndim = ndim
        self._node = node
        self._index = index
        self.name = name
        self._kind = kind
        self._weak = False
        self._shape = tuple(shape) if shape is not None else (None,) * ndim

    __hash__ = object.__hash__

    @property
    def type(self):
        return TensorType(self.dtype, self._shape)

    @property
    def owner(self):
        raise NotImplementedError(_unsupported_msg("Variable.owner"))

    def __repr__(self):
        return f"<{self._kind} {self.name or ''} {self.dtype} ndim={self.ndim}>"

    def __bool__(self):
        raise TypeError("a symbolic variable has no truth value")

    def __iter__(self):
        raise TypeError("a symbolic variable is not iterable")

    # -- arithmetic
    def __add__(self, o):
        return _binary(np.add, "add", self, o)

    def __radd__(self, o):
        return _binary(np.add, "add", o, self)

    def __sub__(self, o):
        return _binary(np.subtract, "sub", self, o)

    def __rsub__(self, o):
        return _binary(np.subtract, "sub", o, self)

    def __mul__(self, o):
        return _binary(np.multiply, "mul", self, o)

    def __rmul__(self, o):
        return _binary(np.multiply, "mul", o, self)

    def __truediv__(self, o):
        return _binary(np.true_divide, "div", self, o)

    def __rtruediv__(self, o):
        return _binary(np.true_divide, "div", o, self)

    def __pow__(self, o):
        return _binary(np.power, "pow", self, o)

    def __rpow__(self, o):
        return _binary(np.power, "pow", o, self)

    def __neg__(self):
        return _unary(lambda t: -t, "neg", self)

    def __gt__(self, o):
        return _binary(np.greater, "gt", self, o)

    def __lt__(self, o):
        return _binary(np.less, "lt", self, o)

    def __ge__(self, o):
        return _binary(np.greater_equal, "ge", self, o)

    def __le__(self, o):
        return _binary(np.less_equal, "le", self, o)

    # -- methods
    def sum(self, axis=None, keepdims=False, dtype=None):
        return pt_sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None):
        return mean(self, axis=axis)

    def std(self):
        m = self.mean()
        return sqrt(((self - m) ** 2).mean())

    def dot(self, o):
        return dot(self, o)

    def ravel(self):
        return reshape(self, (-1,))

    flatten = ravel

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return reshape(self, shape)

    def astype(self, dtype):
        return cast(self, dtype)

    @property
    def T(self):
        return _transpose(self)

    @property
    def shape(self):
        return _shape_of(self)

    def __getitem__(self, key):
        return _getitem(self, key)

    def eval(self, inputs_to_values=None, **kwargs):
        inputs_to_values = inputs_to_values or {}
        ins = list(inputs_to_values)
        return function(ins, self)(*[inputs_to_values[i] for i in ins])

    def copy(self, name=None):
        return _unary(lambda t: t, "copy", self)

    def clone(self):
        raise NotImplementedError(_unsupported_msg("Variable.clone"))


TensorVariable = Variable


class SharedVariable(Variable):
    def __init__(self, value, name=None):
        arr = np.array(value)
        if arr.dtype == np.float64 and not isinstance(value, np.ndarray) and isinstance(value, float):
            arr = arr.astype(config.floatX)
        super().__init__(str(arr.dtype), arr.ndim, name=name, kind="shared", shape=arr.shape)
        self._value = arr

    def get_value(self, borrow=False, return_internal_type=False):
        return self._value if borrow else self._value.copy()

    def set_value(self, value, borrow=False):
        self._value = np.array(value, dtype=self.dtype)


class _GeneratorShared(Variable):
    """A shared NumPy ``Generator`` with PyTensor's draw methods that return ``(next_rng, draw)``.
    Draws are NumPy's (test data such as random projections), made from a copy of the generator
    each time the graph runs, as PyTensor does for a generator that is not updated."""

    def __init__(self, gen, name=None):
        super().__init__("float64", 0, name=name, kind="rng")
        self._value = gen

    def get_value(self, borrow=False):
        return self._value if borrow else copy.deepcopy(self._value)

    def set_value(self, value, borrow=False):
        self._value = value

    def _draw(self, method, size, *params):
        size_v = _var(size) if size is not None else None
        inputs = [self] + ([size_v] if size_v is not None else [])

        def compute(gen, *sz):
            gen = copy.deepcopy(gen)
            shape = tuple(int(v) for v in np.atleast_1d(np.asarray(sz[0].numpy()))) if sz else None
            if sz and sz[0].ndim == 0:
                shape = (int(np.asarray(sz[0].numpy())),)
            draw = getattr(gen, method)(*params, size=shape)
            return gen, to_kiln(np.asarray(draw, dtype=np.float64), "float64")

        node = _Node(compute, inputs, method)
        nxt = _RngOut(node, 0)
        out = Variable("float64", 0, node=node, index=1)
        if size_v is not None:
            out.ndim = size_v._shape[0] if size_v.ndim == 1 else 1
            if out.ndim is None:
                raise NotImplementedError("kiln shim: a random draw whose size has no static length")
        node.outputs = [nxt, out]
        return nxt, out

    def uniform(self, low=0.0, high=1.0, size=None):
        return self._draw("uniform", size, low, high)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self._draw("normal", size, loc, scale)


class _RngOut(_GeneratorShared):
    def __init__(self, node, index):
        Variable.__init__(self, "float64", 0, node=node, index=index, kind="rng")


def shared(value, name=None, strict=False, allow_downcast=None, borrow=False, **kwargs):
    if isinstance(value, np.random.Generator):
        return _GeneratorShared(value, name=name)
    return SharedVariable(value, name=name)


def _input(dtype, shape, name=None):
    return Variable(dtype, len(shape), name=name, kind="input", shape=shape)


def constant(x, name=None, ndim=None, dtype=None):
    if isinstance(x, Variable):
        return x if dtype is None else cast(x, dtype)
    weak = dtype is None and isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)
    arr = np.asarray(x)
    if dtype is not None:
        arr = arr.astype(_dtype(dtype))
    elif arr.dtype == np.float64 and isinstance(x, float):
        arr = arr.astype(config.floatX)
    v = Variable(str(arr.dtype), arr.ndim, name=name, kind="const", shape=arr.shape)
    v._value = arr
    v._weak = weak
    return v


def as_tensor(x, name=None, ndim=None, dtype=None):
    if isinstance(x, (list, tuple)) and any(isinstance(e, Variable) for e in x):
        return stack(list(x), dtype=dtype)
    return constant(x, name=name, dtype=dtype)


as_tensor_variable = as_tensor


def _var(x):
    return x if isinstance(x, Variable) else constant(x)


def _op(fn, inputs, dtype, ndim, name="op", shape=None):
    node = _Node(lambda *a: (fn(*a),), inputs, name)
    out = Variable(dtype, ndim, node=node, shape=shape)
    node.outputs = [out]
    return out


# ---- evaluation ----------------------------------------------------------------------------------


class _Eval:
    """Computes variables with kiln. ``env`` maps variables to kiln values; with a ``parent``, the
    variables that do not depend on ``env`` are asked of the parent (the outer graph of a scan,
    or the graph a gradient is taken in)."""

    def __init__(self, env, parent=None):
        self.env = dict(env)
        self.parent = parent
        self.memo = {}
        self._dep = {}

    def depends(self, var):
        if var in self.env:
            return True
        if var._node is None:
            return False
        node = var._node
        got = self._dep.get(node)
        if got is None:
            got = any(self.depends(i) for i in node.deps())
            self._dep[node] = got
        return got

    def __call__(self, var):
        if var in self.env:
            return self.env[var]
        if self.parent is not None and not self.depends(var):
            return self.parent(var)
        if var._node is None:
            got = self.memo.get(var)
            if got is None:
                if var._kind == "inner":
                    raise MissingInputError(f"{var!r} belongs to the body of a scan that is not being run")
                if var._kind == "input":
                    raise MissingInputError(f"the graph needs the input {var!r}, which was not given")
                got = var._value if var._kind == "rng" else to_kiln(var._value, var.dtype)
                self.memo[var] = got
            return got
        node = var._node
        outs = self.memo.get(node)
        if outs is None:
            outs = node.compute(self)
            self.memo[node] = outs
        return outs[var._index]


def _ancestors(outputs, stop=()):
    seen, leaves, stack = set(), [], list(outputs)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in stop:
            continue
        if v._node is None:
            leaves.append(v)
        else:
            stack.extend(v._node.deps())
    return seen, leaves


def _np_out(t, dtype):
    return np.asarray(t.numpy()).astype(dtype)


class Function:
    def __init__(self, inputs, outputs, updates=None, givens=None):
        self.inputs = [i.variable if isinstance(i, In) else i for i in inputs]
        self.single = outputs is not None and not isinstance(outputs, (list, tuple))
        self.outputs = [] if outputs is None else ([outputs] if self.single else list(outputs))
        self.outputs = [_var(o) for o in self.outputs]
        if isinstance(updates, dict):
            updates = list(updates.items())
        self.updates = [(s, _var(v)) for s, v in (updates or [])]
        givens = dict(givens.items() if isinstance(givens, dict) else (givens or []))
        self.givens = givens
        _, leaves = _ancestors(self.outputs + [v for _, v in self.updates] + list(givens.values()),
                               stop=set(self.inputs))
        for leaf in leaves:
            if leaf._kind == "input" and leaf not in self.inputs and leaf not in givens:
                raise MissingInputError(f"function: the graph needs the input {leaf!r}, not among the inputs")

    @property
    def maker(self):
        raise NotImplementedError(_unsupported_msg("Function.maker"))

    def __call__(self, *args):
        if len(args) != len(self.inputs):
            raise TypeError(f"function takes {len(self.inputs)} inputs, got {len(args)}")
        env = {}
        for var, a in zip(self.inputs, args):
            arr = np.asarray(a)
            if arr.ndim != var.ndim:
                raise TypeError(f"input {var!r}: wrong number of dimensions {arr.ndim}")
            env[var] = to_kiln(arr, var.dtype)
        ev = _Eval(env)
        for g, val in self.givens.items():
            ev.env[g] = ev(_var(val))
        outs = [_np_out(ev(o), o.dtype) for o in self.outputs]
        new = [(s, _np_out(ev(v), s.dtype)) for s, v in self.updates]
        for s, v in new:
            s.set_value(v)
        if self.single:
            return outs[0]
        return outs


class In:
    def __init__(self, variable, **kwargs):
        self.variable = variable


def function(inputs, outputs=None, mode=None, updates=None, givens=None, no_default_updates=False,
             accept_inplace=False, name=None, rebuild_strict=True, allow_input_downcast=None,
             profile=None, on_unused_input=None, trust_input=False):
    return Function(list(inputs), outputs, updates=updates, givens=givens)


# ---- elementwise and other operations ------------------------------------------------------------


def _binary(npop, name, a, b):
    a, b = _var(a), _var(b)
    out = _result_dtype(a, b, npop)
    ndim = max(a.ndim, b.ndim)
    compare = name in ("gt", "lt", "ge", "le", "eq", "neq")
    work = _upcast(a.dtype, b.dtype) if compare else out
    if compare and (a._weak or b._weak):
        work = (b if a._weak else a).dtype if not (a._weak and b._weak) else a.dtype
    if name == "div" and not _is_float(work):
        work = out
    ops = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
        "div": lambda x, y: x / y, "pow": lambda x, y: x**y, "gt": lambda x, y: x > y,
        "lt": lambda x, y: x < y, "ge": lambda x, y: x >= y, "le": lambda x, y: x <= y,
        "eq": lambda x, y: x == y, "neq": lambda x, y: x != y,
    }  # fmt: skip
    f = ops[name]
    aw, bw = a._weak, b._weak
    av = a._value.item() if aw else None
    bv = b._value.item() if bw else None

    def compute(x, y):
        x = av if aw else _cast(x, work)
        y = bv if bw else _cast(y, work)
        if aw and bw:
            return to_kiln(npop(av, bv), out)
        r = f(x, y)
        return _cast(r, out)

    v = _op(compute, [a, b], out, ndim, name)
    v._weak = aw and bw
    if v._weak:
        v._value = np.asarray(npop(av, bv))
    return v


def _unary(f, name, x, dtype=None):
    x = _var(x)
    return _op(lambda t: _cast(f(t), dtype or x.dtype), [x], dtype or x.dtype, x.ndim, name)


def _float_unary(kf, name):
    def op(x):
        x = _var(x)
        d = x.dtype if _is_float(x.dtype) else config.floatX
        return _op(lambda t: _cast(kf(_cast(t, d)), d), [x], d, x.ndim, name)

    op.__name__ = name
    return op


exp = _float_unary(kiln.exp, "exp")
tanh = _float_unary(kiln.tanh, "tanh")
sqrt = _float_unary(kiln.sqrt, "sqrt")
log = _float_unary(kiln.log, "log")
sin = _float_unary(kiln.sin, "sin")
cos = _float_unary(kiln.cos, "cos")
sigmoid = _float_unary(lambda t: 1.0 / (1.0 + kiln.exp(-t)), "sigmoid")


def _tensor_like(flat, shape):
    cls = {v: k for k, v in _FLAT.items()}[type(flat)]
    return cls(flat, tuple(shape))


def pt_sum(x, axis=None, keepdims=False, dtype=None):
    x = _var(x)
    out = dtype or {"bool": "int64", "int8": "int64", "int16": "int64", "int32": "int64",
                    "uint8": "uint64", "uint16": "uint64", "uint32": "uint64"}.get(x.dtype, x.dtype)
    if axis is None:
        def f(t):
            s = _tensor_like(kiln.sum(_cast(t, out).array), ())
            return s.reshape((1,) * t.ndim) if keepdims else s

        return _op(f, [x], out, x.ndim if keepdims else 0, "sum")
    ax = axis % x.ndim

    def f(t):
        t = _cast(t, out if _is_float(out) else "float64")
        shp = t.shape
        pre = int(np.prod(shp[:ax], dtype=np.int64))
        n = shp[ax]
        post = int(np.prod(shp[ax + 1 :], dtype=np.int64))
        if post == 1:  # sum over the last axis: [pre, n] @ [n, 1]
            r = t.reshape(pre, n) @ _cast(to_kiln(np.ones((n, 1)), "float64"), _dtype_of(t))
        elif pre == 1:
            r = _cast(to_kiln(np.ones((1, n)), "float64"), _dtype_of(t)) @ t.reshape(n, post)
        else:
            raise NotImplementedError("kiln shim: sum over a middle axis")
        new = shp[:ax] + ((1,) if keepdims else ()) + shp[ax + 1 :]
        return _cast(r.reshape(*new) if new else r.reshape(()), out)

    return _op(f, [x], out, x.ndim if keepdims else x.ndim - 1, "sum")


def _dtype_of(t):
    return {kiln.TensorXf64: "float64", kiln.TensorXf: "float32", kiln.TensorXi64: "int64",
            kiln.TensorXi: "int32", kiln.TensorXu64: "uint64", kiln.TensorXu: "uint32",
            kiln.TensorXb: "bool"}[type(t)]  # fmt: skip


def mean(x, axis=None):
    x = _var(x)
    if axis is not None:
        raise NotImplementedError("kiln shim: mean(axis=...)")
    d = x.dtype if _is_float(x.dtype) else config.floatX

    def f(t):
        n = int(np.prod(t.shape, dtype=np.int64))
        return _tensor_like(kiln.sum(_cast(t, d).array), ()) / n

    return _op(lambda t: _cast(f(t), d), [x], d, 0, "mean")


def pt_all(x, axis=None):
    x = _var(x)
    if axis is not None:
        raise NotImplementedError("kiln shim: all(axis=...)")

    def f(t):
        n = int(np.prod(t.shape, dtype=np.int64))
        count = kiln.sum(_cast(t, "bool").array)
        return kiln.TensorXb(count == n, ())

    return _op(f, [x], "bool", 0, "all")


def dot(a, b):
    a, b = _var(a), _var(b)
    d = _upcast(a.dtype, b.dtype)
    if a.ndim == 0 or b.ndim == 0:
        return a * b

    def f(x, y):
        x, y = _cast(x, d), _cast(y, d)
        if x.ndim == 1 and y.ndim == 1:
            return _tensor_like(kiln.dot(x.array, y.array), ())
        if x.ndim == 1:
            return (x.reshape(1, x.shape[0]) @ y).reshape(y.shape[1])
        if y.ndim == 1:
            return (x @ y.reshape(y.shape[0], 1)).reshape(x.shape[0])
        return x @ y

    ndim = a.ndim + b.ndim - 2
    if a.ndim > 2 or b.ndim > 2:
        raise NotImplementedError("kiln shim: dot of tensors of rank > 2")
    return _op(f, [a, b], d, ndim, "dot")


def cast(x, dtype):
    x = _var(x)
    d = _dtype(dtype)
    return _op(lambda t: _cast(t, d), [x], d, x.ndim, "cast")


def switch(cond, a, b):
    cond, a, b = _var(cond), _var(a), _var(b)
    d = _upcast(a.dtype, b.dtype) if not (a._weak or b._weak) else _result_dtype(a, b, np.add)
    ndim = max(cond.ndim, a.ndim, b.ndim)

    def f(c, x, y):
        shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
        x = _cast(x, d) + _cast(to_kiln(np.zeros(shape), "float64"), d)
        y = _cast(y, d) + _cast(to_kiln(np.zeros(shape), "float64"), d)
        c = _cast(c, "bool")
        if tuple(c.shape) != tuple(shape):
            c = _cast(_cast(c, "int32") + to_kiln(np.zeros(shape, np.int32), "int32"), "bool")
        return _tensor_like(kiln.select(c.array, x.array, y.array), shape)

    return _op(f, [cond, a, b], d, ndim, "switch")


where = switch


def _shape_of(x):
    return _op(lambda t: to_kiln(np.array(t.shape, dtype=np.int64), "int64"), [x], "int64", 1, "shape",
               shape=(x.ndim,))


def _static_int(t):
    return int(np.asarray(t.numpy()))


def reshape(x, shape, ndim=None):
    x = _var(x)
    if isinstance(shape, Variable):
        raise NotImplementedError("kiln shim: reshape to a symbolic shape")
    shape = tuple(int(s) for s in shape)

    def f(t):
        shp = shape
        if -1 in shp:
            n = int(np.prod(t.shape, dtype=np.int64))
            known = int(np.prod([s for s in shp if s != -1], dtype=np.int64))
            shp = tuple(n // max(known, 1) if s == -1 else s for s in shp)
        return t.reshape(*shp) if shp else t.reshape(())

    return _op(f, [x], x.dtype, len(shape), "reshape")


def specify_shape(x, shape):
    return x


def _transpose(x):
    if x.ndim != 2:
        raise NotImplementedError("kiln shim: transpose of rank != 2")

    def f(t):
        m, n = t.shape
        idx = (np.arange(n)[:, None] + np.arange(m)[None, :] * n).ravel().astype(np.uint32)
        return _tensor_like(kiln.gather(type(t.array), t.array, kiln.UInt32(idx)), (n, m))

    return _op(f, [x], x.dtype, 2, "transpose")


def _getitem(x, key):
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis or k is None for k in key):
        raise NotImplementedError("kiln shim: indexing with ... or None")
    if len(key) > x.ndim:
        raise IndexError("too many indices")
    sym = [k for k in key if isinstance(k, Variable)]
    if sym:
        if len(key) != 1:
            raise NotImplementedError("kiln shim: symbolic index with several axes")

        # a symbolic integer index on axis 0: a gather of that row
        def g(t, i):
            row = int(np.prod(t.shape[1:], dtype=np.int64))
            n = t.shape[0]
            i64 = _cast(i, "int64").array
            i64 = kiln.select(i64 < 0, i64 + n, i64)
            idx = kiln.UInt32(i64) * row + kiln.arange(kiln.UInt32, 0, row)
            return _tensor_like(kiln.gather(type(t.array), t.array, idx), t.shape[1:])

        return _op(g, [x, key[0]], x.dtype, x.ndim - 1, "index")
    ndim = x.ndim - sum(1 for k in key if not isinstance(k, slice))

    def f(t):
        r = t
        axis = 0
        for k in key:
            if isinstance(k, slice):
                sl = [slice(None)] * axis + [k]
                r = r[tuple(sl)] if axis else r[k]
                axis += 1
            else:
                k = int(k)
                n = r.shape[axis]
                if k < 0:
                    k += n
                if not 0 <= k < n:
                    raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
                sl = tuple([slice(None)] * axis + [slice(k, k + 1)])
                r = r[sl] if axis else r[k : k + 1]
                shp = r.shape[:axis] + r.shape[axis + 1 :]
                r = r.reshape(*shp) if shp else r.reshape(())
        return r

    return _op(f, [x], x.dtype, ndim, "subtensor")


def arange(start, stop=None, step=1, dtype=None):
    if stop is None:
        start, stop = 0, start
    args = [_var(start), _var(stop), _var(step)]
    d = _dtype(dtype) if dtype else ("int64" if all(not _is_float(a.dtype) for a in args) else config.floatX)

    def f(a, b, s):
        a, b, s = (float(np.asarray(v.numpy())) for v in (a, b, s))
        return _arange(a, b, s, d)

    return _op(f, args, d, 1, "arange")


def _arange(a, b, s, d):
    n = max(0, int(np.ceil((b - a) / s)))
    flat = kiln.arange(kiln.Int64, 0, n) if n else kiln.Int64([])
    t = kiln.TensorXi64(flat, (n,))
    return _cast(t * int(s) + int(a), d) if not _is_float(d) else _cast(_cast(t, d) * s + a, d)


def alloc(value, *shape):
    value = _var(value)
    for s in shape:
        if isinstance(s, Variable):
            raise NotImplementedError("kiln shim: alloc with a symbolic shape")
    shape = tuple(int(s) for s in shape)
    return _op(lambda t: _cast(t + _cast(to_kiln(np.zeros(shape), "float64"), value.dtype), value.dtype),
               [value], value.dtype, len(shape), "alloc")


def _filled(shape, fill, dtype):
    if isinstance(shape, int):
        shape = (shape,)
    d = _dtype(dtype)
    return constant(np.full(tuple(shape), fill, dtype=d))


def zeros(shape, dtype=None):
    return _filled(shape, 0, dtype)


def ones(shape, dtype=None):
    return _filled(shape, 1, dtype)


def zeros_like(x, dtype=None):
    x = _var(x)
    d = _dtype(dtype) if dtype else x.dtype
    return _op(lambda t: to_kiln(np.zeros(t.shape), d), [x], d, x.ndim, "zeros_like")


def ones_like(x, dtype=None):
    x = _var(x)
    d = _dtype(dtype) if dtype else x.dtype
    return _op(lambda t: to_kiln(np.ones(t.shape), d), [x], d, x.ndim, "ones_like")


def join(axis, *tensors):
    """Concatenation along axis 0 (a select between gathers of the flattened inputs)."""
    xs = [_var(t) for t in tensors]
    if axis != 0:
        raise NotImplementedError("kiln shim: join along an axis other than 0")
    d = _upcast(*[x.dtype for x in xs])

    def f(*ts):
        ts = [_cast(t, d) for t in ts]
        sizes = [int(np.prod(t.shape, dtype=np.int64)) for t in ts]
        total = sum(sizes)
        idx = kiln.arange(kiln.Int64, 0, total)
        out = None
        start = 0
        for t, n in zip(ts, sizes):
            local = kiln.UInt32(kiln.minimum(kiln.maximum(idx - start, 0), max(n - 1, 0)))
            g = kiln.gather(type(t.array), t.array, local)
            out = g if out is None else kiln.select((idx >= start) & (idx < start + n), g, out)
            start += n
        shape = (sum(t.shape[0] for t in ts),) + tuple(ts[0].shape[1:])
        return _tensor_like(out, shape)

    return _op(f, xs, d, xs[0].ndim, "join")


concatenate = lambda tensors, axis=0: join(axis, *tensors)  # noqa: E731


def stack(tensors, axis=0, dtype=None):
    xs = [_var(t) for t in tensors]
    if axis != 0:
        raise NotImplementedError("kiln shim: stack along an axis other than 0")
    d = _dtype(dtype) if dtype else _upcast(*[x.dtype for x in xs])
    rows = [reshape(cast(x, d), (1,) + (1,) * 0) if x.ndim == 0 else None for x in xs]
    if any(r is None for r in rows):
        raise NotImplementedError("kiln shim: stack of non-scalars")
    return join(0, *rows)


def disconnected_grad(x):
    """Identity forward, no gradient backward (``kiln.detach``)."""
    x = _var(x)
    return _op(lambda t: type(t)(kiln.detach(t.array), t.shape), [x], x.dtype, x.ndim, "disconnected_grad")


def assert_op(x, *conds):
    """PyTensor's ``Assert``: the shim accepts only conditions known when the graph is built."""
    for c in conds:
        if isinstance(c, Variable):
            if c._kind != "const":
                raise NotImplementedError("kiln shim: assert_op with a condition computed at run time")
            c = c._value
        if not np.all(c):
            raise AssertionError("assert_op: condition is false")
    return _unary(lambda t: t, "assert", x)


# ---- types (PyTensor's constructors of typed inputs) ---------------------------------------------


def tensor(name=None, dtype=None, shape=None, **kwargs):
    if isinstance(name, str) or name is None:
        pass
    return _input(_dtype(dtype), tuple(shape) if shape is not None else (), name)


def _maker(default_dtype, ndim, fixed=None):
    def make(name=None, dtype=None, shape=None):
        d = _dtype(dtype if dtype is not None else default_dtype)
        shp = tuple(shape) if shape is not None else (fixed or (None,) * ndim)
        return _input(d, shp, name)

    return make


scalar = _maker(None, 0)
vector = _maker(None, 1)
matrix = _maker(None, 2)
tensor3 = _maker(None, 3)
dscalar = _maker("float64", 0)
dvector = _maker("float64", 1)
dcol = _maker("float64", 2, (None, 1))
fscalar = _maker("float32", 0)
fvector = _maker("float32", 1)
fmatrix = _maker("float32", 2)
ftensor3 = _maker("float32", 3)
iscalar = _maker("int32", 0)
ivector = _maker("int32", 1)
lscalar = _maker("int64", 0)
lvector = _maker("int64", 1)


# ---- scan ----------------------------------------------------------------------------------------


class until:
    """PyTensor's ``until``: return it from the step function to stop after that step."""

    def __init__(self, condition):
        self.condition = _var(condition)


def _is_updates_list(x):
    return (
        isinstance(x, (list, tuple))
        and len(x) > 0
        and all(isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], SharedVariable) for e in x)
    )


def _split_step_return(ret):
    """PyTensor's step results: outputs, updates (dict or list of pairs) and an ``until``, in
    any grouping."""
    outs, updates, cond = [], {}, None
    if ret is None:
        return outs, updates, cond
    if isinstance(ret, until):
        return outs, updates, ret.condition
    if isinstance(ret, dict):
        return outs, dict(ret), cond
    if isinstance(ret, Variable):
        return [ret], updates, cond
    ret = list(ret)
    special = any(isinstance(e, (until, dict)) or _is_updates_list(e) for e in ret)
    if not special:
        return [_var(e) for e in ret], updates, cond
    for e in ret:
        if isinstance(e, until):
            cond = e.condition
        elif isinstance(e, dict):
            updates.update(e)
        elif _is_updates_list(e):
            updates.update(dict(e))
        elif isinstance(e, (list, tuple)):
            outs.extend(_var(o) for o in e)
        else:
            outs.append(_var(e))
    return outs, updates, cond


def _taps(t, default):
    if t is None:
        return None
    if isinstance(t, int):
        return [t]
    return list(t)


class _ScanNode(_Node):
    """A recorded scan. Its inputs (for dependency tracking) are the outer sequences, initial
    states, non-sequences and the outer values the body uses implicitly (``free``)."""

    def deps(self):
        return self.inputs

    def connections(self):
        """For each output, the outer variables it depends on (through the recurrences)."""
        if getattr(self, "_conn", None) is not None:
            return self._conn
        owner = {}
        k = 0
        for s_var, taps in zip(self.seqs, self.seq_taps):
            for _ in taps:
                owner[self.seq_ph[k]] = ("outer", s_var)
                k += 1
        k = 0
        for j, taps in enumerate(self.out_taps):
            for _ in taps:
                owner[self.out_ph[k]] = ("out", j)
                k += 1
        n_out = len(self.out_dtypes)
        for j, sh in enumerate(self.upd_shared):
            owner[sh] = ("out", n_out + j)
        for v in self.ns_ph:
            owner.setdefault(v, ("outer", v))
        direct = []
        for o in self.inner_outs:
            found, seen, stack = set(), set(), [o]
            while stack:
                v = stack.pop()
                if v in seen:
                    continue
                seen.add(v)
                if v in owner:
                    found.add(owner[v])
                elif not self.probe.depends(v):
                    if v._kind != "const":
                        found.add(("outer", v))
                else:
                    stack.extend(v._node.deps())
            direct.append(found)
        inits = [i for i in self.inits] + list(self.upd_shared)
        conn = [set() for _ in self.inner_outs]
        changed = True
        while changed:
            changed = False
            for j, found in enumerate(direct):
                new = set(conn[j])
                for kind, x in found:
                    if kind == "outer":
                        new.add(x)
                    else:
                        if inits[x] is not None:
                            new.add(inits[x])
                        new |= conn[x]
                if new != conn[j]:
                    conn[j] = new
                    changed = True
        self._conn = conn
        return conn

    def compute(self, ev):
        seq_vals = [ev(s) for s in self.seqs]
        init_vals = [None if i is None else ev(i) for i in self.inits]
        nonseq_vals = [ev(v) for v in self.nonseqs]
        free_vals = [ev(v) for v in self.free]
        upd_inits = [ev(s) for s in self.upd_shared]
        n_steps = self.n_steps
        if isinstance(n_steps, Variable):
            n_steps = _static_int(ev(n_steps))
        # the initial values of outputs are cast to the outputs' dtypes (PyTensor upcasts them too)
        init_vals = [None if v is None else _cast(v, d) for v, d in zip(init_vals, self.out_dtypes)]
        upd_inits = [_cast(v, s.dtype) for v, s in zip(upd_inits, self.upd_shared)]

        seq_ph, out_ph, upd_ph, ns_ph = self.seq_ph, self.out_ph, self.upd_ph, self.ns_ph
        passed_free = [] if self.strict else self.free
        inner_outs, cond = self.inner_outs, self.cond
        dtypes = self.out_dtypes + [s.dtype for s in self.upd_shared]

        def step(*args):
            args = list(args)
            env = {}
            pos = 0
            for p in seq_ph:
                env[p] = args[pos]
                pos += 1
            for p in out_ph + upd_ph:
                env[p] = args[pos]
                pos += 1
            for p in ns_ph:
                env[p] = args[pos]
                pos += 1
            for v in passed_free:
                env[v] = args[pos]
                pos += 1
            if self.strict:
                for v, val in zip(self.free, free_vals):
                    env[v] = val
            inner = _Eval(env, parent=ev)
            got = [_cast(inner(o), d) for o, d in zip(inner_outs, dtypes)]
            if cond is not None:
                c = inner(cond)
                return tuple(got) + (kiln.until(_cast(c, "bool")),)
            return tuple(got) if len(got) != 1 else got[0]

        seqs = [dict(input=v, taps=t) for v, t in zip(seq_vals, self.seq_taps)]
        outs = []
        for v, t in zip(init_vals, self.out_taps):
            outs.append(None if not t else dict(initial=v, taps=t))
        outs += [dict(initial=v, taps=[-1]) for v in upd_inits]
        nonseqs = nonseq_vals + ([] if self.strict else free_vals)
        results, _ = kiln.scan(step, sequences=seqs, outputs_info=outs, non_sequences=nonseqs,
                               n_steps=n_steps, truncate_gradient=self.truncate_gradient,
                               go_backwards=self.go_backwards, strict=self.strict,
                               allow_gc=self.allow_gc, return_list=True)
        results = list(results)
        n_out = len(self.out_dtypes)
        final = []
        for r, s in zip(results[n_out:], self.upd_shared):
            n = r.shape[0]
            final.append(_getitem_value(r, n - 1) if n else ev(s))
        return tuple(_cast(r, d) for r, d in zip(results[:n_out], self.out_dtypes)) + tuple(final)


def _getitem_value(t, k):
    r = t[k : k + 1]
    shp = r.shape[1:]
    return r.reshape(*shp) if shp else r.reshape(())


def _element(outer, drop=1):
    """The inner placeholder for one step of ``outer`` (one dimension less)."""
    return Variable(outer.dtype, outer.ndim - drop, kind="inner", shape=outer._shape[drop:])


def scan(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None, truncate_gradient=-1,
         go_backwards=False, mode=None, name=None, profile=False, allow_gc=None, strict=False,
         return_list=False, return_updates=True):
    def as_list(x):
        if x is None:
            return []
        if isinstance(x, (list, tuple)):
            return list(x)
        return [x]

    seqs, seq_taps = [], []
    for s in as_list(sequences):
        if isinstance(s, dict):
            taps = _taps(s.get("taps", [0]), [0])
            seqs.append(_var(s["input"]))
            seq_taps.append([0] if taps is None else taps)
        else:
            seqs.append(_var(s))
            seq_taps.append([0])
    inits, out_taps = [], []
    outputs_given = outputs_info is not None and as_list(outputs_info) != []
    for o in as_list(outputs_info):
        if o is None:
            inits.append(None)
            out_taps.append([])
        elif isinstance(o, dict):
            if o.get("initial") is None:
                inits.append(None)
                out_taps.append([])
            else:
                inits.append(_var(o["initial"]))
                t = _taps(o.get("taps", [-1]), [-1])
                out_taps.append([-1] if t is None else t)
        else:
            inits.append(_var(o))
            out_taps.append([-1])
    nonseqs = [_var(v) for v in as_list(non_sequences)]
    _check_taps_with_kiln(seq_taps, out_taps)

    # the dtypes of the recurrent states: those of the initial values, upcast to what the body
    # returns (PyTensor does the same), found by tracing the body again if they change
    out_dtypes = [None if i is None else i.dtype for i in inits]
    for _attempt in range(3):
        seq_ph = [_element(s) for s, taps in zip(seqs, seq_taps) for _ in taps]
        out_ph = []
        for i, taps, d in zip(inits, out_taps, out_dtypes):
            for tap in taps:
                drop = 1 if (len(taps) > 1 or tap != -1) else 0
                p = Variable(d, i.ndim - drop, kind="inner", shape=i._shape[drop:])
                out_ph.append(p)
        # PyTensor passes the outer non-sequence variables themselves to fn; in the body they
        # stand for the values the step receives
        ns_ph = list(nonseqs)
        ret = fn(*(seq_ph + out_ph + ns_ph))
        outs, updates, cond = _split_step_return(ret)
        if not outputs_given:
            inits = [None] * len(outs)
            out_taps = [[] for _ in outs]
            out_dtypes = [None] * len(outs)
        if len(outs) != len(inits):
            raise ValueError(
                f"scan: the step function returned {len(outs)} outputs but outputs_info describes {len(inits)}"
            )
        new = [o.dtype if d is None else _upcast(d, o.dtype) for o, d in zip(outs, out_dtypes)]
        if new == out_dtypes or not any(out_taps):
            out_dtypes = new
            break
        out_dtypes = new
    upd_shared = list(updates)
    for s in upd_shared:
        if not isinstance(s, SharedVariable):
            raise TypeError("scan: updates must be keyed by shared variables")
    upd_ph = []
    # in the body, an updated shared variable stands for its value carried from the last step
    inner_outs = list(outs) + [_var(updates[s]) for s in upd_shared]

    local = set(seq_ph + out_ph + ns_ph) | set(upd_shared)
    probe = _Eval({v: None for v in local})

    # the outer values the body uses without declaring them
    free, seen = [], set()
    stack = list(inner_outs) + ([cond] if cond is not None else [])
    while stack:
        v = stack.pop()
        if v in seen or v in local:
            continue
        seen.add(v)
        if not probe.depends(v):
            if v._kind == "inner":
                raise MissingInputError("scan: the body uses a variable of another scan's body")
            if v._kind != "const":
                free.append(v)
            continue
        stack.extend(v._node.deps())

    # with strict=True these are captured by the step function instead of passed, so that kiln's
    # own strict check (which refuses captured arrays) sees them when the scan runs

    node = _ScanNode(None, [], "scan")
    node.seqs, node.seq_taps, node.inits, node.out_taps = seqs, seq_taps, inits, out_taps
    node.nonseqs, node.free, node.out_dtypes = nonseqs, free, out_dtypes
    node.upd_shared = upd_shared
    node.seq_ph, node.out_ph, node.ns_ph = seq_ph, out_ph, ns_ph
    node.upd_ph = list(upd_shared)  # the shared variable itself is the placeholder in the body
    node.inner_outs, node.cond = inner_outs, cond
    node.n_steps, node.truncate_gradient, node.go_backwards = n_steps, truncate_gradient, go_backwards
    node.strict, node.allow_gc = strict, allow_gc
    node.probe = probe
    node.inputs = (seqs + [i for i in inits if i is not None] + nonseqs + free + upd_shared
                   + ([n_steps] if isinstance(n_steps, Variable) else []))
    node.outputs = []
    for i, (o, d) in enumerate(zip(outs, out_dtypes)):
        node.outputs.append(Variable(d, o.ndim + 1, node=node, index=i))
    upd_vars = {}
    for j, s in enumerate(upd_shared):
        v = Variable(s.dtype, s.ndim, node=node, index=len(outs) + j)
        node.outputs.append(v)
        upd_vars[s] = v

    res = node.outputs[: len(outs)]
    if not res:
        result = None
    elif len(res) == 1 and not return_list:
        result = res[0]
    else:
        result = list(res)
    if not return_updates:
        if upd_vars:
            raise ValueError("return_updates=False but Scan produced updates")
        return result
    return result, upd_vars


def _check_taps_with_kiln(seq_taps, out_taps):
    """Ask kiln whether this layout of taps is valid: a one-step scan of float64 zeros."""
    seqs = []
    for taps in seq_taps:
        lo, hi = min(min(taps), 0), max(max(taps), 0)
        seqs.append(dict(input=kiln.TensorXf64(np.zeros(hi - lo + 1)), taps=taps))
    outs = []
    for taps in out_taps:
        if not taps:
            outs.append(None)
        else:
            need = max(1, -min(taps)) if min(taps) < 0 else 1
            init = kiln.TensorXf64(np.zeros(need)) if (len(taps) > 1 or taps != [-1]) else kiln.TensorXf64(np.zeros(()))
            outs.append(dict(initial=init, taps=taps))
    n_out = len(out_taps)
    if not seqs and not outs:
        return

    def body(*args):
        z = kiln.TensorXf64(np.zeros(()))
        return tuple(z for _ in range(n_out)) if n_out != 1 else z

    if n_out == 0:
        return
    kiln.scan(body, sequences=seqs, outputs_info=outs, n_steps=None if seqs else 1)


# ---- gradients -----------------------------------------------------------------------------------


class _GradNode(_Node):
    def __init__(self, cost, wrt, known_zero):
        super().__init__(None, [cost] + list(wrt), "grad")
        self.cost, self.wrt, self.known_zero = cost, list(wrt), known_zero

    def compute(self, ev):
        env, leaves = {}, []
        vals = [ev(w) for w in self.wrt]
        for w, v in zip(self.wrt, vals):
            if _is_float(w.dtype):
                flat = kiln.detach(v.array)
                kiln.enable_grad(flat)
                leaves.append(flat)
                env[w] = type(v)(flat, v.shape)
            else:
                leaves.append(None)
                env[w] = v
        child = _Eval(env, parent=ev)
        c = child(self.cost)
        if int(np.prod(c.shape, dtype=np.int64)) != 1:
            raise TypeError("grad: the cost must be a scalar")
        if any(lf is not None for lf in leaves):
            kiln.backward(c.array)
        outs = []
        for w, v, lf in zip(self.wrt, vals, leaves):
            d = w.dtype if _is_float(w.dtype) else config.floatX
            if lf is None:
                outs.append(to_kiln(np.zeros(v.shape), d))
            else:
                outs.append(_cast(type(v)(kiln.grad(lf), v.shape), d))
        return tuple(outs)


def _connected(outputs):
    """The variables ``outputs`` depend on, following through a scan only the inputs that each
    of its outputs depends on."""
    seen, stack = set(), list(outputs)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        node = v._node
        if node is None:
            continue
        if isinstance(node, _ScanNode) and v._index < len(node.inner_outs):
            stack.extend(node.connections()[v._index])
            if isinstance(node.n_steps, Variable):
                stack.append(node.n_steps)
        else:
            stack.extend(node.deps())
    return seen


def _grad_nodes(var):
    seen, _ = _ancestors([var])
    return {v._node for v in seen if isinstance(v._node, _GradNode)}


def grad(cost, wrt, consider_constant=None, disconnected_inputs="raise", add_names=True,
         known_grads=None, return_disconnected="zero", null_gradients="raise"):
    if consider_constant or known_grads:
        raise NotImplementedError("kiln shim: grad(consider_constant=, known_grads=)")
    single = not isinstance(wrt, (list, tuple))
    wrt_list = [wrt] if single else list(wrt)
    cost = _var(cost)
    if cost.ndim != 0:
        raise TypeError("grad: cost must be a scalar")
    seen = _connected([cost])
    for w in wrt_list:
        if w not in seen:
            if disconnected_inputs == "raise":
                raise DisconnectedInputError(f"grad: the cost does not depend on {w!r}")
    for g in _grad_nodes(cost):
        inner_seen, _ = _ancestors([g.cost])
        if any(w in inner_seen for w in wrt_list):
            raise NotImplementedError(
                "kiln has no higher-order reverse mode (kiln.backward has no create_graph): "
                "the shim cannot take a gradient of a graph that holds a gradient of the same inputs"
            )
    node = _GradNode(cost, wrt_list, None)
    node.outputs = [
        Variable(w.dtype if _is_float(w.dtype) else config.floatX, w.ndim, node=node, index=i, shape=w._shape)
        for i, w in enumerate(wrt_list)
    ]
    return node.outputs[0] if single else list(node.outputs)


# ---- the `pytensor.tensor` namespace ------------------------------------------------------------

tensor_ns = types.SimpleNamespace(
    add=lambda a, b: _var(a) + b, alloc=alloc, arange=arange, as_tensor=as_tensor,
    as_tensor_variable=as_tensor, cast=cast, constant=constant, dscalar=dscalar, grad=grad,
    join=join, concatenate=concatenate, stack=stack, matrix=matrix, ones=ones, ones_like=ones_like,
    pi=np.pi, reshape=reshape, scalar=scalar, shape=lambda x: _var(x).shape, switch=switch,
    where=where, tensor=tensor, vector=vector, zeros=zeros, zeros_like=zeros_like, dot=dot, exp=exp,
    tanh=tanh, sigmoid=sigmoid, sqrt=sqrt, log=log, mean=mean, sum=pt_sum, all=pt_all,
    specify_shape=specify_shape, iscalar=iscalar, ivector=ivector, lscalar=lscalar, fvector=fvector,
    dvector=dvector, fmatrix=fmatrix, tensor3=tensor3,
    random=types.SimpleNamespace(normal=_unsupported_func("pytensor.tensor.random.normal"),
                                 integers=_unsupported_func("pytensor.tensor.random.integers")),
    append=_unsupported_func("pytensor.tensor.append"),
    normal=_unsupported_func("pytensor.tensor.normal"),
)  # fmt: skip


# ---- PyTensor's tests/unittest_tools -------------------------------------------------------------


def _fetch_seed(pseed=None):
    # PyTensor's default config.unittests__rseed
    return 666 if pseed is None else int(pseed)


def _utt_assert_allclose(expected, value, rtol=None, atol=None):
    """PyTensor's ``utt.assert_allclose``: ``np.allclose`` with its dtype-dependent tolerances."""
    expected = np.asarray(expected)
    value = np.asarray(value)
    narrow = any(str(a.dtype) in ("float32", "complex64") for a in (expected, value))
    rtol_ = 1e-5
    atol_ = 1e-5 if narrow else 1e-8
    rtol_ = rtol if rtol is not None else rtol_
    atol_ = atol if atol is not None else atol_
    if not np.allclose(expected, value, rtol=rtol_, atol=atol_):
        np.testing.assert_allclose(value, expected, rtol=rtol_, atol=atol_)
        raise AssertionError(f"values differ: expected {expected!r}, got {value!r}")


def _verify_grad(fun, pt, n_tests=2, rng=None, eps=None, out_type=None, abs_tol=None, rel_tol=None,
                 mode=None, cast_to_output_type=False, no_debug_ref=True):
    """PyTensor's ``verify_grad``: the gradient of a random projection of ``fun``'s output by
    ``grad`` against central differences."""
    pt = [np.array(p) for p in pt]
    rng = rng if rng is not None else np.random.default_rng(_fetch_seed())
    ins = [_input(str(p.dtype), (None,) * p.ndim) for p in pt]
    out = _var(fun(*ins))
    f_out = function(ins, out)
    shape = np.shape(f_out(*pt))
    eps = eps or 1e-7
    abs_tol = abs_tol or 1e-4
    rel_tol = rel_tol or 1e-4
    for _ in range(n_tests):
        proj = rng.random(shape) + 0.5
        cost = pt_sum(out * constant(proj.astype(out.dtype)))
        gs = grad(cost, ins)
        f_cost = function(ins, cost)
        f_grad = function(ins, gs)
        analytic = f_grad(*pt)
        for k, p in enumerate(pt):
            num = np.zeros(p.shape)
            for idx in np.ndindex(p.shape):
                hi, lo = [q.copy() for q in pt], [q.copy() for q in pt]
                hi[k][idx] += eps
                lo[k][idx] -= eps
                num[idx] = (f_cost(*hi) - f_cost(*lo)) / (2 * eps)
            np.testing.assert_allclose(analytic[k], num, rtol=rel_tol, atol=abs_tol)


unittest_tools = types.SimpleNamespace(
    fetch_seed=_fetch_seed, assert_allclose=_utt_assert_allclose, verify_grad=_verify_grad
)
