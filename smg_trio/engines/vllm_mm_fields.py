"""Pure. The reference vLLM engine's reading of one image's kwargs against its model family's
field config (docs/images.md §5): what vLLM's `_get_mm_fields_config` of that family declares
(each kwarg's name, batched or flat, kept on the CPU or not) and what its model code takes
(dtype, rank, and the shapes that must agree: Gemma 3's `pixel_values` rows and `num_patches`,
LLaVA-NeXT's `[tiles, 3, H, W]` and its `image_sizes` pair). A family not listed is checked
only as every map is (engines/vllm_mm_checks.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

# An int64 tensor's values: `ints(data[name]["data"])`.
Ints = Callable[[list[Any]], list[int]]


class FieldSpec(NamedTuple):
    kind: str  # "batched" or "flat"
    dtypes: tuple[str, ...]
    rank: int  # of one image's tensor
    keep_on_cpu: bool = False


PIXELS_4D: Final = FieldSpec("flat", ("float32",), 4)
COUNT: Final = FieldSpec("batched", ("int64",), 0, keep_on_cpu=True)

_FAMILY_FIELDS: Final[Mapping[str, Mapping[str, FieldSpec]]] = {
    "idefics3": {
        "pixel_values": PIXELS_4D,
        "pixel_attention_mask": FieldSpec("flat", ("bool", "int64"), 3),
        "num_patches": COUNT,
    },
    "llava": {"pixel_values": FieldSpec("batched", ("float32",), 3)},
    "llava_next": {
        "pixel_values": FieldSpec("batched", ("float32",), 4),
        "image_sizes": FieldSpec("batched", ("int64",), 1, keep_on_cpu=True),
    },
    "gemma3": {"pixel_values": PIXELS_4D, "num_patches": COUNT},
}
_QWEN: Final = {
    "pixel_values": FieldSpec("flat", ("float32", "uint8"), 2),
    "image_grid_thw": FieldSpec("batched", ("int64",), 1, keep_on_cpu=True),
}
FAMILY_FIELDS: Final = {**_FAMILY_FIELDS, "qwen2_vl": _QWEN, "qwen2_5_vl": _QWEN, "qwen3_vl": _QWEN}


def _llava_next(data: Mapping[str, Any], value: Ints) -> str | None:
    shape = data["pixel_values"]["data"][1]
    if shape[1] != 3 or shape[0] < 1:
        return f"pixel_values {shape} is not [tiles, 3, H, W]"
    if data["image_sizes"]["data"][1] != [2]:
        return "image_sizes is not one (height, width) pair"
    if any(n <= 0 for n in value(data["image_sizes"]["data"])):
        return "image_sizes holds a size that is not positive"
    return None


def _gemma3(data: Mapping[str, Any], value: Ints) -> str | None:
    shape = data["pixel_values"]["data"][1]
    patches = value(data["num_patches"]["data"])
    if shape[1] != 3 or [shape[0]] != patches:
        return f"pixel_values {shape} does not hold num_patches {patches} pictures of 3 channels"
    return None


def _qwen(data: Mapping[str, Any], value: Ints) -> str | None:
    rows = data["pixel_values"]["data"][1][0]
    grid = value(data["image_grid_thw"]["data"])
    if len(grid) != 3 or grid[0] * grid[1] * grid[2] != rows:
        return f"pixel_values' {rows} patches are not image_grid_thw {grid}'s product"
    return None


SHAPE_RULES: Final[Mapping[str, Callable[[Mapping[str, Any], Ints], str | None]]] = {
    "llava_next": _llava_next,
    "gemma3": _gemma3,
    "qwen2_vl": _qwen,
    "qwen2_5_vl": _qwen,
    "qwen3_vl": _qwen,
}


def family_fields_problem(model_type: str, data: Mapping[str, Any], value: Ints) -> str | None:
    """Why one image's `data` (kwarg -> {data: [dtype, shape, bytes], field: [kind, kwargs]},
    each already a well-formed tensor) does not fit `model_type`'s field config, or None.
    `value(tensor)`: an int64 tensor's values."""
    specs = FAMILY_FIELDS.get(model_type)
    if specs is None:
        return None
    if set(data) != set(specs):
        return f"kwargs {sorted(data)} are not {model_type}'s {sorted(specs)}"
    for name, spec in specs.items():
        dtype, shape, _ = data[name]["data"]
        kind, kwargs = data[name]["field"]
        if kind != spec.kind or bool(kwargs.get("keep_on_cpu")) != spec.keep_on_cpu:
            return (
                f"{name} is {kind} (keep_on_cpu {kwargs.get('keep_on_cpu')}) where "
                f"{model_type}'s field config says {spec.kind} (keep_on_cpu {spec.keep_on_cpu})"
            )
        if dtype not in spec.dtypes or len(shape) != spec.rank:
            return f"{name} is {dtype} {shape}, not {'/'.join(spec.dtypes)} of rank {spec.rank}"
    rule = SHAPE_RULES.get(model_type)
    return rule(data, value) if rule is not None else None
