"""Dr.Jit's JIT flags that kiln honours: ``kiln.JitFlag``, ``kiln.set_flag``, ``kiln.flag`` and
``kiln.scoped_set_flag``. They are per thread (what a thread traces is its own).

- ``SymbolicLoops``, ``SymbolicConditionals``, ``SymbolicCalls`` (on by default): off, a
  ``while_loop`` / ``if_stmt`` / ``switch`` (and ``@kiln.syntax``'s) without a ``mode`` runs in
  evaluated mode.
- ``OptimizeLoops`` (on): off, a symbolic loop carries every state entry, including those its
  body never changes (kiln otherwise reads them as constants). The results are the same.
- ``KernelHistory`` (off): on, every kernel and device reduction the thread launches is kept
  until ``kiln.kernel_history()`` takes them.

- ``PacketOps`` and ``ReuseIndices`` (on) are accepted and kept per thread, and change nothing:
  in Dr.Jit they choose *how* (packet loads for gathers and scatters of n-vectors; whether freed
  variable indices are reused), never *what*. kiln gathers and scatters an n-vector as n accesses
  fused into one kernel, and numbers its variables its own way, whatever their value.

Dr.Jit's other flags (call optimisations, debugging) have no counterpart in kiln and are not
accepted.
"""

import contextlib
import enum
import os as _os
import threading

from . import _kiln as _k


class JitFlag(enum.IntFlag):
    """The flags kiln honours (Dr.Jit's names), each per thread. ``KernelFreezing`` off runs
    frozen functions unfrozen on this thread (``KILN_FREEZE=0`` does so for the process)."""

    SymbolicLoops = 1 << 0
    SymbolicConditionals = 1 << 1
    SymbolicCalls = 1 << 2
    OptimizeLoops = 1 << 3
    KernelHistory = 1 << 4
    KernelFreezing = 1 << 5
    PacketOps = 1 << 6
    ReuseIndices = 1 << 7
    OptimizeCalls = 1 << 8


# flags that choose how Dr.Jit works, not what it computes: kept, with no effect in kiln
# (OptimizeCalls: Dr.Jit's constant propagation into a call's targets; kiln traces each target
# with its arguments as they are either way)
_NO_EFFECT = {"PacketOps": True, "ReuseIndices": True, "OptimizeCalls": True}
_local = threading.local()


def _get(name):
    if name in _NO_EFFECT:
        return getattr(_local, "flags", _NO_EFFECT).get(name, _NO_EFFECT[name])
    return _k._flag(name)


def _set(name, value):
    if name in _NO_EFFECT:
        if not hasattr(_local, "flags"):
            _local.flags = dict(_NO_EFFECT)
        _local.flags[name] = value
    else:
        _k._set_flag(name, value)


class VarState(enum.IntEnum):
    """What an array is now (``x.state``; Dr.Jit's names). kiln reports ``Literal``,
    ``Evaluated`` and ``Unevaluated``; the other members exist for code that compares with them."""

    Invalid = 0
    Literal = 1
    Undefined = 2
    Unevaluated = 3
    Evaluated = 4
    Dirty = 5
    Symbolic = 6
    Mixed = 7


class KernelType(enum.Enum):
    """What a ``kernel_history()`` entry ran (Dr.Jit's names): a compiled kernel (``JIT``,
    possibly with a reduction fused in), a reduction of an evaluated array (``Reduce``), or
    another device operation (``Other``: compaction, a matrix product)."""

    JIT = 0
    Reduce = 1
    CallReduce = 2
    Other = 3


class KernelRecordingMode(enum.Enum):
    """Whether a ``kernel_history()`` entry ran outside frozen functions (``None``), inside a
    recording (``Recorded``) or in a replay (``Replayed``)."""

    None_ = 0
    Recorded = 1
    Replayed = 2



