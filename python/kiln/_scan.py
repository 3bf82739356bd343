"""Scans with PyTensor's and JAX's faces, over kiln's own scan (its rewrites and its gradient
scan apply). This module flattens nested arguments and PyTensor's tap dictionaries into the flat
lists the native primitives ``scan_pt`` and ``scan_lax`` take, and puts results back in shape.

Where kiln differs: values come back as kiln tensors (``TensorXf``...); a body must return the same
types and shapes at every step; PyTensor's ``updates`` (shared-variable updates) are not supported
(carry such values as outputs instead); ``mode`` is kiln's ('fused', 'stepped' or None), not a
PyTensor compilation mode.
"""

from types import SimpleNamespace

from . import _kiln

__all__ = ["scan", "until", "lax"]


class until:
    """Stop the scan after the step where ``condition`` holds (PyTensor's ``until``): return it
    from the step function beside the outputs, ``return out, until(cond)``."""

    def __init__(self, condition):
        self.condition = condition


def _as_list(x):
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _sequence(entry):
    if isinstance(entry, dict):
        if "input" not in entry:
            raise _kiln.InvalidArgument("a sequence given as a dict needs 'input' (and optionally 'taps')")
        taps = entry.get("taps", [0])
        return entry["input"], [0] if taps is None else list(taps)
    return entry, [0]


def _output(entry):
    if entry is None:
        return None, []
    if isinstance(entry, dict):
        init = entry.get("initial")
        taps = entry.get("taps", [-1])
        if init is None or taps is None:
            return None, []
        taps = list(taps)
        need = max(-t for t in taps)
        if need > 1 or taps != [-1]:
            # PyTensor takes the leading rows of a longer initial value
            if not isinstance(init, _kiln.TensorBase):
                init = _kiln.TensorXf64(init)
            if init.ndim and init.shape[0] > need:
                init = init[:need]
        return init, taps
    return entry, [-1]


def _split_return(ret):
    """PyTensor's step results: outputs, optionally with an updates dict and an ``until``."""
    cond = None
    if isinstance(ret, until):
        return [], ret.condition
    if isinstance(ret, tuple) and ret and isinstance(ret[-1], until):
        cond = ret[-1].condition
        ret = ret[:-1]
        if len(ret) == 1:
            ret = ret[0]
    if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[1], dict):
        if ret[1]:
            raise _kiln.InvalidArgument(
                "kiln's scan does not apply PyTensor `updates` (shared variables): carry those values as outputs"
            )
        ret = ret[0]
    if isinstance(ret, dict):
        if ret:
            raise _kiln.InvalidArgument("kiln's scan does not apply PyTensor `updates`: carry those values as outputs")
        return [], cond
    return _as_list(ret), cond


def scan(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None, truncate_gradient=-1,
         go_backwards=False, mode=None, name=None, profile=False, allow_gc=None, strict=False,
         return_list=False):
    """PyTensor's ``scan``: ``fn`` gets, in order, each sequence at each of its taps, each output
    at each of its taps, then the non-sequences, and returns the step's outputs (and optionally
    ``until(cond)``). Sequences are ``x`` (tap 0) or ``dict(input=x, taps=[...])``; outputs_info
    entries are ``None`` (an output that does not feed back), an initial value (tap -1) or
    ``dict(initial=x0, taps=[-2, -1])``. Returns ``(outputs, updates)`` like PyTensor: each output
    over the steps (``[n_steps, ...]``), a single tensor when there is one output unless
    ``return_list``, and an empty ``updates`` dict.
    """
    seqs = [_sequence(s) for s in _as_list(sequences)]
    outs_given = outputs_info is not None
    outs = [_output(o) for o in _as_list(outputs_info)]
    non_seqs = _as_list(non_sequences)
    n_declared = len(outs)

    def step(*args):
        got, cond = _split_return(fn(*args))
        if outs_given and len(got) != n_declared:
            raise _kiln.InvalidArgument(
                f"scan: the step returned {len(got)} output(s) but outputs_info describes {n_declared}"
            )
        return got, cond

    if not outs_given:
        # outputs_info omitted: every output is one that does not feed back; find how many
        outs = _probe_outputs(fn, seqs, non_seqs)
    results, _steps = _kiln._scan_pt(step, seqs, outs, non_seqs, n_steps=n_steps, go_backwards=go_backwards,
                                    truncate_gradient=truncate_gradient, strict=strict, mode=mode)
    if len(results) == 1 and not return_list:
        return results[0], {}
    return results, {}


