"""Dr.Jit's JIT flags that kiln honours: ``kiln.JitFlag``, ``kiln.set_flag``, ``kiln.flag`` and
``kiln.scoped_set_flag``. They are per thread (what a thread traces is its own).

- ``SymbolicLoops``, ``SymbolicConditionals``, ``SymbolicCalls`` (on by default): off, a
  ``while_loop`` / ``if_stmt`` / ``switch`` (and ``@kiln.syntax``'s) without a ``mode`` runs in
  evaluated mode.
- ``OptimizeLoops`` (on): off, a symbolic loop carries every state entry, including those its
  body never changes (kiln otherwise reads them as constants). The results are the same.

Dr.Jit's other flags (kernel history, call optimisations, debugging) have no counterpart in kiln
and are not accepted.
"""

import contextlib
import enum

from . import _kiln as _k


class JitFlag(enum.IntFlag):
    """The flags kiln honours (Dr.Jit's names)."""

    SymbolicLoops = 1 << 0
    SymbolicConditionals = 1 << 1
    SymbolicCalls = 1 << 2
    OptimizeLoops = 1 << 3


def _names(flags):
    flags = JitFlag(flags)
    return [f.name for f in JitFlag if f in flags]


def set_flag(flags, value):
    """Turn the flags on or off on this thread."""
    for n in _names(flags):
        _k._set_flag(n, bool(value))


def flag(flags):
    """Whether every one of the flags is on, on this thread."""
    return all(_k._flag(n) for n in _names(flags))


@contextlib.contextmanager
def scoped_set_flag(flags, value=True):
    """``with kiln.scoped_set_flag(kiln.JitFlag.SymbolicLoops, False):`` the flags take `value`
    inside the block and their previous values after it."""
    before = {n: _k._flag(n) for n in _names(flags)}
    try:
        for n in before:
            _k._set_flag(n, bool(value))
        yield
    finally:
        for n, v in before.items():
            _k._set_flag(n, v)


__all__ = ["JitFlag", "set_flag", "flag", "scoped_set_flag"]
