# SPDX-License-Identifier: MIT OR Apache-2.0
"""The names Numba's ``numba/tests/test_stencils.py`` imports from Numba, provided for kiln.

This module is our own code (MIT OR Apache-2.0, like kiln), not a copy of Numba's. The ported
file ``test_stencils.py`` beside it imports every Numba-specific name from here instead of from
``numba``, and is otherwise Numba's file unchanged, so that its stencil tests run against
``kiln.stencil``, kiln's implementation of Numba's ``@stencil`` face.

What each name is, and how honest it is:

* ``stencil`` and ``numba.stencil`` are ``kiln.stencil`` itself.

* kiln has no compiler for Python functions: there is no ``njit``, no ``parallel=True``
  (parfors) pipeline, no Numba IR and no LLVM module to inspect. ``njit(f)`` /
  ``njit(parallel=True)(f)`` and ``compile_extra(..., f, ...).entry_point`` therefore give an
  object whose calls run the **plain Python function** ``f`` (which calls ``kiln.stencil``).
  The upstream tests' "njit" and "parfors" results are thus kiln's stencil run a second and
  third time through the same Python function, not through a compiled one; they check that
  the result is the same when the stencil is called from inside another function, nothing
  about compilation. Signatures and flags (``types``, ``numba.typeof``, ``Flags``,
  ``ParallelOptions``, ``registry``) are accepted and recorded but change nothing.

  Because nothing is compiled, errors that Numba reports when compiling (``compile_extra``
  raising before any call) can only appear when ``entry_point`` is called.

* Anything that inspects what Numba's compiler produced (``compile_extra(...).library``,
  ``get_llvm_str()``, a dispatcher's ``inspect_llvm()``/``inspect_types()``/...) raises
  :class:`NumbaCompilerInternalsUnavailable`, whose message starts "numba compiler internals".
  Tests that assert on LLVM IR (``'@do_scheduling'``) fail with it; conftest.py marks them.

* Numba's exception classes are mapped to the classes kiln raises in the same situations:

  - ``NumbaValueError`` (an invalid stencil argument or kernel) is ``kiln.InvalidArgument``
    (also a ``ValueError``), which kiln's stencil raises for invalid arguments and kernels.
  - ``TypingError``: in Numba it is the base class of ``NumbaValueError`` and is raised when
    a kernel does not fit the arguments' types or shapes (wrong number of indices, arrays of
    different dimensions). kiln reports those situations, when tracing, as
    ``kiln.InvalidArgument`` or ``kiln.TypeMismatch``, so ``TypingError`` is the tuple of the
    two (a tuple works everywhere the file uses the name: ``except``, ``isinstance``,
    ``assertRaises``; it is never raised or subclassed). Like Numba's, it contains
    ``NumbaValueError``.
  - ``LoweringError`` (a failure in Numba's LLVM code generation) has no kiln counterpart; it
    is a distinct class here that kiln never raises, so a test that only accepts it fails.
"""

import sys
import types as _pytypes
import unittest

import numpy as np

import kiln

__all__ = [
    "numba", "njit", "stencil", "types", "registry", "compile_extra", "Flags", "ParallelOptions",
    "skip_parfors_unsupported", "_32bit", "LoweringError", "TypingError", "NumbaValueError",
    "NumbaCompilerInternalsUnavailable",
]  # fmt: skip


# ---- compiler internals --------------------------------------------------------------------------


class NumbaCompilerInternalsUnavailable(NotImplementedError):
    """Raised by everything that would inspect Numba's compiler output (IR, LLVM, assembly):
    kiln runs no Numba compiler, so there is nothing to inspect."""


def _internals(what):
    return NumbaCompilerInternalsUnavailable(
        "numba compiler internals: %s does not exist in kiln (kiln runs no Numba compiler, "
        "the shim's njit/compile_extra run the plain Python function)" % what
    )


# ---- exceptions ----------------------------------------------------------------------------------

#: Numba's ``NumbaValueError``: kiln's class for invalid arguments and kernels.
NumbaValueError = kiln.InvalidArgument

#: Numba's ``TypingError`` (the base of ``NumbaValueError``): kiln's two trace-time error classes.
TypingError = (kiln.InvalidArgument, kiln.TypeMismatch)


class LoweringError(Exception):
    """Numba's ``LoweringError`` (LLVM code generation failed). kiln never raises it."""


# ---- stencil -------------------------------------------------------------------------------------

stencil = kiln.stencil


# ---- types and typeof (descriptions only; nothing is compiled) -----------------------------------


class _Type:
    """A Numba type's name, for signatures that the shim records and ignores."""

    def __init__(self, name):
        self.name = name

    def __getitem__(self, key):
        # ``types.float64[:]``, ``types.int64[:, :]``: an array type
        ndim = len(key) if isinstance(key, tuple) else 1
        return _Type("array(%s, %dd, A)" % (self.name, ndim))

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, _Type) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


_SCALARS = [
    "boolean", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
]  # fmt: skip

