"""``@kiln.syntax``: Dr.Jit's ``@dr.syntax``, Python ``while`` loops and ``if`` statements on kiln
arrays written as plain Python.

The decorator rewrites the function's source once, at decoration: every ``while cond: body``
becomes a call of ``kiln.while_loop`` and every ``if cond: a else: b`` a call of
``kiln.if_stmt``. What runs is decided per call, by the condition's value:

- a kiln array (``i < n`` on a ``UInt32``): the loop or branch is traced into the kernel, lane by
  lane, in the mode ``kiln.hint(cond, mode=...)`` names (symbolic by default). Its state is the
  variables the statement assigns (``a[i] = ...`` and ``o.x = ...`` change ``a`` and ``o``), the
  arrays a loop's condition reads (they give the loop its width, as in Dr.Jit), and objects with
  fields kiln looks into that it reads (a ``PCG32`` advances per lane, and the caller's generator
  with it). Arrays the body only reads are captured. Variables first assigned inside a traced
  loop are its temporaries: unbound after it, as in Dr.Jit. A variable assigned in only one
  branch of a traced ``if`` is an error (a lane that took the other branch would have no value),
  as is changing an object kiln cannot carry lane by lane (a plain class instance).
- anything else (a Python ``bool``, ``x is None``): the plain Python statement, exactly as if the
  function had not been decorated (the variables a Python loop assigns reach the function's
  scope when the loop ends).

``kiln.hint(cond, mode='scalar')`` keeps a statement as written; ``kiln.hint`` (recognised by
what the name means in the function, not by its spelling) also passes ``max_iterations``,
``label``, ``compress`` and ``strict`` to the loop, and ``exclude=[v]`` / ``include=[v]`` take
variables out of (or into) a traced statement's state.

Statements are left as written, not rewritten, where moving them into functions would change
what they mean: a ``return``, ``yield``, ``await``, ``break``/``continue`` (of an enclosing loop),
``global``/``nonlocal``, ``async for/with``, or a ``def``/``lambda``/``class`` inside (it would
capture the moved code's variables); a ``while ... else``; a loop condition that assigns
(``:=``), yields or awaits. An ``if`` or ``while`` on an array left as written raises kiln's usual
"ambiguous truth value" error when it runs. Nested functions are not rewritten unless
``recursive=True``; a function already wrapped by another decorator is refused (put
``@kiln.syntax`` directly above the ``def``). Methods get Python's private-name mangling.
Tracebacks point at the user's lines.

How kiln differs from Dr.Jit: the rewritten function closes over the same variables (the cells
are shared, not copied), and the decision between traced and plain Python is made when the
statement runs rather than from the code's shape, so functions that branch on Python values
need no ``mode='scalar'`` hints.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import sys
import textwrap
import types
import uuid

from . import _kiln as _k
from ._inplace import _write_into
from ._inplace import callback_error as _callback_error, raising_from as _raising_from
from ._inplace import while_loop as _while_loop
from . import _vectors as _v

__all__ = ["syntax", "hint"]


def hint(value, **kwargs):
    """Options for the ``while`` loop or ``if`` statement whose condition this wraps, read by
    ``@kiln.syntax`` (``mode``, ``max_iterations``, ``label``, ``compress``, ``strict``,
    ``exclude``, ``include``); at run time it is ``value`` itself."""
    return value


class _Unset:
    """A variable that was not bound when a rewritten statement started: using it raises what
    Python raises for an unbound local."""

    def __repr__(self):
        return "<unbound>"

    def _unbound(self, *args, **kwargs):
        raise UnboundLocalError(
            "a variable the rewritten loop or branch assigns is read before it is assigned "
            "(kiln.syntax; Python raises this for an unbound local variable)"
        )


for _name in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
              "and rand or ror xor rxor lshift rlshift rshift rrshift matmul rmatmul neg pos abs "
              "invert lt le gt ge bool len iter getitem setitem call index int float").split():
    setattr(_Unset, f"__{_name}__", _Unset._unbound)
del _name


_UNSET = _Unset()
# what a traced branch returns for an unbound variable: a plain value kiln's branches compare
_UNSET_TOKEN = f"<kiln.syntax: unbound variable {uuid.uuid4().hex}>"


def _is_traced(cond):
    return isinstance(cond, (_k.ArrayBase, _k.TensorBase))


def _mask_of(cond):
    if isinstance(cond, _k.TensorBase):
        return cond.array
    return cond


def _grab(names):
    """The calling (generated) function's variables `names`, ``_UNSET`` where unbound (a ``del``
    or an ``except ... as`` unbinds one)."""
    frame = sys._getframe(1)
    try:
        loc = frame.f_locals
        return tuple(loc.get(n, _UNSET) for n in names)
    finally:
        del frame


def _lookup(frame, names, declared_global, read, cells):
    """`names` as the function running in `frame` sees them now: its locals (closure variables
    included); for names it only `read`s, the original function's closure `cells` (the rewrite
    moved their uses into the generated functions); for those and for names it declares
    ``global``, its globals and the builtins. ``_UNSET`` where unbound."""
    loc, glob = frame.f_locals, frame.f_globals
    out = []
    for n in names:
        if n in loc:
            out.append(loc[n])
        elif read and n in cells:
            try:
                out.append(cells[n].cell_contents)
            except ValueError:
                out.append(_UNSET)
        elif read or n in declared_global:
            v = glob.get(n, _UNSET)
            if v is _UNSET and read:
                v = getattr(builtins, n, _UNSET)
            out.append(v)
        else:
            out.append(_UNSET)
    return out


def _spread(base, live, values):
    """All variables' values: the live ones' from `values`, the rest as in `base` (unbound, or
    a value the statement does not carry)."""
    out = list(base)
    for i, v in zip(live, values):
        out[i] = v
    return out


def _traceable(v):
    return isinstance(v, (_k.ArrayBase, _k.TensorBase, _v.StaticArrayBase))


def _is_struct(v):
    cls = type(v)
    return hasattr(cls, "DRJIT_STRUCT") or hasattr(cls, "__dataclass_fields__")


def _carried(v):
    """Whether a traced statement carries `v` lane by lane: kiln arrays, and objects with
    fields kiln looks into (a ``PCG32``, a dataclass, a ``DRJIT_STRUCT`` class)."""
    return _traceable(v) or _is_struct(v)


def _fields(v):
    cls = type(v)
    f = getattr(cls, "DRJIT_STRUCT", None) or getattr(cls, "__dataclass_fields__", {})
    return list(f)


def _write_back(objs, results):
    """Objects the statement read and changed in place (a generator's state): its traced
    results go into the caller's very objects, as the changes would in Python."""
    for o, r in zip(objs, results):
        if r is not o and _is_struct(o):
            for name in _fields(o):
                object.__setattr__(o, name, getattr(r, name))


_PLAIN = (int, float, bool, str, bytes, type(None), list, tuple, dict)


def _check_mutated(names, values, mutated):
    """A variable changed through ``v.x = ...`` or ``v[i] = ...`` inside a traced statement must
    be something kiln carries lane by lane."""
    for i in mutated:
        v = values[i]
        if v is _UNSET or _carried(v) or isinstance(v, _PLAIN):
            continue
        raise TypeError(
            f"kiln.syntax: variable '{names[i]}' (a `{type(v).__name__}`) is changed inside a loop "
            "or branch on kiln arrays, but kiln cannot carry it lane by lane: make its class a "
            "dataclass (or give it Dr.Jit's DRJIT_STRUCT), or keep the values in variables"
        )


def _while(names, reads, declared_global, cells, cond, body, opts, excluded=(), mutated=(),
           cond_reads=0):
    """Run a rewritten ``while``, reading the variables from the calling function's frame.

    `names`: the variables the body assigns (unbound ones are the body's temporaries); `reads`:
    those the condition (the first `cond_reads`) or body only read, looked up afresh at every
    test of a Python loop. A Python condition runs the Python loop. A kiln one runs
    ``kiln.while_loop`` over the bound variables (less the `excluded` positions), the kiln arrays
    the condition reads (they give the loop its width, as in Dr.Jit) and the objects with fields
    read anywhere (a generator advances per lane); arrays the body only reads are captured, as
    in Dr.Jit; temporaries stay unbound. A loop over kiln arrays raises as ``kiln.while_loop``
    does (a RuntimeError caused by what its condition or body raised), one over Python values as
    Python does."""
    frame = sys._getframe(1)
    try:
        values = _lookup(frame, names, declared_global, False, cells)
        ro = _lookup(frame, reads, declared_global, True, cells)
        try:
            first = cond(*values, *ro)
        except Exception as e:
            if not any(_traceable(v) for v in (*values, *ro)):
                raise
            # (the condition of a loop over kiln arrays: kiln.while_loop's rule)
            raise _callback_error("while_loop", "the loop's cond", e) from e
        if not _is_traced(first):
            n = len(names)
            while first:
                values = list(body(*values, *ro))[:n]
                ro = _lookup(frame, reads, declared_global, True, cells)
                first = cond(*values, *ro)
            return tuple(values)
    finally:
        del frame
    _check_mutated(names, values, mutated)
    live = [i for i, v in enumerate(values) if v is not _UNSET and i not in excluded]
    ro_live = [j for j, v in enumerate(ro)
               if _is_struct(v) or (j < cond_reads and _traceable(v))]
    k, n = len(live), len(names)

    def cond_s(*s):
        return _mask_of(cond(*_spread(values, live, s[:k]), *_spread(ro, ro_live, s[k:])))

    def body_s(*s):
        r = body(*_spread(values, live, s[:k]), *_spread(ro, ro_live, s[k:]))
        return tuple(r[i] for i in live) + tuple(r[n + j] for j in ro_live)

    if not live:
        # nothing the body assigns exists yet: an error (after the body's own, if it raises,
        # as kiln.while_loop raises it)
        _raising_from("while_loop", "the loop's body", body)(*values, *ro)
        raise ValueError(
            "kiln.syntax: this while loop on a kiln array changes no variable that exists before "
            "it, so it could never end: assign the loop's counter before the loop"
        )
    state = tuple(values[i] for i in live) + tuple(ro[j] for j in ro_live)
    labels = tuple(names[i] for i in live) + tuple(reads[j] for j in ro_live)
    out = _while_loop(state, cond_s, body_s, labels=labels, **opts)
    if not isinstance(out, tuple):
        out = (out,)
    _write_back([ro[j] for j in ro_live], out[k:])
    return tuple(_spread(values, live, out[:k]))


def _if(names, reads, declared_global, cells, cond, true_fn, false_fn, opts, mutated=()):
    """Run a rewritten ``if``: a Python ``if`` for a Python condition, else ``kiln.if_stmt``
    over the variables the branches assign and the kiln values they read. On a kiln condition,
    what a branch raises comes out as from ``kiln.if_stmt`` (a RuntimeError caused by it); on a
    Python one, as Python raises it."""
    frame = sys._getframe(1)
    try:
        values = _lookup(frame, names, declared_global, False, cells)
        ro = _lookup(frame, reads, declared_global, True, cells)
    finally:
        del frame
    n = len(names)
    if not _is_traced(cond):
        return tuple((true_fn if cond else false_fn)(*values, *ro))[:n]
    _check_mutated(names, values, mutated)
    true_fn = _raising_from("if_stmt", "true_fn", true_fn)
    false_fn = _raising_from("if_stmt", "false_fn", false_fn)
    live = [i for i, v in enumerate(values) if v is not _UNSET]
    # objects with fields the branches read (a generator) are merged per lane; arrays captured
    ro_live = [j for j, v in enumerate(ro) if _is_struct(v)]
    k = len(live)
    assigned = {}
    # per live variable: whether every branch handed back the object it was given (changed in
    # place, `x += 1`, or untouched): then the result goes into the caller's object, as loops do
    kept = [True] * k

    def branch(fn, which):
        def run(*s):
            r = fn(*_spread(values, live, s[:k]), *_spread(ro, ro_live, s[k:]))
            for j, i in enumerate(live):
                kept[j] = kept[j] and r[i] is s[j]
            unset = {names[i] for i, v in enumerate(r[:n]) if v is _UNSET}
            assigned[which] = unset
            other = assigned.get(not which)
            if other is not None and other != unset:
                name = sorted(other ^ unset)[0]
                raise ValueError(
                    f"kiln.syntax: variable '{name}' is assigned in only one branch of an `if` on "
                    "a kiln array, so the lanes that take the other branch would have no value: "
                    "assign it before the `if`, or in both branches"
                )
            return (tuple(_UNSET_TOKEN if v is _UNSET else v for v in r[:n])
                    + tuple(r[n + j] for j in ro_live))

        return run

    args = tuple(values[i] for i in live) + tuple(ro[j] for j in ro_live)
    out = _k.if_stmt(args, _mask_of(cond), branch(true_fn, True), branch(false_fn, False),
                     rv_labels=tuple(names) + tuple(reads[j] for j in ro_live), **opts)
    if not isinstance(out, tuple):
        out = (out,)
    _write_back([ro[j] for j in ro_live], out[n:])
    res = [_UNSET if isinstance(v, str) and v == _UNSET_TOKEN else v for v in out[:n]]
    for j, i in enumerate(live):
        if kept[j]:
            res[i] = _write_into(values[i], res[i])
    return tuple(res)


# ---- the rewrite ----------------------------------------------------------------------------

_HELPER = "__kiln_syntax__"
_CELLS = "__kiln_cells__"
_LOOP_OPTS = {"mode", "max_iterations", "label", "compress", "strict"}
_IF_OPTS = {"mode", "label", "strict"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _generated(name):
    return name.startswith("__kiln_")


def _stored(stmts):
    """Names the statements assign, in order of first appearance: assignment targets (the base
    name of ``a[i] = ...`` and ``o.x = ...``: the object changes), ``:=`` (inside comprehensions
    too: it binds in the function), loop and ``with``/``except`` names, ``match`` captures,
    imports. Nested functions and classes are not looked into (their names are assigned)."""
    out = {}

    def base(t):
        while isinstance(t, (ast.Subscript, ast.Attribute, ast.Starred)):
            t = t.value
        return t.id if isinstance(t, ast.Name) else None

    todo = list(stmts)
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.setdefault(n.id, None)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            b = base(n)
            if b:
                out.setdefault(b, None)
        elif isinstance(n, ast.NamedExpr):
            out.setdefault(n.target.id, None)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.setdefault(n.name, None)
        elif isinstance(n, ast.alias):
            out.setdefault((n.asname or n.name).split(".")[0], None)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            out.setdefault(n.name, None)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.setdefault(n.rest, None)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(n.name, None)
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, _COMPS):
            # only `:=` escapes a comprehension
            todo.extend(x for x in ast.walk(n) if isinstance(x, ast.NamedExpr))
            continue
        todo.extend(ast.iter_child_nodes(n))
    return [n for n in out if not _generated(n)]


def _loaded(expr):
    """Names an expression reads (not inside lambdas or comprehensions), in order."""
    out = {}
    todo = [expr]
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.setdefault(n.id, None)
        if not isinstance(n, (ast.Lambda,) + _COMPS):
            todo.extend(ast.iter_child_nodes(n))
    return [n for n in out if not _generated(n)]


def _loaded_all(stmts):
    """Names the statements read (comprehensions included; nested scopes not), in order."""
    out = {}
    todo = list(stmts)
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.setdefault(n.id, None)
        if isinstance(n, _SCOPES) and not _generated(getattr(n, "name", "")):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return [n for n in out if not _generated(n)]


def _mutated(stmts):
    """Variables the statements change through ``v.x = ...`` / ``v[i] = ...`` (their base)."""
    out = set()
    for st in stmts:
        for n in _walk_local(st):
            if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
                b = n
                while isinstance(b, (ast.Subscript, ast.Attribute)):
                    b = b.value
                if isinstance(b, ast.Name):
                    out.add(b.id)
    return out


def _walk_local(node):
    """``ast.walk`` that does not enter nested functions, lambdas or classes."""
    if isinstance(node, _SCOPES):
        return
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, _SCOPES):
                todo.append(c)