def _probe_outputs(fn, seqs, non_seqs):
    """How many outputs ``fn`` has, by calling it once on the first step's values."""
    args = []
    for x, taps in seqs:
        t = _kiln.TensorXf64(x) if not isinstance(x, _kiln.TensorBase) else x
        if t.ndim == 0 or t.shape[0] == 0:
            raise _kiln.InvalidArgument(
                "scan without outputs_info over an empty sequence: kiln cannot tell what the step "
                "returns; pass outputs_info=[None, ...] (one None per output)"
            )
        for tap in taps:
            row = max(tap, 0) - min(taps)
            # a row as a tensor (a 1-D sequence's row is 0-d), as the scan gives the step
            args.append(t[row:row + 1].reshape(t.shape[1:]))
    args.extend(non_seqs)
    got, _ = _split_return(fn(*args))
    return [(None, []) for _ in got]


# ---- JAX's face --------------------------------------------------------------------------------


def _flatten(tree, leaves):
    if isinstance(tree, (tuple, list)):
        return (type(tree), [_flatten(t, leaves) for t in tree])
    if isinstance(tree, dict):
        keys = sorted(tree)
        return (dict, keys, [_flatten(tree[k], leaves) for k in keys])
    if tree is None:
        return (None,)
    leaves.append(tree)
    return ("leaf",)


def _unflatten(spec, leaves):
    kind = spec[0]
    if kind == "leaf":
        return next(leaves)
    if kind is None:
        return None
    if kind is dict:
        return {k: _unflatten(s, leaves) for k, s in zip(spec[1], spec[2])}
    return kind(_unflatten(s, leaves) for s in spec[1])


def _lax_scan(f, init, xs=None, length=None, reverse=False, unroll=1, mode=None):
    """JAX's ``lax.scan``: ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs`` (any
    nesting of tuples, lists and dicts of tensors, or None with ``length``); returns the final
    carry and the ``y``s stacked on a new leading axis."""
    c_leaves, x_leaves = [], []
    c_spec = _flatten(init, c_leaves)
    x_spec = _flatten(xs, x_leaves)
    if not x_leaves and length is None:
        raise _kiln.InvalidArgument("lax.scan without xs needs length=")
    y_spec = []

    def body(cs, xv):
        carry = _unflatten(c_spec, iter(cs))
        x = _unflatten(x_spec, iter(xv))
        out = f(carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise _kiln.InvalidArgument("the lax.scan body returns a pair (carry, y)")
        new_c, y = out
        c2 = []
        if _flatten(new_c, c2) != c_spec:
            raise _kiln.InvalidArgument("the lax.scan body returned a carry of another structure than init")
        y_leaves = []
        spec = _flatten(y, y_leaves)
        if not y_spec:
            y_spec.append(spec)
        return c2, y_leaves

    c, ys = _kiln._scan_lax(body, c_leaves, x_leaves, length=length, reverse=reverse, unroll=unroll, mode=mode)
    carry = _unflatten(c_spec, iter(c))
    y = _unflatten(y_spec[0], iter(ys)) if y_spec else None
    return carry, y


lax = SimpleNamespace(scan=_lax_scan)
lax.__doc__ = "JAX's face: ``kiln.lax.scan(f, init, xs, length=None, reverse=False, unroll=1)``."
