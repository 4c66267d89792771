"""Pure. The reference vLLM engine's reading of an ADD's `mm_features` (docs/wire.md §A.10):
every check a real EngineCore makes implicitly (decoding tensors, slicing, the model's schema),
made explicitly, so a frontend's mistake is a named problem here instead of a dead engine.

Checked per feature: the map's keys; `mm_position` inside the prompt with an `is_embed` mask
of its length whose True positions hold the same token; each tensor `[dtype, shape, data]`
with `data` inline (ext 3) or a valid extra-frame index, and exactly shape x dtype bytes; the
field spec `[kind, kwargs]` of a known kind. `summary` reports what arrived for the test-only
`smg_trio_received` utility.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.engines.vllm_mm_fields import family_fields_problem
from smg_trio.neutral.media import DTYPE_SIZES

_KINDS = ("batched", "flat", "shared")
MEDIA_CACHE_KEYS: Final = 256  # the reference engine's receiver cache, by count


class MediaKeys:
    """vLLM's receiver cache of image items, reduced to its keys (an LRU by count): an item
    sent with data is held; `data: nil` for a key it does not hold is a cache miss."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: OrderedDict[str, None] = OrderedDict()

    def missing(self, features: Any) -> tuple[str, ...]:
        """The nil keys not held (the request is then refused: nothing is stored); else every
        key is stored or refreshed, in order."""
        feature_list = features if isinstance(features, list) else []
        absent = tuple(
            f["identifier"]
            for f in feature_list
            if f.get("data") is None and f["identifier"] not in self._held
        )
        if absent:
            return absent
        for feature in feature_list:
            self._held[feature["identifier"]] = None
            self._held.move_to_end(feature["identifier"])
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return ()

    def clear(self) -> None:
        self._held.clear()


def mm_features_problem(
    features: Any, frames: Sequence[bytes], prompt: Sequence[int], model_type: str = ""
) -> str | None:
    """Why `features` (decoded msgpack) would break the engine, or None; each image's kwargs
    also against `model_type`'s field config (engines/vllm_mm_fields.py)."""
    if features is None:
        return None
    if not isinstance(features, list):
        return "mm_features is not an array"
    end = 0
    for number, feature in enumerate(features):
        where = f"mm_features[{number}]"
        if not isinstance(feature, dict) or not isinstance(feature.get("identifier"), str):
            return f"{where} is not a map with an identifier"
        position = feature.get("mm_position")
        if not isinstance(position, dict):
            return f"{where}.mm_position is missing"
        offset, length = position.get("offset"), position.get("length")
        if not isinstance(offset, int) or not isinstance(length, int) or length <= 0:
            return f"{where}.mm_position needs integer offset and length"
        if offset < end or offset + length > len(prompt):
            return (
                f"{where}.mm_position [{offset}, {offset + length}) overlaps or leaves the prompt"
            )
        end = offset + length
        mask = position.get("is_embed")
        if mask is not None:
            problem = _tensor_problem(mask, frames, f"{where}.is_embed")
            if problem is not None:
                return problem
            if mask[0] != "bool" or list(mask[1]) != [length]:
                return f"{where}.is_embed is not bool [{length}]"
            embedded = {prompt[offset + i] for i, flag in enumerate(_bytes(mask, frames)) if flag}
            if len(embedded) != 1:
                return f"{where}.is_embed marks {len(embedded)} distinct token ids, not one"
        data = feature.get("data")
        if data is None:
            continue
        if not isinstance(data, dict) or not data:
            return f"{where}.data is not a map of kwargs"
        for name, element in data.items():
            problem = _element_problem(element, frames, f"{where}.data.{name}")
            if problem is not None:
                return problem
        problem = family_fields_problem(model_type, data, lambda tensor: _int64s(tensor, frames))
        if problem is not None:
            return f"{where}.data: {problem}"
    return None


def _element_problem(element: Any, frames: Sequence[bytes], where: str) -> str | None:
    if not isinstance(element, dict) or set(element) != {"data", "field"}:
        return f"{where} is not {{data, field}}"
    field = element["field"]
    if not isinstance(field, list) or len(field) != 2 or field[0] not in _KINDS:
        return f"{where}.field is not [kind, kwargs] of a known kind"
    kwargs = field[1]
    if not isinstance(kwargs, dict):
        return f"{where}.field's kwargs are not a map"
    tensor = element["data"]
    problem = _tensor_problem(tensor, frames, where)
    if problem is not None:
        return problem
    if field[0] == "flat":
        dim = kwargs.get("dim", 0)
        if not isinstance(dim, int) or not 0 <= dim < len(tensor[1]):
            return f"{where}: a flat field needs an axis of its tensor (dim {dim})"
        if not isinstance(kwargs.get("slices"), list):
            return f"{where}: a flat field needs slices"
    return None


def _tensor_problem(tensor: Any, frames: Sequence[bytes], where: str) -> str | None:
    if not isinstance(tensor, list) or len(tensor) != 3:
        return f"{where} is not [dtype, shape, data]"
    dtype, shape, data = tensor
    size = DTYPE_SIZES.get(dtype) if isinstance(dtype, str) else None
    if size is None:
        return f"{where}: unknown dtype {dtype!r}"
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return f"{where}: bad shape {shape!r}"
    if isinstance(data, int):
        if not 1 <= data < len(frames):
            return f"{where}: frame index {data} out of range ({len(frames)} frames)"
    elif not (isinstance(data, msgspec.msgpack.Ext) and data.code == 3):
        return f"{where}: data is neither ext 3 nor a frame index"
    actual = _size(tensor, frames)
    if actual != math.prod(shape) * size:
        return f"{where}: {actual} bytes for {dtype} {shape}"
    return None


def _size(tensor: list[Any], frames: Sequence[bytes]) -> int:
    data = tensor[2]
    return len(frames[data]) if isinstance(data, int) else len(data.data)


def _bytes(tensor: list[Any], frames: Sequence[bytes]) -> bytes:
    data = tensor[2]
    return bytes(frames[data]) if isinstance(data, int) else bytes(data.data)


def _int64s(tensor: list[Any], frames: Sequence[bytes]) -> list[int]:
    raw = _bytes(tensor, frames)
    return [int.from_bytes(raw[at : at + 8], "little", signed=True) for at in range(0, len(raw), 8)]


def summary(features: Any) -> list[dict[str, Any]]:
    """What arrived, per feature: identifier, span, whether data came, each tensor's shape."""
    out: list[dict[str, Any]] = []
    for feature in features or ():
        data = feature.get("data")
        position = feature["mm_position"]
        out.append(
            {
                "identifier": feature["identifier"],
                "offset": position["offset"],
                "length": position["length"],
                "has_data": data is not None,
                "shapes": {k: [v["data"][0], v["data"][1]] for k, v in (data or {}).items()},
            }
        )
    return out