def kernel_history():
    """The kernels and device reductions this thread launched since the last call, oldest
    first, while ``JitFlag.KernelHistory`` is on (Dr.Jit's ``dr.kernel_history``); the history is
    emptied. Each entry is a dict: ``type`` (a ``KernelType``), ``backend``, ``hash`` (of the
    compiled kernel; 0 for a reduction), ``size`` (lanes), ``input_count``, ``output_count``,
    ``operation_count`` (IR operations), ``execution_time`` (ms), ``recording_mode`` (a
    ``KernelRecordingMode``), ``uses_optix`` (False), and kiln's ``op`` (the device operation's
    name). Where kiln differs: the history is per thread, as kiln's flags are, and turning the
    flag off empties it; ``Recorded``/``Replayed`` also mark the steps of kiln's own evaluated
    loops, which are frozen functions inside."""
    backend = _k.backend()
    return [
        {"type": KernelType[kind], "backend": backend, "hash": h, "size": size,
         "input_count": n_in, "output_count": n_out, "operation_count": ops,
         "execution_time": us / 1000.0, "uses_optix": False, "op": what,
         "recording_mode": KernelRecordingMode[mode if mode != "None" else "None_"]}
        for kind, what, h, size, n_in, n_out, ops, us, mode in _k._kernel_history()
    ]


class LogLevel(enum.IntEnum):
    """How much kiln writes to stderr (``kiln.set_log_level``; Dr.Jit's names). ``Info`` shows
    each kernel launch (``eval(): launching kernel (n=..., in=..., out=..., ops=...)``, cache hit
    or miss, compile and run time), as Dr.Jit's ``Info`` does; ``Debug`` adds the scheduler's,
    the caches' and control flow's decisions; ``Trace`` every traced operation and each
    kernel's IR."""

    Disable = 0
    Error = 1
    Warn = 2
    Info = 3
    InfoSym = 4
    Debug = 5
    Trace = 6


# each level as the filter of kiln's stderr subscriber (tracing-subscriber syntax)
_FILTERS = {
    LogLevel.Disable: "off",
    LogLevel.Error: "error",
    LogLevel.Warn: "warn",
    LogLevel.Info: "info,kiln::kernel=debug",
    LogLevel.InfoSym: "info,kiln::kernel=debug,kiln::control=debug",
    LogLevel.Debug: "debug",
    LogLevel.Trace: "trace",
}
_log = {"level": None}


def set_log_level(level):
    """Set how much kiln logs to stderr, for the whole process (Dr.Jit's ``dr.set_log_level``):
    a ``LogLevel`` (or its number), or a filter string in ``KILN_LOG``'s syntax
    (``"kiln::kernel=trace"`` prints each kernel's IR). Where kiln differs: the log goes to the
    process's stderr (a file descriptor, which pytest's ``capfd`` reads, not ``capsys``). Raises
    ``RuntimeError`` when the program installed a ``tracing`` subscriber of its own."""
    if isinstance(level, str):
        filt = level
    else:
        try:
            level = LogLevel(level)
        except ValueError:
            raise ValueError(f"set_log_level(): {level!r} is not a kiln.LogLevel (0 to 6) or a "
                             "filter string such as 'kiln::kernel=debug'") from None
        filt = _FILTERS[level]
    if not _k._set_log_filter(filt):
        raise RuntimeError(
            f"set_log_level(): kiln could not set its log filter to {filt!r}: either it is not a "
            "valid filter (see KILN_LOG in the README), or the program installed a tracing "
            "subscriber of its own, which then decides what is logged")
    _log["level"] = level


def log_level():
    """The log level last set with ``set_log_level`` (a ``LogLevel``, or the filter string
    given); before any, ``KILN_LOG``'s filter when set, ``Warn`` under ``KILN_DEBUG=1``, else
    ``Disable`` (kiln prints nothing until asked)."""
    if _log["level"] is not None:
        return _log["level"]
    env = _os.environ.get("KILN_LOG")
    if env:
        return env
    return LogLevel.Warn if _os.environ.get("KILN_DEBUG") == "1" else LogLevel.Disable


def _names(flags):
    flags = JitFlag(flags)
    return [f.name for f in JitFlag if f in flags]


def set_flag(flags, value):
    """Turn the flags on or off on this thread."""
    for n in _names(flags):
        _set(n, bool(value))


def flag(flags):
    """Whether every one of the flags is on, on this thread."""
    return all(_get(n) for n in _names(flags))


@contextlib.contextmanager
def scoped_set_flag(flags, value=True):
    """``with kiln.scoped_set_flag(kiln.JitFlag.SymbolicLoops, False):`` the flags take `value`
    inside the block and their previous values after it."""
    before = {n: _get(n) for n in _names(flags)}
    try:
        for n in before:
            _set(n, bool(value))
        yield
    finally:
        for n, v in before.items():
            _set(n, v)


__all__ = ["JitFlag", "VarState", "KernelType", "KernelRecordingMode", "kernel_history", "set_flag", "flag", "scoped_set_flag",
           "LogLevel", "log_level", "set_log_level"]
