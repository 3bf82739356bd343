"""kiln: array programs traced lazily, fused into kernels, compiled at run time and run on all
cores, with Dr.Jit's Python face.

Write ordinary arithmetic on whole arrays; kiln records it instead of computing it and compiles
everything of one size into one kernel when a value is needed::

    import kiln
    x = kiln.linspace(kiln.Float32, 0, 1, 1000)
    y = kiln.sqrt(x * x + 1)        # traced, nothing runs yet
    print(kiln.sum(y))              # one fused kernel and a reduction

Porting Dr.Jit code means changing ``import drjit as dr`` to ``import kiln as dr`` and the type
names (``dr.llvm.Float`` -> ``kiln.Float32``). Where kiln differs, the docstring says how.
"""

from ._kiln import *  # noqa: F401,F403
from ._kiln import __version__  # noqa: F401
from . import _kiln

#: Dr.Jit's short names for the default types.
Float = _kiln.Float32
UInt = _kiln.UInt32
Int = _kiln.Int32

# Dr.Jit's aliases
sync = _kiln.sync_thread
pow = _kiln.power

__all__ = [n for n in dir(_kiln) if not n.startswith("_")] + ["Float", "UInt", "Int", "sync", "pow"]
