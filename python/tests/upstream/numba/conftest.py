# SPDX-License-Identifier: MIT OR Apache-2.0
"""Our conftest for Numba's test_stencils.py ported to kiln (Numba has no conftest for it).

``pytest_collection_modifyitems`` marks the tests of this directory that fail on kiln with
``xfail(strict=True)``, from the ``XFAIL`` dict below ({"Class::test": reason}), so that
``pytest python/tests`` stays green and a test that starts passing is reported (XPASS(strict)
fails the run). No upstream test body is edited. RESULTS.md beside this file lists every entry.

Reasons start with their category:

* "kiln bug: ..."  a kiln defect, with a repro in RESULTS.md: fix it, then delete the entry (or,
  where the reason says so, replace it with ``INTERNALS``);
* "numba feature: ..."  a Numba feature kiln does not have;
* "numba compiler internals: ..."  the test inspects what Numba's compiler produced (LLVM IR),
  or expects the njit/parallel compiler itself to behave some way; kiln has no such compiler
  (see _numba_shim.py);
* "error difference: ..."  an exception test where kiln raises another class, at another time,
  or accepts what Numba rejects.

Entries whose reason is exactly ``INTERNALS`` are tests whose only failure is the LLVM IR
assertion: every stencil result in them is still compared with the upstream reference. For
them the xfail is narrowed with ``raises=``: it only accepts a failure whose every error is a
"numba compiler internals" one, so a wrong kiln result in such a test still fails the run.
"""

import os
import re

import pytest

from ._numba_shim import NumbaCompilerInternalsUnavailable

HERE = os.path.dirname(os.path.abspath(__file__))

INTERNALS = (
    "numba compiler internals: asserts '@do_scheduling' in the LLVM IR of a parallel compile "
    "(compile_extra(...).library.get_llvm_str()); kiln runs no Numba compiler. The stencil "
    "results of the test match upstream's reference (the raises= check enforces it)"
)
_AND_INTERNALS = "; also fails on numba compiler internals (the LLVM IR assertion), so once "\
    "fixed replace this entry with INTERNALS"

NUMPY_ON_WINDOW = (
    "numba feature: NumPy functions (np.median) over a window inside a kernel; kiln refuses "
    "reading traced values inside a kernel (InvalidArgument naming Python's sum/min/max over "
    "the window list instead)"
)
BUG_INT_FLOAT = (
    "kiln bug: int64 input + a Python float in the kernel gives a float32 result; "
    "Numba (and NumPy's reference) give float64 (dtype('float64') != dtype('float32'))"
)
BUG_NP_FLOAT64 = (
    "kiln bug: float32 input + np.float64(10.) in the kernel gives a float32 result; "
    "Numba (and NumPy's reference) give float64 (np.float64 is treated as a weak Python float)"
)
BUG_STD_SCALAR = (
    "kiln bug: a scalar argument named in standard_indexing (c=10) becomes a "
    "kiln.StencilConstant that arithmetic refuses (TypeError: unsupported operand type(s) for +: "
    "'kiln.Float64' and 'kiln.StencilConstant'); Numba passes the scalar through"
)
BUG_NUMPY_ON_WINDOW = (
    "kiln bug: np.median(a[-1:2, ...]) in a kernel silently gives one value for every element "
    "(NumPy converts the traced window arrays, which span the whole array) instead of a "
    "per-element median or an error; per-element NumPy functions over a window are also a "
    "Numba feature kiln lacks, so after the fix this stays an xfail with a 'numba feature' reason"
)

COMPLEX = "numba feature: complex numbers in a kernel (kiln has no complex element type)"
UFUNC = (
    "numba feature: NumPy ufuncs (np.sin) on values inside a kernel (kiln arrays set "
    "__array_ufunc__ = None: 'operand kiln.Float64 does not support ufuncs')"
)
DATA_IF = (
    "numba feature: Python if / conditional expression on input values inside a kernel "
    "(Numba compiles per-element control flow; kiln traces the kernel once: 'the truth value of "
    "an array ... is ambiguous')"
)