def _breaks(node):
    """A ``break``/``continue`` that leaves `node` (not one of a loop inside it)."""
    if isinstance(node, (ast.Break, ast.Continue)):
        return True
    if isinstance(node, _SCOPES):
        return False
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        # the loop's own body breaks out of it; its `else` belongs to the enclosing loop
        return any(_breaks(c) for c in node.orelse)
    return any(_breaks(c) for c in ast.iter_child_nodes(node))


_ESCAPES = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal,
            ast.AsyncFor, ast.AsyncWith)


def _keep_as_written(stmts):
    """Whether the statements must stay as written (they cannot move into a function of their
    own): control leaves them (``return``, ``yield``, ``await``, ``break``/``continue`` of an
    enclosing loop, ``async for/with``), or a function, lambda or class made in them would
    capture the moved function's variables instead of the enclosing one's."""
    for s in stmts:
        todo = [s]
        while todo:
            n = todo.pop()
            if isinstance(n, _SCOPES):
                if not _generated(getattr(n, "name", "")):
                    return True
                continue
            if isinstance(n, _ESCAPES):
                return True
            todo.extend(ast.iter_child_nodes(n))
        if _breaks(s):
            return True
    return False


def _test_keeps(test):
    """A condition that must stay where it is: it assigns (``:=``), yields or awaits."""
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda))
               for n in ast.walk(test))


