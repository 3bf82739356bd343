"""Gradient-based optimizers with Dr.Jit's interface (``drjit.opt``): :class:`SGD` (with
momentum and Nesterov's variant), :class:`RMSProp` and :class:`Adam` (with UniformAdam's
``uniform=True``), each a dictionary of named parameters::

    opt = kiln.opt.Adam(lr=1e-2)
    opt["x"] = kiln.Float32(1, 2, 3)     # registered as a copy, with gradients enabled
    for _ in range(100):
        loss = kiln.sum(kiln.square(opt["x"] - 4.0))
        kiln.backward(loss)
        opt.step()                       # one evaluation for every parameter

What kiln keeps per parameter (the value, its effective learning rate, the moments and Adam's
powers of the betas) is arrays, and the optimizer is a struct kiln's freezing traverses, so
``opt`` can be passed to a :func:`kiln.freeze` function that calls ``opt.step()`` inside: the
step replays with the current learning rate and step count, without recording again when
``set_learning_rate`` changes the rate (a schedule) or as Adam's step count grows. Changing a
hyper-parameter (``opt.beta_1 = ...``) records again.

Where kiln differs from Dr.Jit:

- ``step()`` and assigning to a registered name write the new values into the parameter arrays
  the optimizer owns (as PyTorch's optimizers do), so an array fetched with ``opt["x"]`` before
  the step shows the new value after it: copy it (``kiln.detach(x)``) to keep the old one.
  Frozen and plain calls behave alike this way.
- Adam's debiasing factors are computed in the parameter's precision from powers of the betas
  kept as arrays (Dr.Jit keeps the step count as a Python integer), so a frozen training step
  records once, not twice.
- Register and reshape parameters outside a frozen function; inside, only ``opt[k]``,
  ``opt[k] = v`` with the same shape, and ``step()``.
"""

import numbers
from collections.abc import Mapping, MutableMapping

import kiln
from . import _kiln

try:
    from numpy import bool_ as _np_bool  # (refused by name: a flag, never a rate)
except ImportError:  # NumPy is optional

    class _np_bool:  # noqa: N801 (stands in for the missing type)
        pass


__all__ = ["Optimizer", "SGD", "RMSProp", "Adam"]


def _leaves(value):
    """The float arrays and tensors a parameter is made of (a vector: its components)."""
    if isinstance(value, (_kiln.ArrayBase, _kiln.TensorBase)):
        return [value]
    fields = getattr(type(value), "DRJIT_STRUCT", None)
    if fields is None:
        raise TypeError(f"kiln.opt: cannot optimize a {type(value).__name__}")
    out = []
    for name in fields:
        out += _leaves(getattr(value, name))
    return out


def _flat(leaf):
    """The flat array of a leaf (a tensor's values)."""
    return leaf.array if isinstance(leaf, _kiln.TensorBase) else leaf


def _put(leaf, flat):
    """Write the flat values ``flat`` into ``leaf`` in place (a tensor keeps its shape)."""
    if isinstance(leaf, _kiln.TensorBase):
        flat = type(leaf)(flat, leaf.shape)
    _kiln._assign(leaf, flat)


def _zeros_like(leaf):
    flat = _flat(leaf)
    return kiln.opaque(type(flat), 0, kiln.width(flat))


def _check_rate(lr, what):
    if isinstance(lr, (bool, _np_bool)) or not isinstance(lr, (numbers.Real, _kiln.ArrayBase)):
        raise TypeError(f"kiln.opt: {what} must be a number or a one-element float array, not a "
                        f"{type(lr).__name__}")
    if isinstance(lr, numbers.Real) and not isinstance(lr, (int, float)):
        lr = float(lr)  # a NumPy scalar (np.float32(0.1)): its value as a Python float
    if isinstance(lr, _kiln.ArrayBase):
        if kiln.width(lr) != 1 or not kiln.is_float_v(lr):
            raise kiln.InvalidArgument(f"kiln.opt: {what} given as an array must be one float "
                                       f"element, not {kiln.width(lr)} of {type(lr).__name__}")
    elif not lr >= 0:
        raise kiln.InvalidArgument(f"kiln.opt: {what} must be >= 0, not {lr}")
    return lr


