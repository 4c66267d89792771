"""CPU. numpy arrays as the neutral `Tensor` (raw little-endian C-order bytes, torch's dtype
names), and the two field shapes processors emit."""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from smg_trio.neutral.media import FieldKind, MediaField, Tensor

_DTYPES: Final = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.int64): "int64",
    np.dtype(np.int32): "int32",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.bool_): "bool",
}


def tensor_of(array: npt.NDArray[np.generic]) -> Tensor:
    """`array` as a Tensor. A 0-d array keeps its shape `()` (np.ascontiguousarray would make
    it (1,))."""
    dtype = np.dtype(array.dtype).newbyteorder("<")
    name = _DTYPES.get(np.dtype(array.dtype))
    if name is None:
        raise TypeError(f"no torch name for numpy dtype {array.dtype}")
    data = np.asarray(array, dtype=dtype).tobytes(order="C")
    return Tensor(name, tuple(int(n) for n in array.shape), data)


def flat_field(name: str, array: npt.NDArray[np.generic], *, dim: int = 0) -> MediaField:
    """A kwarg the engine concatenates across images along `dim`."""
    return MediaField(name=name, tensor=tensor_of(array), kind=FieldKind.FLAT, dim=dim)


def scalar_field(
    name: str, value: int, *, kind: FieldKind, keep_on_cpu: bool = False
) -> MediaField:
    """An int64 scalar kwarg (e.g. Idefics3's `num_patches`)."""
    return MediaField(
        name=name,
        tensor=tensor_of(np.array(value, dtype=np.int64)),
        kind=kind,
        keep_on_cpu=keep_on_cpu,
    )