def _names_in(expr):
    """The variable names of an ``exclude=[a, b]`` / ``include=[...]`` option."""
    elts = expr.elts if isinstance(expr, (ast.List, ast.Tuple, ast.Set)) else [expr]
    out = []
    for e in elts:
        if not isinstance(e, ast.Name):
            raise SyntaxError("kiln.syntax: exclude=/include= take a list of variable names")
        out.append(e.id)
    return out


def _is_scalar(opts):
    m = opts.get("mode")
    return isinstance(m, ast.Constant) and m.value == "scalar"


class _Rewriter(ast.NodeTransformer):
    def __init__(self, recursive, is_hint, declared_global):
        self.recursive = recursive
        self.is_hint = is_hint
        self.declared_global = declared_global
        self.count = itertools.count()
        self.depth = 0

    # nested functions: left alone unless recursive
    def visit_FunctionDef(self, node):
        if self.depth > 0 and not self.recursive:
            return node
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_ClassDef(self, node):
        return node

    def _split_hint(self, test):
        """``(condition, options)`` of a ``kiln.hint(cond, **opts)`` test."""
        if isinstance(test, ast.Call) and len(test.args) == 1 and self.is_hint(test.func):
            return test.args[0], {k.arg: k.value for k in test.keywords if k.arg}
        return test, {}

    def _helper(self, name):
        return ast.Attribute(value=ast.Name(id=_HELPER, ctx=ast.Load()), attr=name, ctx=ast.Load())

    def _opts(self, opts, allowed, what):
        keys, values = [], []
        for k, v in opts.items():
            if k in ("exclude", "include"):
                continue
            if k not in allowed:
                raise SyntaxError(f"kiln.syntax: kiln.hint({k}=...) does not apply to {what}; "
                                  f"it takes {', '.join(sorted(allowed | {'exclude', 'include'}))}")
            keys.append(ast.Constant(k))
            values.append(v)
        return ast.Dict(keys=keys, values=values)

    def _assigned(self, stmts, opts):
        names = _stored(stmts)
        if "include" in opts:
            names += [n for n in _names_in(opts["include"]) if n not in names]
        return names

    def _def(self, name, params, body, ret):
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None,
                             kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        return _fndef(name, args, list(body) + [ast.Return(value=ret)])

    def _tuple(self, names, ctx):
        return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx()) for n in names], ctx=ctx())

    def _strs(self, names):
        return ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load())

    def _own(self, names):
        """The generated function's own variables `names` as it ends (``_UNSET`` where unbound)."""
        return ast.Call(func=self._helper("_grab"), args=[self._strs(names)], keywords=[])

    def _call_and_unpack(self, names, call):
        """``(a, b) = call`` then ``del`` each variable that came back unbound."""
        out = [ast.Assign(targets=[self._tuple(names, ast.Store)], value=call)]
        for n in names:
            out.append(ast.If(
                test=ast.Compare(left=ast.Name(id=n, ctx=ast.Load()), ops=[ast.Is()],
                                 comparators=[self._helper("_UNSET")]),
                body=[ast.Delete(targets=[ast.Name(id=n, ctx=ast.Del())])], orelse=[]))
        return out

    def _positions(self, names, chosen):
        return ast.Tuple(elts=[ast.Constant(i) for i, n in enumerate(names) if n in chosen],
                         ctx=ast.Load())

    def visit_While(self, node):
        self.generic_visit(node)
        test, opts = self._split_hint(node.test)
        if _is_scalar(opts) or node.orelse or _keep_as_written(node.body) or _test_keeps(test):
            node.test = test if _is_scalar(opts) else node.test
            return node
        k = next(self.count)
        written = self._assigned(node.body, opts)
        excluded = set(_names_in(opts["exclude"])) if "exclude" in opts else set()
        cond_reads = [n for n in _loaded(test) if n not in written]
        reads = cond_reads + [n for n in dict.fromkeys(_loaded_all(node.body))
                              if n not in written and n not in cond_reads]
        cond_name, body_name = f"__kiln_cond_{k}", f"__kiln_body_{k}"
        cond_fn = self._def(cond_name, written + reads, [], test)
        body_fn = self._def(body_name, written + reads, node.body, self._own(written + reads))
        call = ast.Call(func=self._helper("_while"),
                        args=[self._strs(written), self._strs(reads),
                              self._strs(sorted(self.declared_global)),
                              ast.Name(id=_CELLS, ctx=ast.Load()),
                              ast.Name(id=cond_name, ctx=ast.Load()),
                              ast.Name(id=body_name, ctx=ast.Load()),
                              self._opts(opts, _LOOP_OPTS, "a while loop"),
                              self._positions(written, excluded),
                              self._positions(written, _mutated(node.body)),
                              ast.Constant(len(cond_reads))],
                        keywords=[])
        unpack = self._call_and_unpack(written, call) if written else [ast.Expr(value=call)]
        return _located([cond_fn, body_fn] + unpack, node.test)

    def visit_If(self, node):
        self.generic_visit(node)
        test, opts = self._split_hint(node.test)
        if _is_scalar(opts) or _keep_as_written(node.body) or _keep_as_written(node.orelse):
            node.test = test if _is_scalar(opts) else node.test
            return node
        k = next(self.count)
        stmts = node.body + node.orelse
        names = self._assigned(stmts, opts)
        if "exclude" in opts:
            drop = set(_names_in(opts["exclude"]))
            names = [n for n in names if n not in drop]
        reads = list(dict.fromkeys(n for n in _loaded_all(stmts)
                                   if n not in names and not _generated(n)))
        t_name, f_name = f"__kiln_true_{k}", f"__kiln_false_{k}"
        params = names + reads
        t_fn = self._def(t_name, params, node.body or [ast.Pass()], self._own(params))
        f_fn = self._def(f_name, params, node.orelse or [ast.Pass()], self._own(params))
        cond_var = f"__kiln_c_{k}"
        cond = ast.Assign(targets=[ast.Name(id=cond_var, ctx=ast.Store())], value=test)
        call = ast.Call(func=self._helper("_if"),
                        args=[self._strs(names), self._strs(reads),
                              self._strs(sorted(self.declared_global)),
                              ast.Name(id=_CELLS, ctx=ast.Load()),
                              ast.Name(id=cond_var, ctx=ast.Load()),
                              ast.Name(id=t_name, ctx=ast.Load()), ast.Name(id=f_name, ctx=ast.Load()),
                              self._opts(opts, _IF_OPTS, "an if statement"),
                              self._positions(names, _mutated(stmts))],
                        keywords=[])
        unpack = self._call_and_unpack(names, call) if names else [ast.Expr(value=call)]
        return _located([cond, t_fn, f_fn] + unpack, node.test)