class _Entry:
    """One parameter: its value (owned by the optimizer), its effective learning rate as a
    one-element array of the value's type (so a new rate is new data, not a new recording),
    its moments (a list per leaf) and Adam's powers of the betas. ``lr`` is the rate set for
    this parameter alone (None: the optimizer's)."""

    DRJIT_STRUCT = {"value": object, "rate": object, "moments": list, "powers": list}

    def __init__(self, value, rate, moments, powers):
        self.value, self.rate, self.moments, self.powers = value, rate, moments, powers
        self.lr = None


class Optimizer(MutableMapping):
    """What the optimizers share: a dictionary of named parameters the optimizer owns, a
    learning rate (global, or per parameter: ``set_learning_rate``) and ``step()``.

    ``mask_updates=True`` leaves a parameter's components whose gradient is exactly zero as
    they were, moments included (for Monte Carlo gradients that see few components per step).
    """

    def __init__(self, lr, params=None, *, mask_updates=False):
        self.lr = _check_rate(lr, "the learning rate")
        self.mask_updates = bool(mask_updates)
        self._entries = {}
        if params:
            self.update(params)

    # -- the dictionary ----------------------------------------------------------------------
    def __contains__(self, key):
        return key in self._entries

    def __getitem__(self, key):
        """The parameter's current value (gradients enabled): compute the loss from it."""
        return self._entry(key).value

    def __setitem__(self, key, value):
        """Register ``value`` under ``key`` (as a detached copy with gradients enabled), or give
        a registered parameter a new value: the optimizer's state (moments) is kept when the
        shape is the same and reset when it differs."""
        if not isinstance(key, str):
            raise TypeError(f"kiln.opt: parameter names are strings, not {type(key).__name__}")
        try:
            leaves = _leaves(value)
        except TypeError:
            leaves = []
        if not leaves or not all(kiln.is_float_v(l) for l in leaves):
            raise TypeError(
                f'kiln.opt: parameter "{key}" is a {type(value).__name__}; an optimizer takes '
                "floating-point arrays, tensors or vectors (convert it, e.g. kiln.Float32(x))")
        if kiln.width(_flat(leaves[0])) == 0:
            raise kiln.InvalidArgument(f'kiln.opt: parameter "{key}" is empty: give it at least '
                                       "one element")
        copy = kiln.detach(value)
        kiln.make_opaque(copy)
        old = self._entries.get(key)
        if old is not None and _same_layout(old.value, copy):
            for dst, src in zip(_leaves(old.value), _leaves(copy)):
                _kiln._assign(dst, src)
            kiln.enable_grad(old.value)
            return
        kiln.enable_grad(copy)
        entry = _Entry(copy, None, [], [])
        if old is not None:
            entry.lr = old.lr
        entry.rate = kiln.opaque(type(_flat(leaves[0])), 0.0)
        self._entries[key] = entry
        self._reset(entry)
        self._set_rate(entry)

    def __delitem__(self, key):
        del self._entries[key]

    def __len__(self):
        return len(self._entries)

    def __iter__(self):
        return iter(list(self._entries))

    def keys(self):
        return list(self._entries)

    def values(self):
        return [e.value for e in self._entries.values()]

    def items(self):
        return [(k, e.value) for k, e in self._entries.items()]

    def update(self, params=None, **kwargs):
        """Assign several parameters (a mapping and/or keywords), as ``dict.update`` does."""
        if params:
            for k, v in (params.items() if isinstance(params, Mapping) else params):
                self[k] = v
        for k, v in kwargs.items():
            self[k] = v

    # -- learning rates ----------------------------------------------------------------------
    def learning_rate(self, key=None):
        """The global learning rate, or the one set for parameter ``key`` (None if it has none)."""
        return self.lr if key is None else self._entry(key).lr

    def set_learning_rate(self, value=None, /, **kwargs):
        """Set the global rate (a number), or per parameter (a mapping or keywords: name ->
        rate; ``None`` returns a parameter to the global rate). A per-parameter rate wins over
        the global one. The new rate is data: frozen steps replay with it."""
        if isinstance(value, Mapping):
            kwargs = {**value, **kwargs}
        elif value is not None:
            self.lr = _check_rate(value, "the learning rate")
            for e in self._entries.values():
                self._set_rate(e)
        for k, lr in kwargs.items():
            e = self._entry(k)
            e.lr = None if lr is None else _check_rate(lr, f'the learning rate of "{k}"')
            self._set_rate(e)

    def reset(self, key=None):
        """Forget the state (moments, step count) of parameter ``key``, or of all of them."""
        for e in ([self._entry(key)] if key is not None else self._entries.values()):
            self._reset(e)

    # -- the step ----------------------------------------------------------------------------
    def step(self, *, eval=True, grad_scale=None, active=None):
        """Take one step for every parameter from its gradient, and give each a fresh
        gradient. ``grad_scale`` multiplies the gradients (a number or a one-element array);
        ``active``, a one-element ``Bool``, skips the step where False; ``eval=False`` leaves the
        new state unevaluated so that it fuses with what follows."""
        if isinstance(active, bool):  # a Python bool: all or nothing
            active = None if active else kiln.Bool(False)
        written = []
        for e in self._entries.values():
            leaves = _leaves(e.value)
            keep = None if active is None else ~active
            grads = [_flat(kiln.grad(leaf)) for leaf in leaves]
            if grad_scale is not None:
                grads = [g * (type(g)(grad_scale) if isinstance(grad_scale, _kiln.ArrayBase) else grad_scale)
                         for g in grads]
            self._prepare(e, grads)
            for i, (leaf, g) in enumerate(zip(leaves, grads)):
                x = kiln.detach(_flat(leaf))
                moments = e.moments[i]
                new_x, new_m = self._update(e, x, g, moments)
                mask = keep
                if self.mask_updates:
                    mask = (g == 0) if mask is None else (mask | (g == 0))
                if mask is not None:
                    new_x = kiln.select(mask, x, new_x)
                    new_m = [kiln.select(mask, a, b) for a, b in zip(moments, new_m)]
                _put(leaf, new_x)
                for dst, src in zip(moments, new_m):
                    _kiln._assign(dst, src)
                written += [leaf, *moments]
            new_p = self._advance(e)
            if keep is not None:
                new_p = [kiln.select(keep, a, b) for a, b in zip(e.powers, new_p)]
            for dst, src in zip(e.powers, new_p):
                _kiln._assign(dst, src)
            written += e.powers
            kiln.enable_grad(e.value)
        self.__dict__.pop("_vmax", None)  # (a step's scratch: no array outlives the step)
        if eval and written:
            kiln.eval(*written)

    # -- what an optimizer provides ------------------------------------------------------------
    def _prepare(self, entry, grads):
        """Work over all of a parameter's leaves before the per-leaf updates (UniformAdam's
        largest second moment)."""

    def _update(self, entry, x, g, moments):
        """The new flat value and moments of one leaf."""
        raise NotImplementedError

    def _moments(self):
        """How many moment arrays a leaf has."""
        return 0

    def _advance(self, entry):
        """The new powers (Adam's beta^t) after a step."""
        return []

    def _initial_powers(self, tp):
        return []

    # -- helpers -------------------------------------------------------------------------------
    def _entry(self, key):
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f'kiln.opt: no parameter named "{key}" (registered: '
                           f"{sorted(self._entries)}); assign it first: opt[{key!r}] = value") from None

    def _reset(self, e):
        leaves = _leaves(e.value)
        e.moments = [[_zeros_like(l) for _ in range(self._moments())] for l in leaves]
        e.powers = self._initial_powers(type(_flat(leaves[0])))

    def _set_rate(self, e):
        lr = e.lr if e.lr is not None else self.lr
        tp = type(e.rate)
        new = tp(lr) if isinstance(lr, _kiln.ArrayBase) else kiln.opaque(tp, float(lr))
        kiln.make_opaque(new)
        _kiln._assign(e.rate, new)

    def _describe(self, extra):
        rates = {"default": self.lr, **{k: e.lr for k, e in self._entries.items() if e.lr is not None}}
        count = sum(kiln.width(_flat(l)) for e in self._entries.values() for l in _leaves(e.value))
        return (f"{type(self).__name__}[\n  parameters = {list(self._entries)},\n"
                f"  total_count = {count},\n  lr = {rates},\n{extra}]")


