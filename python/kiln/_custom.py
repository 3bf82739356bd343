"""Custom AD operations (Dr.Jit's ``dr.CustomOp`` and ``dr.custom``): a function whose
derivatives the user writes, over kiln's ``kiln::ad::CustomOp``.

``kiln.custom(Op, *args, **kwargs)`` makes an ``Op()``, runs ``Op.eval`` on detached copies of the
arguments with derivative recording off, and gives the result one node in the AD graph. A
backward pass calls ``Op.backward`` once, where ``self.grad_out()`` is the output's cotangent and
``self.set_grad_in(name, g)`` adds ``g`` to the gradient of ``eval``'s parameter ``name``; a
forward pass calls ``Op.forward``, where ``self.grad_in(name)`` is that parameter's tangent and
``self.set_grad_out(t)`` adds ``t`` to the output's tangent. Where kiln differs from Dr.Jit: every
array the op depends on differentiably must be an argument (``add_input``/``add_output`` raise,
naming this), and an op without ``forward`` makes forward mode through it an error.
"""

from __future__ import annotations

import inspect

from . import _kiln as _k
from . import _ad
from . import _vectors as _v


def _like(g, x):
    """``g`` in the structure of ``x``, each array of ``x``'s type (a number becomes one);
    zeros (one element) where ``g`` is ``None``; ``x``'s non-array parts as they are."""
    if isinstance(x, (_k.ArrayBase, _v.StaticArrayBase)):
        if g is None:
            g = 0
        return g if type(g) is type(x) else type(x)(g)
    if isinstance(x, _k.TensorBase):
        if g is None:
            return _v.zeros(type(x), x.shape)
        return g if type(g) is type(x) else type(x)(g)
    if isinstance(x, (list, tuple)):
        gs = [None] * len(x) if g is None else list(g)
        if len(gs) != len(x):
            raise _k.InvalidArgument(
                f"custom op: a gradient of {len(gs)} items for a value of {len(x)}; give one per item"
            )
        out = [_like(gi, xi) for gi, xi in zip(gs, x)]
        return tuple(out) if isinstance(x, tuple) else out
    if isinstance(x, dict):
        return {k: _like(None if g is None else g[k], v) for k, v in x.items()}
    names = _ad._fields(x)
    if names is not None:
        return _rebuilt(x, {n: _like(None if g is None else getattr(g, n), getattr(x, n))
                            for n in names})
    return x


def _rebuilt(x, fields):
    import copy

    out = copy.copy(x)
    for n, v in fields.items():
        object.__setattr__(out, n, v)
    return out


def _add(old, new):
    """``old + new`` over trees (``old`` may be ``None``)."""
    if old is None:
        return new
    if isinstance(old, (list, tuple)):
        return type(old)(_add(a, b) for a, b in zip(old, new))
    if isinstance(old, dict):
        return {k: _add(old[k], new[k]) for k in old}
    return old + new


class CustomOp:
    """Base class of an operation with hand-written derivatives (Dr.Jit's ``dr.CustomOp``);
    apply it with ``kiln.custom(Op, *args)``. Override ``eval`` (the primal, on detached
    arguments: store on ``self`` what the derivatives need), ``backward`` and, for forward mode,
    ``forward``; ``name`` names the op in messages."""

    def eval(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.eval: write the op's primal")

    def forward(self):
        raise NotImplementedError

    def backward(self):
        raise NotImplementedError(f"{type(self).__name__}.backward: write the op's reverse rule")

    def name(self):
        return type(self).__name__

    # ---- used inside forward() and backward() ----

    def grad_out(self):
        """The output's cotangent (inside ``backward``), in the structure ``eval`` returned."""
        return self._grad_out

    def set_grad_out(self, value):
        """Add ``value`` to the output's tangent (inside ``forward``)."""
        self._tangent_out = _add(self._tangent_out, value)

    def grad_in(self, name):
        """The tangent of ``eval``'s parameter ``name`` (inside ``forward``)."""
        if name not in self._tangent_in:
            raise _k.InvalidArgument(
                f"custom op {self.name()}: eval has no parameter {name!r} "
                f"(it has {', '.join(map(repr, self._tangent_in))})"
            )
        return self._tangent_in[name]

    def set_grad_in(self, name, value):
        """Add ``value`` to the gradient of ``eval``'s parameter ``name`` (inside ``backward``)."""
        if name not in self._names:
            raise _k.InvalidArgument(
                f"custom op {self.name()}: eval has no parameter {name!r} "
                f"(it has {', '.join(map(repr, self._names))})"
            )
        self._grad_in[name] = _add(self._grad_in.get(name), value)

    def add_input(self, value):
        raise _k.InvalidArgument(
            f"custom op {self.name()}: kiln has no add_input; pass the array as an argument of "
            "kiln.custom (and so of eval) to give it a gradient"
        )

    def add_output(self, value):
        raise _k.InvalidArgument(
            f"custom op {self.name()}: kiln has no add_output; return the array from eval instead"
        )


def custom(cls, *args, **kwargs):
    """Apply the custom operation ``cls`` (a ``CustomOp`` subclass) to the arguments (Dr.Jit's
    ``dr.custom``); returns what ``cls.eval`` returns, carrying gradients through the op's own
    derivatives. See ``CustomOp``."""
    op = cls()
    bound = inspect.signature(op.eval).bind(*args, **kwargs)
    names = list(bound.arguments)
    op._names = names

    def run(xs):
        for n, x in zip(names, xs):
            bound.arguments[n] = x
        return op.eval(*bound.args, **bound.kwargs)

    def backward(xs, ys, gys):
        op._grad_out, op._grad_in = gys, {}
        try:
            op.backward()
            return tuple(_like(op._grad_in.get(n), x) for n, x in zip(names, xs))
        finally:
            op._grad_out = op._grad_in = None

    def forward(xs, ys, txs):
        op._tangent_in, op._tangent_out = dict(zip(names, txs)), None
        try:
            op.forward()
            return _like(op._tangent_out, ys)
        finally:
            op._tangent_in = op._tangent_out = None

    has_forward = type(op).forward is not CustomOp.forward
    return _k.custom_apply(str(op.name()), run, backward, forward if has_forward else None,
                           tuple(bound.arguments.values()))


__all__ = ["CustomOp", "custom"]
