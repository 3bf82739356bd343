"""``@kiln.syntax``: Dr.Jit's ``@dr.syntax``, Python ``while`` loops and ``if`` statements on kiln
arrays written as plain Python.

The decorator rewrites the function's source once, at decoration: every ``while cond: body``
becomes a call of ``kiln.while_loop`` and every ``if cond: a else: b`` a call of
``kiln.if_stmt``, with the variables the statement assigns as the loop state (or the branches'
results). What runs is decided per call, by the condition's value:

- a kiln array (``i < n`` on a ``UInt32``): the loop or branch is traced into the kernel, lane by
  lane, in the mode ``kiln.hint(cond, mode=...)`` names (symbolic by default);
- anything else (a Python ``bool``, ``x is None``): the plain Python statement, exactly as if the
  function had not been decorated.

``kiln.hint(cond, mode='scalar')`` keeps a statement as written. ``kiln.hint`` also passes
``max_iterations``, ``label``, ``compress`` and ``strict`` to the loop, and ``exclude=[v]`` /
``include=[v]`` take variables out of (or into) the state.

Statements are left as written, not rewritten, where a kernel could not run them: a ``return``,
``yield``, ``break`` or ``continue`` inside (an ``if`` or ``while`` on an array there raises
kiln's usual "ambiguous truth value" error when it runs), and ``while ... else``. Nested
functions are not rewritten unless ``recursive=True``. Variables first assigned inside a traced
loop are the body's temporaries: after the loop they are unbound, as in Dr.Jit. A variable
assigned in only one branch of a traced ``if`` is an error (a lane that took the other branch
would have no value).

How kiln differs from Dr.Jit: the rewritten function closes over the same variables (the cells
are shared, not copied), and the decision between traced and plain Python is made when the
statement runs rather than from the code's shape, so functions that branch on Python values
need no ``mode='scalar'`` hints.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
import textwrap
import types

from . import _kiln as _k
from . import _vectors as _v

__all__ = ["syntax", "hint"]


def hint(value, **kwargs):
    """Options for the ``while`` loop or ``if`` statement whose condition this wraps, read by
    ``@kiln.syntax`` (``mode``, ``max_iterations``, ``label``, ``compress``, ``strict``,
    ``exclude``, ``include``); at run time it is ``value`` itself."""
    return value


class _Unset:
    """A variable that was not bound when a rewritten statement started."""

    def __repr__(self):
        return "<unbound>"


_UNSET = _Unset()
# what a branch returns for an unbound variable: a plain value kiln's branches can compare
_UNSET_TOKEN = "<kiln.syntax: unbound variable>"


def _is_traced(cond):
    return isinstance(cond, (_k.ArrayBase, _k.TensorBase))


def _mask_of(cond):
    if isinstance(cond, _k.TensorBase):
        return cond.array
    return cond


def _grab(frame_locals, names):
    return tuple(frame_locals.get(n, _UNSET) for n in names)


def _spread(base, live, values):
    """All variables' values: the live ones' from `values`, the rest as in `base` (unbound, or
    a value the loop does not carry)."""
    out = list(base)
    for i, v in zip(live, values):
        out[i] = v
    return out


def _traceable(v):
    return isinstance(v, (_k.ArrayBase, _k.TensorBase, _v.StaticArrayBase))


def _while(names, values, cond, body, opts, read_only=0):
    """Run a rewritten ``while``: a Python loop for a Python condition, else ``kiln.while_loop``
    over the variables bound at the start (the others are the body's temporaries). The last
    `read_only` names are read by the condition only: state when they hold kiln values (their
    width is the loop's, as in Dr.Jit), not otherwise (functions, modes, Python numbers)."""
    first = cond(*values)
    if not _is_traced(first):
        while first:
            values = body(*values)
            first = cond(*values)
        return tuple(values)[: len(names) - read_only]
    n_written = len(names) - read_only
    live = [i for i, v in enumerate(values)
            if v is not _UNSET and (i < n_written or _traceable(v))]

    def cond_s(*s):
        return _mask_of(cond(*_spread(values, live, s)))

    def body_s(*s):
        r = body(*_spread(values, live, s))
        return tuple(r[i] for i in live)

    state = tuple(values[i] for i in live)
    labels = tuple(names[i] for i in live)
    if not state:
        raise ValueError(
            "kiln.syntax: this while loop on a kiln array changes no variable that exists before "
            "it, so it could never end: assign the loop's counter before the loop"
        )
    out = _k.while_loop(state, cond_s, body_s, labels=labels, **opts)
    if not isinstance(out, tuple):
        out = (out,)
    return tuple(_spread(values, live, out))[:n_written]


def _if(names, values, cond, true_fn, false_fn, opts):
    """Run a rewritten ``if``: a Python ``if`` for a Python condition, else ``kiln.if_stmt``."""
    if not _is_traced(cond):
        return true_fn(*values) if cond else false_fn(*values)
    live = [i for i, v in enumerate(values) if v is not _UNSET]
    assigned = {}

    def branch(fn, which):
        def run(*s):
            r = fn(*_spread(values, live, s))
            unset = {names[i] for i, v in enumerate(r) if v is _UNSET}
            assigned[which] = unset
            other = assigned.get(not which)
            if other is not None and other != unset:
                name = sorted(other ^ unset)[0]
                raise ValueError(
                    f"kiln.syntax: variable '{name}' is assigned in only one branch of an `if` on "
                    "a kiln array, so the lanes that take the other branch would have no value: "
                    "assign it before the `if`, or in both branches"
                )
            return tuple(_UNSET_TOKEN if v is _UNSET else v for v in r)

        return run

    args = tuple(values[i] for i in live)
    out = _k.if_stmt(args, _mask_of(cond), branch(true_fn, True), branch(false_fn, False),
                     rv_labels=tuple(names), **opts)
    if not isinstance(out, tuple):
        out = (out,)
    return tuple(_UNSET if isinstance(v, str) and v == _UNSET_TOKEN else v for v in out)


# ---- the rewrite ----------------------------------------------------------------------------

_HELPER = "__kiln_syntax__"
_LOOP_OPTS = {"mode", "max_iterations", "label", "compress", "strict"}
_IF_OPTS = {"mode", "label", "strict"}


def _stored(stmts):
    """Names the statements assign (not inside nested functions, classes or comprehensions),
    in order of first appearance."""
    out = {}

    class V(ast.NodeVisitor):
        def visit_Name(self, n):
            if isinstance(n.ctx, (ast.Store, ast.Del)):
                out.setdefault(n.id, None)

        def visit_FunctionDef(self, n):
            out.setdefault(n.name, None)

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, n):
            out.setdefault(n.name, None)

        def visit_Lambda(self, n):
            pass

        def _comp(self, n):
            pass

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp

        def visit_NamedExpr(self, n):
            out.setdefault(n.target.id, None)
            self.visit(n.value)

        def visit_ExceptHandler(self, n):
            if n.name:
                out.setdefault(n.name, None)
            self.generic_visit(n)

        def visit_alias(self, n):
            out.setdefault((n.asname or n.name).split(".")[0], None)

    for s in stmts:
        V().visit(s)
    return list(out)


def _loaded(expr):
    """Names an expression reads (not inside lambdas or comprehensions), in order."""
    out = {}
    todo = [expr]
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.setdefault(n.id, None)
        if not isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(n))
    return [n for n in out if not n.startswith("__kiln_")]