def _located(nodes, at):
    """Give the generated nodes (those without a position) the position of the condition of
    the statement they replace, so that tracebacks point at its line (the whole statement's span
    would make a method call report its last line)."""
    for root in nodes:
        for n in ast.walk(root):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                ast.copy_location(n, at)
    return nodes


def _fndef(name, args, body):
    """A ``def`` node (``type_params`` only where this Python's AST has it)."""
    extra = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    return ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None,
                           **extra)


def _strip_decorators(fn_node):
    fn_node.decorator_list = []
    # defaults are the original function's objects (set below), not evaluated again
    fn_node.args.defaults = []
    fn_node.args.kw_defaults = [None] * len(fn_node.args.kwonlyargs)


def _resolver(f):
    """Whether a call's function expression is ``kiln.hint`` itself, by what its names mean in
    `f` (its globals, closure and the builtins): a function of the user's called ``hint`` is
    not one."""
    cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    missing = object()

    def value(expr):
        if isinstance(expr, ast.Name):
            if expr.id in cells:
                try:
                    return cells[expr.id].cell_contents
                except ValueError:
                    return missing
            if expr.id in f.__globals__:
                return f.__globals__[expr.id]
            return getattr(f.__globals__.get("__builtins__", {}), expr.id, missing) \
                if not isinstance(f.__globals__.get("__builtins__"), dict) \
                else f.__globals__["__builtins__"].get(expr.id, missing)
        if isinstance(expr, ast.Attribute):
            base = value(expr.value)
            return missing if base is missing else getattr(base, expr.attr, missing)
        return missing

    return lambda expr: value(expr) is hint


