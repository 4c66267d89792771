"""Pure. The engine-neutral vocabulary of images in a prompt (docs/images.md).

A processed image is a `MediaFeature`: where its placeholder span sits in the prompt ids, which
of those positions receive the encoder's outputs (`is_embed`), the processor's tensors as raw
little-endian C-order bytes (`Tensor`) with how the engine batches them (`FieldKind`), and a
stable `identifier` (a digest of the model, the image bytes and the processor's settings) that
keys the engine's encoder and prefix caches. Wire builders encode it; nothing here knows a wire.
"""

from __future__ import annotations

import enum
import math
from typing import Final

import msgspec

# Bytes per element of the dtypes a processor emits, by torch's name without "torch.".
DTYPE_SIZES: Final = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "uint8": 1,
    "bool": 1,
}


class Tensor(msgspec.Struct, frozen=True):
    """One processor output: torch's dtype name, its shape (`()` a scalar), its raw bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @property
    def element_count(self) -> int:
        return math.prod(self.shape)

    def consistent(self) -> bool:
        """The bytes are exactly shape x dtype (the engine would read garbage otherwise)."""
        size = DTYPE_SIZES.get(self.dtype)
        return size is not None and len(self.data) == self.element_count * size


class FieldKind(enum.StrEnum):
    """How the engine joins one kwarg across images (vLLM's MultiModalFieldConfig factories)."""

    BATCHED = "batched"  # one element per image: the tensor is this image's element
    FLAT = "flat"  # concatenated along `dim`: the tensor is this image's slice


class MediaField(msgspec.Struct, frozen=True, kw_only=True):
    """One processor kwarg of one image (e.g. Idefics3's `pixel_values`)."""

    name: str
    tensor: Tensor
    kind: FieldKind
    keep_on_cpu: bool = False
    dim: int = 0  # FLAT only: the concatenation axis
    # BATCHED only: the images' first dimensions may differ (LLaVA-NeXT's tiles); where one
    # tensor must hold every image (gRPC's mm_inputs) they are zero-padded to the largest, as
    # vLLM's own processor does, and the model cuts each back by its size field.
    pad_first_dim: bool = False


class MediaSpan(msgspec.Struct, frozen=True):
    """Where one image sits in a prompt, by the identifier the engine hashes its blocks with:
    what routing needs of an image (docs/images.md §5)."""

    identifier: str
    offset: int
    length: int


class MediaFeature(msgspec.Struct, frozen=True, kw_only=True):
    """One image as the engine takes it: its span in the prompt and its tensors."""

    identifier: str
    offset: int  # the first id of the whole replacement span in the prompt ids
    length: int  # the span's length
    is_embed: tuple[bool, ...] | None  # per span position; None: every position is embedded
    fields: tuple[MediaField, ...]
    modality: str = "image"
    # The placeholder's ids as the chat template wrote them, before the span replaced them.
    anchor: tuple[int, ...] = ()
    # The image as a `data:` URI (its bytes as fetched or sent), for a worker that processes
    # images itself (vLLM gRPC `media_refs`, docs/images.md §5.1); "" when the image must go
    # as its tensors (processed with a request's mm_processor_kwargs, which refs cannot carry).
    source: str = ""

    @property
    def embed_count(self) -> int:
        return self.length if self.is_embed is None else sum(self.is_embed)

    @property
    def span(self) -> MediaSpan:
        return MediaSpan(self.identifier, self.offset, self.length)

    @property
    def nbytes(self) -> int:
        return sum(len(f.tensor.data) for f in self.fields)


class ImageInput(enum.Enum):
    """What a (runtime, wire) takes of an image (the capability table's `images`)."""

    REFUSED = "refused"  # the wire carries no image: a 400 naming the part
    MM_FEATURES = "mm_features"  # processed tensors and expanded placeholders (vLLM EngineCore)
    MM_INPUTS = "mm_inputs"  # the same, as one gRPC MultimodalInputs (vLLM's, SGLang's)