def _escapes(stmts):
    """Whether control leaves the statements in a way a kernel cannot follow: ``return``,
    ``yield``, ``global``/``nonlocal``, or ``break``/``continue`` of an enclosing loop."""
    for s in stmts:
        for n in _walk_local(s):
            if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await,
                              ast.Global, ast.Nonlocal)):
                return True
        if _breaks(s):
            return True
    return False


def _walk_local(node):
    """``ast.walk`` that does not enter nested functions, lambdas or classes."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(c)


def _breaks(node):
    """A ``break``/``continue`` that leaves `node` (not one of a loop inside it)."""
    if isinstance(node, (ast.Break, ast.Continue)):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return False
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        # the loop's own body breaks out of it; its `else` belongs to the enclosing loop
        return any(_breaks(c) for c in node.orelse)
    return any(_breaks(c) for c in ast.iter_child_nodes(node))


def _split_hint(test):
    """``(condition, options)`` of a ``hint(cond, **opts)`` test (any ``x.hint`` or ``hint``)."""
    if (isinstance(test, ast.Call)
            and ((isinstance(test.func, ast.Attribute) and test.func.attr == "hint")
                 or (isinstance(test.func, ast.Name) and test.func.id == "hint"))
            and len(test.args) == 1):
        return test.args[0], {k.arg: k.value for k in test.keywords if k.arg}
    return test, {}


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
    def __init__(self, recursive):
        self.recursive = recursive
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

    def _helper(self, name):
        return ast.Attribute(value=ast.Name(id=_HELPER, ctx=ast.Load()), attr=name, ctx=ast.Load())

    def _opts(self, opts, allowed, what):
        kws = []
        for k, v in opts.items():
            if k in ("exclude", "include"):
                continue
            if k not in allowed:
                raise SyntaxError(f"kiln.syntax: kiln.hint({k}=...) does not apply to {what}; "
                                  f"it takes {', '.join(sorted(allowed | {'exclude', 'include'}))}")
            kws.append(ast.keyword(arg=k, value=v))
        return ast.Dict(keys=[ast.Constant(k.arg) for k in kws], values=[k.value for k in kws])

    def _state(self, stmts, opts, extra=()):
        names = [n for n in _stored(stmts) if not n.startswith("__kiln_")]
        for n in extra:
            if n not in names:
                names.append(n)
        if "include" in opts:
            names += [n for n in _names_in(opts["include"]) if n not in names]
        if "exclude" in opts:
            drop = set(_names_in(opts["exclude"]))
            names = [n for n in names if n not in drop]
        return names

    def _def(self, name, params, body, ret):
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None,
                             kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        return _fndef(name, args, list(body) + [ast.Return(value=ret)])

    def _tuple(self, names, ctx):
        return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx()) for n in names], ctx=ctx())

    def _call_and_unpack(self, names, call):
        """``(a, b) = call`` then ``del`` each variable that came back unbound."""
        out = [ast.Assign(targets=[self._tuple(names, ast.Store)], value=call)]
        for n in names:
            out.append(ast.If(
                test=ast.Compare(left=ast.Name(id=n, ctx=ast.Load()), ops=[ast.Is()],
                                 comparators=[self._helper("_UNSET")]),
                body=[ast.Delete(targets=[ast.Name(id=n, ctx=ast.Del())])], orelse=[]))
        return out

    def _values(self, names):
        return ast.Call(func=self._helper("_grab"),
                        args=[ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
                              ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load())],
                        keywords=[])

    def visit_While(self, node):
        self.generic_visit(node)
        test, opts = _split_hint(node.test)
        if _is_scalar(opts) or node.orelse or _escapes(node.body):
            node.test = test if _is_scalar(opts) else node.test
            return node
        k = next(self.count)
        names = self._state(node.body, opts)
        drop = set(_names_in(opts["exclude"])) if "exclude" in opts else set()
        read = [n for n in _loaded(test) if n not in names and n not in drop]
        written = list(names)
        names = written + read
        cond_name, body_name = f"__kiln_cond_{k}", f"__kiln_body_{k}"
        cond_fn = self._def(cond_name, names, [], test)
        body_fn = self._def(body_name, names, node.body, self._tuple(names, ast.Load))
        # the written variables as bound (or not) now; the condition's other variables as it
        # reads them
        values = ast.BinOp(left=self._values(written), op=ast.Add(),
                           right=self._tuple(read, ast.Load))
        call = ast.Call(func=self._helper("_while"),
                        args=[ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load()),
                              values, ast.Name(id=cond_name, ctx=ast.Load()),
                              ast.Name(id=body_name, ctx=ast.Load()),
                              self._opts(opts, _LOOP_OPTS, "a while loop"),
                              ast.Constant(len(read))],
                        keywords=[])
        if not written:
            unpack = [ast.Expr(value=call)]
        else:
            unpack = self._call_and_unpack(written, call)
        return [cond_fn, body_fn] + unpack

    def visit_If(self, node):
        self.generic_visit(node)
        test, opts = _split_hint(node.test)
        if _is_scalar(opts) or _escapes(node.body) or _escapes(node.orelse):
            node.test = test if _is_scalar(opts) else node.test
            return node
        k = next(self.count)
        names = self._state(node.body + node.orelse, opts)
        t_name, f_name = f"__kiln_true_{k}", f"__kiln_false_{k}"
        ret = self._tuple(names, ast.Load)
        t_fn = self._def(t_name, names, node.body or [ast.Pass()], ret)
        f_fn = self._def(f_name, names, node.orelse or [ast.Pass()], ret)
        cond_var = f"__kiln_c_{k}"
        cond = ast.Assign(targets=[ast.Name(id=cond_var, ctx=ast.Store())], value=test)
        call = ast.Call(func=self._helper("_if"),
                        args=[ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load()),
                              self._values(names), ast.Name(id=cond_var, ctx=ast.Load()),
                              ast.Name(id=t_name, ctx=ast.Load()), ast.Name(id=f_name, ctx=ast.Load()),
                              self._opts(opts, _IF_OPTS, "an if statement")],
                        keywords=[])
        if not names:
            unpack = [ast.Expr(value=call)]
        else:
            unpack = self._call_and_unpack(names, call)
        return [cond, t_fn, f_fn] + unpack


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
    try:
        source = textwrap.dedent(inspect.getsource(f))
        filename = inspect.getsourcefile(f) or "<kiln.syntax>"
    except (OSError, TypeError) as e:
        raise TypeError(
            f"kiln.syntax: the source of `{f.__qualname__}` is not available ({e}); functions "
            "typed at an interactive prompt or made with exec() cannot be rewritten: call "
            "kiln.while_loop / kiln.if_stmt directly"
        ) from None
    tree = ast.parse(source)
    fn_node = tree.body[0]
    if not isinstance(fn_node, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn_node.name != f.__name__:
        raise TypeError(f"kiln.syntax: cannot find the definition of `{f.__qualname__}` in its source")
    _strip_decorators(fn_node)
    fn_node = _Rewriter(recursive).visit(fn_node)
    # the factory's parameters become the new function's free variables: the helper module and
    # the original's closure variables (replaced by the original cells below)
    free = list(f.__code__.co_freevars)
    factory = _fndef(
        "__kiln_factory",
        ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in [_HELPER] + free],
                      vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        [fn_node, ast.Return(value=ast.Name(id=f.__name__, ctx=ast.Load()))])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    # line 1 of the source is the function's first line (its first decorator's): tracebacks
    # inside the rewritten function point at the user's file
    ast.increment_lineno(module, f.__code__.co_firstlineno - 1)
    if print_ast:
        print(ast.dump(fn_node, indent=2))
    if print_code:
        print(ast.unparse(fn_node))
    ns = {}
    exec(compile(module, filename, "exec"), f.__globals__, ns)
    me = sys.modules[__name__]
    made = ns["__kiln_factory"](me, *([None] * len(free)))
    cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    cells[_HELPER] = types.CellType(me)
    code = made.__code__
    out = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__,
                             tuple(cells[n] for n in code.co_freevars))
    out.__kwdefaults__ = f.__kwdefaults__
    out.__dict__.update(f.__dict__)
    out.__doc__, out.__qualname__, out.__module__ = f.__doc__, f.__qualname__, f.__module__
    out.__annotations__ = f.__annotations__
    out.__wrapped__ = f
    return out
