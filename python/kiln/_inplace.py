"""Dr.Jit's in-place semantics for a loop's state: where the body hands back the very object it
was given (it changed it in place, ``x += 1`` or ``v.x = ...``, or left it alone), the loop's
final value goes into the caller's own object and the result holds that object; where the body
returned a new object (``x = x + 1``), the caller's object is left as it was.

kiln's native loop gives the body fresh objects (inside a trace they hold placeholders), so the
identity is observed here, per state entry and nested container, over every call of the body.

Only the state is written back. An array the body captures (not in the state) and changes in
place (``acc += x`` through a list or attribute) takes a value of the loop's trace, which cannot
be used after the loop: put such arrays in the state. One object at two places of the state is
written once per place, the last place winning.
"""

import dataclasses as _dc

from . import _kiln as _k


def _fields(o):
    s = getattr(type(o), "DRJIT_STRUCT", None)
    if isinstance(s, dict):
        return list(s)
    if _dc.is_dataclass(o) and not isinstance(o, type):
        return [f.name for f in _dc.fields(o)]
    return None


def identical(given, got):
    """Which parts of `got` are the very objects of `given` at the same place: True (all of
    it), False, or the same nesting of answers for a container the body rebuilt."""
    if got is given:
        return True
    if isinstance(given, (tuple, list)) and isinstance(got, (tuple, list)) and len(given) == len(got):
        return [identical(a, b) for a, b in zip(given, got)]
    if isinstance(given, dict) and isinstance(got, dict) and given.keys() == got.keys():
        return {k: identical(given[k], got[k]) for k in given}
    return False


def both(a, b):
    """Answers of two calls of the body combined: a part counts as the same object only if it
    was in both."""
    if a is None:
        return b
    if a is True:
        return b
    if b is True:
        return a
    if a is False or b is False:
        return False
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [both(x, y) for x, y in zip(a, b)]
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return {k: both(a[k], b[k]) for k in a}
    return False


def restore(orig, out, same):
    """`out` (the loop's result) with the parts `same` marks written into the caller's objects
    `orig`, which then stand in the result."""
    if same is False or same is None:
        return out
    if same is True:
        return _write_into(orig, out)
    if isinstance(same, list):
        parts = [restore(o, r, m) for o, r, m in zip(orig, out, same)]
        return tuple(parts) if isinstance(out, tuple) else type(out)(parts)
    if isinstance(same, dict):
        return type(out)({k: restore(orig[k], out[k], same[k]) for k in out})
    return out


def _write_into(orig, out):
    if orig is out:
        return orig
    if isinstance(orig, (_k.ArrayBase, _k.TensorBase)) and type(orig) is type(out):
        _k._assign(orig, out)
        return orig
    if isinstance(orig, list) and isinstance(out, (list, tuple)) and len(orig) == len(out):
        orig[:] = [_write_into(o, r) for o, r in zip(orig, out)]
        return orig
    if isinstance(orig, dict) and isinstance(out, dict) and orig.keys() == out.keys():
        for k in orig:
            orig[k] = _write_into(orig[k], out[k])
        return orig
    if isinstance(orig, tuple) and isinstance(out, tuple) and len(orig) == len(out):
        parts = [_write_into(o, r) for o, r in zip(orig, out)]
        return orig if all(p is o for p, o in zip(parts, orig)) else tuple(parts)
    names = _fields(orig)
    if names is not None and type(orig) is type(out):
        for n in names:
            object.__setattr__(orig, n, _write_into(getattr(orig, n), getattr(out, n)))
        return orig
    return out


def raising_from(where, role, f):
    """`f`, whose exceptions come out as a ``RuntimeError`` naming `where` and `role`, the
    original as its ``__cause__`` (Dr.Jit's rule for the functions its control flow calls back:
    ``except RuntimeError`` catches any of them, ``e.__cause__`` is what the function raised)."""

    def call(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except Exception as e:
            raise callback_error(where, role, e) from e

    return call


def callback_error(where, role, e):
    """The RuntimeError that `raising_from` raises from `e`."""
    return RuntimeError(
        f"kiln.{where}(): {role} raised {type(e).__name__}: {e} (the original exception is "
        "this one's __cause__)"
    )


def if_stmt(args, cond, true_fn, false_fn, arg_labels=None, rv_labels=None, label=None,
            mode=None, strict=True):
    return _k.if_stmt(args, cond, raising_from("if_stmt", "true_fn", true_fn),
                      raising_from("if_stmt", "false_fn", false_fn), arg_labels=arg_labels,
                      rv_labels=rv_labels, label=label, mode=mode, strict=strict)


if_stmt.__doc__ = (_k.if_stmt.__doc__ or "") + """

An exception raised by ``true_fn`` or ``false_fn`` comes out as a ``RuntimeError`` whose
``__cause__`` is that exception (as in Dr.Jit)."""


def switch(index, targets, *args, mode=None, label=None, **kwargs):
    wrapped = [raising_from("switch", f"target {i}", f) for i, f in enumerate(targets)]
    return _k.switch(index, wrapped, *args, mode=mode, label=label, **kwargs)


switch.__doc__ = (_k.switch.__doc__ or "") + """

An exception raised by a target comes out as a ``RuntimeError`` whose ``__cause__`` is that
exception (as in Dr.Jit)."""


def while_loop(state, cond, body, labels=None, label=None, mode=None, max_iterations=None,
               compress=None, strict=True):
    return loop_in_place(state, raising_from("while_loop", "the loop's cond", cond),
                         raising_from("while_loop", "the loop's body", body), labels=labels,
                         label=label, mode=mode, max_iterations=max_iterations,
                         compress=compress, strict=strict)


def loop_in_place(state, cond, body, **kwargs):
    """kiln's native loop under Dr.Jit's in-place rule (what ``while_loop`` runs once it has
    wrapped `cond` and `body` for their exceptions)."""
    tup = isinstance(state, tuple)
    seen = [None]

    def tracked(*args):
        r = body(*args)
        got = r if isinstance(r, tuple) else (r,)
        seen[0] = both(seen[0], identical(args, got))
        return r

    out = _k.while_loop(state, cond, tracked, **kwargs)
    if seen[0] is None:
        return out
    given = state if tup else (state,)
    got = out if isinstance(out, tuple) else (out,)
    res = restore(given, got, seen[0])
    return res if isinstance(out, tuple) else res[0]


while_loop.__doc__ = (_k.while_loop.__doc__ or "") + """

In place (Dr.Jit's rule): a state entry the body returns as the very object it was given (changed
with ``x += 1`` or ``s.field = ...``, or untouched) gets the loop's final value written into the
caller's object, which the result then holds; an entry the body replaced (``x = x + 1``) comes
back as a new object and the caller's stays as it was.

An exception raised by ``cond`` or ``body`` comes out as a ``RuntimeError`` whose ``__cause__`` is
that exception (as in Dr.Jit)."""
