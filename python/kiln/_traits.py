"""Dr.Jit's type traits: ``kiln.uint32_array_t(Float32)`` is ``UInt32``, ``kiln.mask_t(Array3f)``
is ``Array3b``, ``kiln.tensor_t(Float32)`` is ``TensorXf``… Each takes a class or an instance
and keeps the *kind* (array, vector ``ArrayNx``, tensor, Python number) while changing the
element type. kiln has one array class per element type for AD and plain use alike, so
``detached_t`` is the type itself."""

from __future__ import annotations

import enum as _enum

from . import _kiln as _k
from . import _vectors as _v

# element type → (array class, tensor class, vector suffix, Python type)
_ELEMENTS = {
    "f32": (_k.Float32, _k.TensorXf, "f", float),
    "f64": (_k.Float64, _k.TensorXf64, "f64", float),
    "i32": (_k.Int32, _k.TensorXi, "i", int),
    "u32": (_k.UInt32, _k.TensorXu, "u", int),
    "i64": (_k.Int64, _k.TensorXi64, "i64", int),
    "u64": (_k.UInt64, _k.TensorXu64, "u64", int),
    "bool": (_k.Bool, _k.TensorXb, "b", bool),
}
_ARRAY_ELEM = {v[0]: k for k, v in _ELEMENTS.items()}
_TENSOR_ELEM = {v[1]: k for k, v in _ELEMENTS.items()}


def _class(x):
    return x if isinstance(x, type) else type(x)


def _vector_parts(cls):
    """``(size, element)`` of a vector class ``ArrayNx``, else ``None``."""
    if isinstance(cls, type) and issubclass(cls, _v.StaticArrayBase) and cls is not _v.StaticArrayBase:
        return cls.Size, _ARRAY_ELEM[cls.Value]
    return None


def _kind(x):
    """``(kind, element)``: kind is "array", "tensor", ("vector", n) or "python"."""
    cls = _class(x)
    if cls in _ARRAY_ELEM:
        return "array", _ARRAY_ELEM[cls]
    if cls in _TENSOR_ELEM:
        return "tensor", _TENSOR_ELEM[cls]
    vec = _vector_parts(cls)
    if vec is not None:
        return ("vector", vec[0]), vec[1]
    if cls is bool:
        return "python", "bool"
    if cls is int:
        return "python", "i64"
    if cls is float:
        return "python", "f64"
    raise TypeError(f"kiln type traits take kiln types (or Python numbers), not `{cls.__name__}`")


def _make(kind, elem):
    arr, tensor, suffix, py = _ELEMENTS[elem]
    if kind == "array":
        return arr
    if kind == "tensor":
        return tensor
    if kind == "python":
        return py
    return getattr(_v, f"Array{kind[1]}{suffix}")


def _retype(elem):
    def trait(x):
        kind, _ = _kind(x)
        return _make(kind, elem)

    return trait


uint32_array_t = _retype("u32")
int32_array_t = _retype("i32")
uint64_array_t = _retype("u64")
int64_array_t = _retype("i64")
float32_array_t = _retype("f32")
float64_array_t = _retype("f64")
mask_t = _retype("bool")
uint32_array_t.__doc__ = "The ``UInt32`` type of the same kind (array, vector, tensor) as ``x``."
int32_array_t.__doc__ = "The ``Int32`` type of the same kind as ``x``."
uint64_array_t.__doc__ = "The ``UInt64`` type of the same kind as ``x``."
int64_array_t.__doc__ = "The ``Int64`` type of the same kind as ``x``."
float32_array_t.__doc__ = "The ``Float32`` type of the same kind as ``x``."
float64_array_t.__doc__ = "The ``Float64`` type of the same kind as ``x``."
mask_t.__doc__ = "The mask type (``Bool``, ``Array3b``, ``TensorXb``) of the same kind as ``x``."


def _same_width(x, signed_float):
    kind, elem = _kind(x)
    if kind == "python":
        raise TypeError("this trait takes kiln types (Dr.Jit's too)")
    wide = elem in ("f64", "i64", "u64")
    return _make(kind, {"f": ("f64" if wide else "f32"), "i": ("i64" if wide else "i32"),
                        "u": ("u64" if wide else "u32")}[signed_float])


def float_array_t(x):
    """The float type of ``x``'s width (32-bit elements → ``Float32``, 64-bit → ``Float64``)."""
    return _same_width(x, "f")


def int_array_t(x):
    """The signed integer type of ``x``'s width."""
    return _same_width(x, "i")


def uint_array_t(x):
    """The unsigned integer type of ``x``'s width."""
    return _same_width(x, "u")


def value_t(x):
    """The type of one element: a vector's component array (``Array3f`` → ``Float32``), an
    array's or tensor's Python number type (``Float32`` → ``float``)."""
    kind, elem = _kind(x)
    if isinstance(kind, tuple):
        return _ELEMENTS[elem][0]
    return _ELEMENTS[elem][3]


def scalar_t(x):
    """The Python number type of the elements (``Array3f`` → ``float``)."""
    return _ELEMENTS[_kind(x)[1]][3]


def array_t(x):
    """The array type underlying ``x``: itself for arrays and vectors, the flat array of a
    tensor (``TensorXf`` → ``Float32``)."""
    kind, elem = _kind(x)
    return _ELEMENTS[elem][0] if kind == "tensor" else _make(kind, elem)