XFAIL = {
    # ---- TestStencil ---------------------------------------------------------------------------
    "TestStencil::test_stencil1": INTERNALS,
    "TestStencil::test_stencil_call": INTERNALS,
    "TestStencil::test_stencil_call_1D": INTERNALS,
    "TestStencil::test_stencil_multiple_inputs": INTERNALS,
    "TestStencil::test_stencil_standard_indexing_1d": INTERNALS,
    "TestStencil::test_stencil_standard_indexing_2d": INTERNALS,
    "TestStencil::test_stencil_parallel_off": (
        "numba compiler internals: asserts '@do_scheduling' is absent from the LLVM IR of "
        "compile_extra with ParallelOptions({'stencil': False})"
    ),
    "TestStencil::test_stencil2": (
        "numba feature: numba.stencil(..., index_offsets=...) (kiln: TypeError unexpected "
        "keyword argument 'index_offsets'); the test first fails on numba compiler internals "
        "(the LLVM IR assertion)"
    ),
    "TestStencil::test_stencil_call_const": (
        "error difference: kiln accepts a kernel whose indices come from arguments "
        "(a[-c + d]) without neighborhood=; Numba raises NumbaValueError 'stencil kernel index is "
        "not constant, 'neighborhood' option required' (kiln raises nothing)"
    ),
    "TestStencil::test_stencil_mixed_types": DATA_IF,
    "TestStencil::test_out_kwarg_w_cval": (
        "error difference: cval=1j makes kiln.stencil raise a plain TypeError when the stencil "
        "is made ('argument 'cval': must be real number, not complex'); Numba raises "
        "NumbaValueError 'cval type does not match stencil return type.' when it is called. The "
        "test then expects compile_extra itself to raise (numba compiler internals)"
    ),
    # ---- TestManyStencils: only the LLVM IR assertion fails ------------------------------------
    **{
        "TestManyStencils::test_basic%s" % n: INTERNALS
        for n in (
            "00 01 02 03 04 05 06 07 08 09 10 11 12 13 15 22 30 31 31c 33 35 36 37 39 40 43 "
            "47 65 66 67 68 69 70 72 73 73b 74 75 76 77 78 78b 84 85 87 91 92 93 98"
        ).split()
    },
    # ---- TestManyStencils: kiln bugs -----------------------------------------------------------
    **{
        "TestManyStencils::test_basic%s" % n: INTERNALS
        for n in "17 18 19 20 21 26 27".split()
    },
    "TestManyStencils::test_basic28": INTERNALS,
    **{
        "TestManyStencils::test_basic%s" % n: INTERNALS
        for n in "49 52 54 55 62 82 83".split()
    },
    "TestManyStencils::test_basic56": "numba feature: a slice of a "
    "standard-indexed input (for k in b[0, :]: TypeError 'slice' object cannot be interpreted "
    "as an integer)",
    "TestManyStencils::test_basic57": "numba feature: a row of a 2-D "
    "standard-indexed input (c = b[0]; c[1]: InvalidArgument 'takes 2 indices, got 1')",
    "TestManyStencils::test_basic58": "numba feature: a row of a 2-D "
    "standard-indexed input (c = b[0] + 1: InvalidArgument 'takes 2 indices, got 1')",
    "TestManyStencils::test_basic63": "error difference: kiln accepts "
    "a[0, b[0, 1]] (it reads the standard-indexed value as a constant offset), Numba raises "
    "NumbaValueError",
    "TestManyStencils::test_basic90": DATA_IF,
    "TestManyStencils::test_basic59": INTERNALS,
    "TestManyStencils::test_basic94": NUMPY_ON_WINDOW,
    "TestManyStencils::test_basic96": NUMPY_ON_WINDOW,
    "TestManyStencils::test_basic61": (
        "error difference: Numba refuses standard_indexing on the first (relatively indexed) "
        "argument (NumbaValueError); kiln accepts it and reads that input at absolute positions"
    ),
    # ---- TestManyStencils: Numba features kiln does not have -----------------------------------
    "TestManyStencils::test_basic14": COMPLEX,
    "TestManyStencils::test_basic14b": COMPLEX,
    "TestManyStencils::test_basic71": COMPLEX,
    "TestManyStencils::test_basic80": COMPLEX + " (a complex scalar argument b = 12.j: "
    "kiln.TypeMismatch 'no element type for dtype complex128')",
    "TestManyStencils::test_basic23": UFUNC,
    "TestManyStencils::test_basic23a": UFUNC,
    "TestManyStencils::test_basic34": UFUNC,
    "TestManyStencils::test_basic48": (
        "numba feature: array attributes and writes through a view of a stencil input inside a "
        "kernel (c = a.T; c[:, :] = 10: AttributeError 'kiln.StencilInput' has no attribute 'T')"
    ),
    "TestManyStencils::test_basic89": DATA_IF + " (several return statements under if/elif)",
    "TestManyStencils::test_basic60": (
        "numba compiler internals: expects Numba's parallel (parfors) compiler to reject a tuple "
        "argument to a stencil (NumbaValueError); the shim's 'parfors' path is the plain Python "
        "function and kiln accepts the tuple (the @stencil and njit paths pass)"
    ),
    # ---- TestManyStencils: error differences ---------------------------------------------------
    "TestManyStencils::test_basic29": (
        "error difference: kiln accepts a[0, int(np.cos(0))] (the index is a Python int when "
        "traced); Numba requires a literal constant index and raises NumbaValueError"
    ),
    "TestManyStencils::test_basic32": (
        "error difference: kiln accepts a[np.int8(1), 0]; Numba raises NumbaValueError/"
        "LoweringError for a typed-integer index"
    ),
    "TestManyStencils::test_basic38": (
        "error difference: cval=1j makes kiln.stencil raise a plain TypeError when the stencil "
        "is made ('argument 'cval': must be real number, not complex'); Numba raises "
        "NumbaValueError (kiln.InvalidArgument here) when it is called"
    ),
    **{
        "TestManyStencils::test_basic%s" % n: (
            "error difference: assigning to a stencil input in the kernel (a[0, 1] = ...) raises "
            "Python's plain TypeError ''kiln.StencilInput' object does not support item "
            "assignment'; Numba raises NumbaValueError (kiln.InvalidArgument here) or "
            "LoweringError"
        )
        for n in "44 45 46".split()
    },
    "TestManyStencils::test_basic53": (
        "error difference: kiln checks the standard_indexing names when the stencil is made "
        "(kiln.stencil(...) raises), Numba when it is called, so the test's njit/parfors "
        "wrappers find no stencil (NameError where the parfors path expects NumbaValueError); "
        "also hits the str standard_indexing kiln bug"
    ),
    "TestManyStencils::test_basic81": (
        "error difference: arrays of different rank: kiln raises kiln.InvalidArgument on every "
        "path, which the test accepts for @stencil and njit (TypingError) but not for the parfors "
        "path, where Numba raises AssertionError"
    ),
    "TestManyStencils::test_basic86": (
        "error difference: an unknown option (bad=10) makes kiln.stencil raise Python's plain "
        "TypeError 'unexpected keyword argument', when the stencil is made; the test expects "
        "ValueError or TypingError"
    ),
    "TestManyStencils::test_basic88": (
        "error difference: kiln accepts a kernel parameter named 'out' (it is passed "
        "positionally); Numba reserves the name and raises NumbaValueError"
    ),
}


def _only_compiler_internals(exc):
    """Whether every error in a failed test is a "numba compiler internals" one."""
    if isinstance(exc, NumbaCompilerInternalsUnavailable):
        return True
    msg = str(exc)
    # TestManyStencils.check_against_expected collects its errors into one RuntimeError
    if not isinstance(exc, RuntimeError) or "should have raised" in msg \
            or "Errors were:\n\n" not in msg:
        return False
    errors = re.split(r"\n\n(?=(?:@stencil|njit|parfors): Message: )",
                      msg.split("Errors were:\n\n", 1)[1].strip())
    return all("numba compiler internals" in e for e in errors)


def _xfail(reason):
    if reason == INTERNALS and hasattr(pytest, "RaisesExc"):
        return pytest.mark.xfail(
            strict=True, reason=reason,
            raises=pytest.RaisesExc((NumbaCompilerInternalsUnavailable, RuntimeError),
                                    check=_only_compiler_internals),
        )
    return pytest.mark.xfail(strict=True, reason=reason)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.dirname(str(item.path)) != HERE:
            continue
        key = item.nodeid.split("::", 1)[1]
        if key in XFAIL:
            item.add_marker(_xfail(XFAIL[key]))