class _Mangler(ast.NodeTransformer):
    """Python's private-name mangling (``self.__v`` → ``self._A__v`` in class ``A``), which the
    compiler applies only to code written in the class body."""

    def __init__(self, cls):
        self.prefix = "_" + cls.lstrip("_")

    def _m(self, name):
        if (name.startswith("__") and not name.endswith("__") and self.prefix != "_"
                and not _generated(name)):
            return self.prefix + name
        return name

    def visit_Name(self, n):
        n.id = self._m(n.id)
        return n

    def visit_Attribute(self, n):
        self.generic_visit(n)
        n.attr = self._m(n.attr)
        return n

    def visit_arg(self, n):
        n.arg = self._m(n.arg)
        return n


def _class_of(f):
    parts = f.__qualname__.split(".")
    if len(parts) >= 2 and parts[-2] != "<locals>":
        return parts[-2]
    return None


def _parse(f):
    """The function's ``def`` node and the line offset to its file, parsed without changing a
    character of it (a method's body is parsed under ``if 1:``, not dedented: dedenting would
    change its multi-line strings)."""
    try:
        source = inspect.getsource(f)
        filename = inspect.getsourcefile(f) or "<kiln.syntax>"
    except (OSError, TypeError) as e:
        raise TypeError(
            f"kiln.syntax: the source of `{f.__qualname__}` is not available ({e}); functions "
            "typed at an interactive prompt or made with exec() cannot be rewritten: call "
            "kiln.while_loop / kiln.if_stmt directly"
        ) from None
    offset = f.__code__.co_firstlineno - 1
    if source[:1].isspace():
        tree = ast.parse("if 1:\n" + source)
        body = tree.body[0].body
        offset -= 1
    else:
        tree = ast.parse(source)
        body = tree.body
    fn_node = body[0]
    if not isinstance(fn_node, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn_node.name != f.__name__:
        raise TypeError(f"kiln.syntax: cannot find the definition of `{f.__qualname__}` in its source")
    return fn_node, filename, offset


def _declared(fn_node, kind):
    return {name for n in _walk_local(ast.Module(body=fn_node.body, type_ignores=[]))
            if isinstance(n, kind) for name in n.names}


def syntax(f=None, *, recursive=False, print_ast=False, print_code=False):
    """Rewrite the ``while`` loops and ``if`` statements of ``f`` so that kiln arrays in their
    conditions trace them into kernels (Dr.Jit's ``@dr.syntax``; see this module's text for the
    rules). ``print_code=True`` prints the rewritten function.

    >>> import kiln
    >>> @kiln.syntax
    ... def collatz_steps(n):
    ...     steps = kiln.zeros(kiln.UInt32, len(n))
    ...     while n != 1:
    ...         if n % 2 == 0:
    ...             n = n // 2
    ...         else:
    ...             n = 3 * n + 1
    ...         steps += 1
    ...     return steps
    >>> collatz_steps(kiln.UInt32([1, 6, 27])).tolist()
    [0, 8, 111]
    """
    if f is None:
        return lambda g: syntax(g, recursive=recursive, print_ast=print_ast, print_code=print_code)
    if not isinstance(f, types.FunctionType):
        raise TypeError(f"kiln.syntax decorates functions, not a `{type(f).__name__}`")
    if getattr(f, "__kiln_syntax__", False):
        return f  # already rewritten
    if hasattr(f, "__wrapped__"):
        raise TypeError(
            f"kiln.syntax: `{f.__qualname__}` wraps another function (a decorator applied before "
            "this one); put @kiln.syntax directly above the `def`, below the other decorators"
        )
    fn_node, filename, offset = _parse(f)
    _strip_decorators(fn_node)
    declared_global = _declared(fn_node, ast.Global)
    fn_node = _Rewriter(recursive, _resolver(f), declared_global).visit(fn_node)
    cls = _class_of(f)
    if cls:
        fn_node = _Mangler(cls).visit(fn_node)
    # the factory's parameters become the new function's free variables: the helper module and
    # the original's closure variables (replaced by the original cells below)
    free = list(f.__code__.co_freevars)
    factory = _fndef(
        "__kiln_factory",
        ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in [_HELPER, _CELLS] + free],
                      vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        [fn_node, ast.Return(value=ast.Name(id=fn_node.name, ctx=ast.Load()))])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    # tracebacks inside the rewritten function point at the user's file and lines
    ast.increment_lineno(module, offset)
    if print_ast:
        print(ast.dump(fn_node, indent=2))
    if print_code:
        print(ast.unparse(fn_node))
    ns = {}
    exec(compile(module, filename, "exec"), f.__globals__, ns)
    me = sys.modules[__name__]
    original = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    made = ns["__kiln_factory"](me, original, *([None] * len(free)))
    cells = dict(original)
    cells[_HELPER] = types.CellType(me)
    cells[_CELLS] = types.CellType(original)
    code = made.__code__
    out = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__,
                             tuple(cells[n] for n in code.co_freevars))
    out.__kwdefaults__ = f.__kwdefaults__
    out.__dict__.update(f.__dict__)
    out.__doc__, out.__qualname__, out.__module__ = f.__doc__, f.__qualname__, f.__module__
    out.__annotations__ = f.__annotations__
    out.__wrapped__ = f
    out.__kiln_syntax__ = True
    return out