def leaf_t(x):
    """The array type of the leaves (``Array3f`` → ``Float32``, ``TensorXf`` → ``Float32``)."""
    kind, elem = _kind(x)
    return _ELEMENTS[elem][3] if kind == "python" else _ELEMENTS[elem][0]


def tensor_t(x):
    """The tensor type of ``x``'s elements (``Float32`` or ``Array3f`` → ``TensorXf``); ``None``
    for Python numbers."""
    kind, elem = _kind(x)
    return None if kind == "python" else _ELEMENTS[elem][1]


def detached_t(x):
    """The type without derivative tracking: in kiln every float type carries gradients only once
    ``enable_grad`` is called, so this is ``x``'s type itself."""
    return _class(x)


class JitBackend(_enum.IntEnum):
    """Dr.Jit's backends; kiln's arrays all live on its CPU backend, Dr.Jit's ``LLVM``."""

    Invalid = 0
    CUDA = 1
    LLVM = 2


def _elem_or_none(x):
    try:
        return _kind(x)
    except TypeError:
        return None, None


def backend_v(x):
    """``JitBackend.LLVM`` for kiln types and values, ``JitBackend.Invalid`` for anything else."""
    kind, _ = _elem_or_none(x)
    return JitBackend.Invalid if kind in (None, "python") else JitBackend.LLVM


def is_array_v(x):
    """Whether ``x`` is a kiln array, vector or tensor type (or value)."""
    return _elem_or_none(x)[0] not in (None, "python")


def is_jit_v(x):
    """Whether ``x`` is traced and compiled by kiln (every kiln type)."""
    return is_array_v(x)


def is_tensor_v(x):
    """Whether ``x`` is a tensor type (or value)."""
    return _elem_or_none(x)[0] == "tensor"


def is_vector_v(x):
    """Whether ``x`` is a fixed-size vector type ``ArrayNx`` (or value)."""
    return isinstance(_elem_or_none(x)[0], tuple)


is_static_array_v = is_vector_v


def is_float_v(x):
    """Whether the elements of ``x`` are floats (Python ``float`` too)."""
    return _elem_or_none(x)[1] in ("f32", "f64")


def is_integral_v(x):
    """Whether the elements of ``x`` are integers (Python ``int`` too; not masks)."""
    return _elem_or_none(x)[1] in ("i32", "u32", "i64", "u64")


def is_signed_v(x):
    """Whether the elements of ``x`` are signed (floats and signed integers)."""
    return _elem_or_none(x)[1] in ("f32", "f64", "i32", "i64")


def is_unsigned_v(x):
    """Whether the elements of ``x`` are unsigned integers."""
    return _elem_or_none(x)[1] in ("u32", "u64")


def is_mask_v(x):
    """Whether the elements of ``x`` are booleans."""
    return _elem_or_none(x)[1] == "bool"


def is_diff_v(x):
    """Whether ``x`` can carry gradients: kiln's float types (integer and mask arrays cannot)."""
    return is_array_v(x) and is_float_v(x)


class VarType(_enum.IntEnum):
    """Dr.Jit's element types. kiln's arrays hold ``Bool``, ``Int32``, ``UInt32``, ``Int64``,
    ``UInt64``, ``Float32`` and ``Float64``; the other members exist for code that compares with
    them (no kiln type has them)."""

    Void = 0
    Bool = 1
    Int8 = 2
    UInt8 = 3
    Int16 = 4
    UInt16 = 5
    Int32 = 6
    UInt32 = 7
    Int64 = 8
    UInt64 = 9
    Pointer = 10
    BaseFloat = 11
    Float16 = 12
    Float32 = 13
    Float64 = 14


_VAR_TYPES = {"bool": VarType.Bool, "i32": VarType.Int32, "u32": VarType.UInt32,
              "i64": VarType.Int64, "u64": VarType.UInt64, "f32": VarType.Float32,
              "f64": VarType.Float64}  # fmt: skip


def type_v(x):
    """The element type of ``x`` (a class or a value) as a ``VarType``; ``VarType.Void`` for
    what is not a kiln type or a Python number (Python's ``float`` is ``Float64``, ``int``
    ``Int64``)."""
    return _VAR_TYPES.get(_elem_or_none(x)[1], VarType.Void)


#: Dr.Jit's size of a dynamic dimension.
Dynamic = -1


def size_v(x):
    """The number of components: ``N`` for a vector ``ArrayNx``, ``Dynamic`` (-1) for arrays and
    tensors, 1 for Python numbers."""
    kind, _ = _elem_or_none(x)
    if isinstance(kind, tuple):
        return kind[1]
    return 1 if kind in (None, "python") else Dynamic


def depth_v(x):
    """How deep the array types nest: 0 for Python numbers, 1 for arrays and tensors, 2 for
    vectors of arrays."""
    kind, _ = _elem_or_none(x)
    if isinstance(kind, tuple):
        return 2
    return 0 if kind in (None, "python") else 1


__all__ = ["uint32_array_t", "int32_array_t", "uint64_array_t", "int64_array_t",
           "float32_array_t", "float64_array_t", "mask_t", "float_array_t", "int_array_t",
           "uint_array_t", "value_t", "scalar_t", "array_t", "leaf_t", "tensor_t", "detached_t",
           "JitBackend", "backend_v", "is_array_v", "is_jit_v", "is_tensor_v", "is_vector_v",
           "is_static_array_v", "is_float_v", "is_integral_v", "is_signed_v", "is_unsigned_v",
           "is_mask_v", "is_diff_v", "Dynamic", "size_v", "depth_v", "VarType", "type_v"]
