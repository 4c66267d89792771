"""Pure. The `[dtype, shape, data]` array triple vLLM puts in msgpack for numpy arrays and tensors.

`data` is either msgpack ext type 3 holding the raw little-endian bytes inline, or an integer
index into the message's frames, counted from the payload frame (= 0): the first aux frame is 1
(docs/wire.md §A.4, §A.7.5, §A.12). `dtype` is a numpy typestr (`"<i4"`, `"<f4"`, ...) for arrays
or a torch dtype name (`"int64"`, `"float32"`, ...) for tensors. Ext types 1 and 2 are pickles
and are refused. We never hand out numpy: values come back as flat row-major tuples.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError

RAW_VIEW_EXT: Final = 3

# (kind, itemsize) -> struct format character; standard sizes, explicit byte order.
_FORMATS: Final = {
    ("i", 1): "b",
    ("i", 2): "h",
    ("i", 4): "i",
    ("i", 8): "q",
    ("u", 1): "B",
    ("u", 2): "H",
    ("u", 4): "I",
    ("u", 8): "Q",
    ("f", 2): "e",
    ("f", 4): "f",
    ("f", 8): "d",
    ("b", 1): "?",
}
_TORCH_TYPESTRS: Final = {
    "bool": "|b1",
    "uint8": "|u1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
}


class WireArray(msgspec.Struct, array_like=True, frozen=True):
    """One `[dtype, shape, data]` triple; `data` is an `Ext(3, bytes)` or an aux-frame index."""

    dtype: str
    shape: tuple[int, ...]
    data: Any


def inline_array(dtype: str, shape: Sequence[int], values: Sequence[int | float]) -> WireArray:
    """Pack `values` (row-major) as an inline ext-3 array. Valid at any size on both wires."""
    order, char, _ = _format_of(dtype)
    if math.prod(shape) != len(values):
        raise ValueError(f"shape {tuple(shape)} does not hold {len(values)} values")
    raw = struct.pack(f"{order}{len(values)}{char}", *values)
    return WireArray(dtype=dtype, shape=tuple(shape), data=msgspec.msgpack.Ext(RAW_VIEW_EXT, raw))


def array_values(array: WireArray, frames: Sequence[bytes]) -> tuple[Any, ...]:
    """The array's values, row-major. `frames[0]` is the payload; aux indices start at 1."""
    order, char, itemsize = _format_of(array.dtype)
    raw = _raw_bytes(array.data, frames)
    if any(dim < 0 for dim in array.shape):
        raise BackendProtocolError(f"negative dimension in array shape {array.shape}")
    count = math.prod(array.shape)
    if count * itemsize != len(raw):
        raise BackendProtocolError(
            f"array {array.dtype}{list(array.shape)} needs {count * itemsize} bytes, got {len(raw)}"
        )
    return struct.unpack(f"{order}{count}{char}", raw)


def _raw_bytes(data: Any, frames: Sequence[bytes]) -> bytes:
    if isinstance(data, msgspec.msgpack.Ext):
        if data.code != RAW_VIEW_EXT:
            raise BackendProtocolError(
                f"refusing msgpack ext type {data.code} (only raw views, type 3, are allowed)"
            )
        return bytes(data.data)
    if isinstance(data, int) and not isinstance(data, bool):
        if not 1 <= data < len(frames):
            raise BackendProtocolError(
                f"array refers to aux frame {data}, the message has {len(frames) - 1}"
            )
        return bytes(frames[data])
    raise BackendProtocolError(f"array data must be ext 3 or a frame index, got {type(data)}")


def _format_of(dtype: str) -> tuple[str, str, int]:
    """(byte order, struct char, itemsize) for a numpy typestr or torch dtype name."""
    typestr = _TORCH_TYPESTRS.get(dtype.removeprefix("torch."), dtype)
    order, kind, size = typestr[:1], typestr[1:2], typestr[2:]
    byte_order = {"<": "<", "|": "<", ">": ">", "=": "="}.get(order)
    char = _FORMATS.get((kind, int(size))) if size.isdigit() else None
    if byte_order is None or char is None:
        raise BackendProtocolError(f"unsupported array dtype {dtype!r}")
    return byte_order, char, int(size)