def _same_layout(a, b):
    la, lb = _leaves(a), _leaves(b)
    return (type(a) is type(b) and len(la) == len(lb)
            and all(type(x) is type(y) and kiln.shape(x) == kiln.shape(y) for x, y in zip(la, lb)))


def _check(cond, what):
    if not cond:
        raise kiln.InvalidArgument(f"kiln.opt: {what}")


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum (PyTorch's ``torch.optim.SGD``
    rule): ``v = momentum * v + g``; ``x -= lr * v`` (Nesterov: ``x -= lr * (g + momentum * v)``)."""

    DRJIT_STRUCT = {"_entries": dict, "momentum": float, "nesterov": bool, "mask_updates": bool}

    def __init__(self, lr, params=None, *, momentum=0.0, nesterov=False, mask_updates=False):
        _check(momentum >= 0, f"momentum must be >= 0, not {momentum}")
        _check(not nesterov or momentum > 0, "Nesterov's variant needs momentum > 0")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        super().__init__(lr, params, mask_updates=mask_updates)

    def _moments(self):
        return 1 if self.momentum > 0 else 0

    def _update(self, e, x, g, moments):
        if self.momentum == 0:
            return x - e.rate * g, []
        v = moments[0] * self.momentum + g
        step = g + v * self.momentum if self.nesterov else v
        return x - e.rate * step, [v]

    def __repr__(self):
        return self._describe(f"  momentum = {self.momentum:g},\n  nesterov = {self.nesterov}\n")


class RMSProp(Optimizer):
    """RMSProp (Hinton's lecture notes; PyTorch's ``torch.optim.RMSprop`` rule):
    ``m = alpha * m + (1 - alpha) * g^2``; ``x -= lr * g / (sqrt(m) + epsilon)``."""

    DRJIT_STRUCT = {"_entries": dict, "alpha": float, "epsilon": float, "mask_updates": bool}

    def __init__(self, lr, params=None, *, alpha=0.99, epsilon=1e-8, mask_updates=False):
        _check(0 <= alpha < 1, f"alpha must be in [0, 1), not {alpha}")
        _check(epsilon >= 0, f"epsilon must be >= 0, not {epsilon}")
        self.alpha, self.epsilon = float(alpha), float(epsilon)
        super().__init__(lr, params, mask_updates=mask_updates)

    def _moments(self):
        return 1

    def _update(self, e, x, g, moments):
        m = moments[0] * self.alpha + g * g * (1.0 - self.alpha)
        return x - e.rate * g / (kiln.sqrt(m) + self.epsilon), [m]

    def __repr__(self):
        return self._describe(f"  alpha = {self.alpha:g},\n  epsilon = {self.epsilon:g}\n")


class Adam(Optimizer):
    """Adam (Kingma and Ba, 2015): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``x -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)``. ``uniform=True`` is
    UniformAdam (Nicolet et al. 2021): the largest second moment of the parameter scales every
    component."""

    DRJIT_STRUCT = {"_entries": dict, "beta_1": float, "beta_2": float, "epsilon": float,
                    "uniform": bool, "mask_updates": bool}

    def __init__(self, lr, params=None, *, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 mask_updates=False, uniform=False):
        _check(0 <= beta_1 < 1, f"beta_1 must be in [0, 1), not {beta_1}")
        _check(0 <= beta_2 < 1, f"beta_2 must be in [0, 1), not {beta_2}")
        _check(epsilon >= 0, f"epsilon must be >= 0, not {epsilon}")
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        self.epsilon, self.uniform = float(epsilon), bool(uniform)
        super().__init__(lr, params, mask_updates=mask_updates)

    def _moments(self):
        return 2

    def _initial_powers(self, tp):
        return [kiln.opaque(tp, 1.0), kiln.opaque(tp, 1.0)]

    def _advance(self, e):
        return [e.powers[0] * self.beta_1, e.powers[1] * self.beta_2]

    def _second(self, v, g):
        return v * self.beta_2 + g * g * (1.0 - self.beta_2)

    def _prepare(self, e, grads):
        # UniformAdam: the largest second moment over the whole parameter (every component of
        # a vector, every element of a tensor)
        self._vmax = None
        if self.uniform:
            for (m, v), g in zip(e.moments, grads):
                top = kiln.max(self._second(v, g))
                self._vmax = top if self._vmax is None else kiln.maximum(self._vmax, top)

    def _update(self, e, x, g, moments):
        m = moments[0] * self.beta_1 + g * (1.0 - self.beta_1)
        v = self._second(moments[1], g)
        p1, p2 = self._advance(e)
        scale = e.rate * kiln.sqrt(1.0 - p2) / (1.0 - p1)
        vs = self._vmax if self.uniform else v
        return x - scale * m / (kiln.sqrt(vs) + self.epsilon), [m, v]

    def __repr__(self):
        return self._describe(f"  beta = ({self.beta_1:g}, {self.beta_2:g}),\n"
                              f"  epsilon = {self.epsilon:g}\n")