types = _pytypes.SimpleNamespace(**{n: _Type(n) for n in _SCALARS})
types.bool_ = types.boolean
types.intp = types.int64 if sys.maxsize > 2**32 else types.int32
types.uintp = types.uint64 if sys.maxsize > 2**32 else types.uint32
types.none = _Type("none")


def typeof(value):
    """A description of ``value``'s Numba type (recorded in signatures the shim ignores)."""
    if isinstance(value, np.ndarray):
        return _Type("array(%s, %dd, C)" % (value.dtype.name, value.ndim))
    if isinstance(value, (bool, np.bool_)):
        return types.boolean
    if isinstance(value, np.generic):
        return _Type(value.dtype.name)
    if isinstance(value, int):
        return types.intp
    if isinstance(value, float):
        return types.float64
    if isinstance(value, complex):
        return types.complex128
    if isinstance(value, tuple):
        return _Type("Tuple(%s)" % ", ".join(repr(typeof(v)) for v in value))
    return _Type("pyobject(%s)" % type(value).__name__)


# ---- njit ----------------------------------------------------------------------------------------


class _PlainFunction:
    """What ``njit`` gives here: calling it runs the plain Python function (no compilation)."""

    def __init__(self, py_func, options):
        self.py_func = py_func
        self.targetoptions = dict(options)
        self.__name__ = getattr(py_func, "__name__", "function")
        self.__doc__ = getattr(py_func, "__doc__", None)

    def __call__(self, *args, **kwargs):
        return self.py_func(*args, **kwargs)

    def __repr__(self):
        return "<shim njit of %r (runs the plain Python function)>" % (self.py_func,)

    def inspect_llvm(self, *args, **kwargs):
        raise _internals("njit(...).inspect_llvm()")

    def inspect_asm(self, *args, **kwargs):
        raise _internals("njit(...).inspect_asm()")

    def inspect_types(self, *args, **kwargs):
        raise _internals("njit(...).inspect_types()")

    def parallel_diagnostics(self, *args, **kwargs):
        raise _internals("njit(...).parallel_diagnostics()")

    @property
    def overloads(self):
        raise _internals("njit(...).overloads")


def njit(*args, **options):
    """``njit(f)``, ``njit(f, parallel=True)``, ``@njit`` and ``@njit(parallel=True)``: the
    result's calls run the plain Python function ``f`` (see the module docstring). A signature
    given first (``njit("f8(f8)")``) is accepted and ignored."""
    if args and callable(args[0]) and not isinstance(args[0], (str, _Type)):
        return _PlainFunction(args[0], options)
    return lambda f: _PlainFunction(f, options)


# ---- compile_extra, Flags, ParallelOptions, registry ---------------------------------------------


class Flags:
    """Numba's compiler flags: an attribute bag, recorded and ignored."""

    def __repr__(self):
        return "Flags(%r)" % (vars(self),)


class ParallelOptions:
    """Numba's parfors options (``True``, ``False`` or a dict such as ``{'stencil': False}``):
    recorded and ignored."""

    def __init__(self, value):
        self.value = value
        self.enabled = bool(value)


class _Context:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "<shim %s (no Numba compiler)>" % self.name


registry = _pytypes.SimpleNamespace(
    cpu_target=_pytypes.SimpleNamespace(
        typing_context=_Context("typing context"),
        target_context=_Context("target context"),
    )
)


class _NoLibrary:
    """Stands where Numba's compiled code library (LLVM module) would be."""

    def get_llvm_str(self):
        raise _internals("the LLVM IR of a compiled function (library.get_llvm_str())")

    def get_asm_str(self):
        raise _internals("the assembly of a compiled function (library.get_asm_str())")

    def __getattr__(self, name):
        raise _internals("the compiled code library's %r" % name)


class _CompileResult:
    """What ``compile_extra`` gives here: ``entry_point`` runs the plain Python function;
    ``library`` (the compiled LLVM code) raises."""

    def __init__(self, func, args, flags):
        self.entry_point = func
        self.py_func = func
        self.argtypes = args
        self.flags = flags
        self.library = _NoLibrary()


def compile_extra(typingctx, targetctx, func, args, return_type, flags, locals, **kws):
    """Numba's ``compile_extra``: compiles nothing; the result's ``entry_point`` is ``func``."""
    return _CompileResult(func, args, flags)


# ---- numba.tests.support -------------------------------------------------------------------------

#: As in numba.tests.support.
_32bit = sys.maxsize <= 2**32

#: numba.tests.support's ``skip_parfors_unsupported`` skips where Numba's parfors do not run
#: (32-bit targets); kept as is, although kiln's stencil would run there.
skip_parfors_unsupported = unittest.skipIf(_32bit, "parfors not supported")


# ---- the ``numba`` namespace ---------------------------------------------------------------------

numba = _pytypes.SimpleNamespace(
    stencil=stencil,
    njit=njit,
    jit=njit,
    typeof=typeof,
    types=types,
    **{n: getattr(types, n) for n in _SCALARS + ["intp", "uintp", "bool_"]},
)
