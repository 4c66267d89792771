"""CPU. The reference vLLM gRPC engine's `media_refs`, as smg-grpc-servicer 0.14.0 serves them
with `--mm-processor inprocess` (docs/images.md §5.1; read in its servicer.py, media_refs.py and
mm_processor.py): the worker fetches each ref and runs the model's processor over the
tokenized prompt, which expands each image's placeholder anchor.

- Refused as the servicer refuses (INVALID_ARGUMENT, its words): refs without `--mm-processor`,
  with text input or beside `mm_inputs`, with no items, a modality other than image here, an
  empty URL, a scheme the worker does not advertise (`http,https,data`; `file` needs a local
  media path, which this engine never has); an anchor count other than the refs' ("multimodal
  placeholder validation failed").
- Processed with the gateway's own image processor for the model's folder (model/vision.py,
  golden-tested against the HF processor, which vLLM's processor runs): each anchor (the
  processor's one-token placeholder) becomes the image's replacement ids.
- Fetching: `data:` URIs only; an `http(s)` ref is refused ("not fetched by this reference
  engine"): the gateway never sends one (it fetches under its own rules and sends `data:`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Final

from smg_trio.engines.grpc_policy import ServedModel, checked_prompt, invalid
from smg_trio.errors import ClientError
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

PROCESSOR: Final = "inprocess"  # what GetServerInfo.mm_processor says with --mm-processor
SCHEMES: Final = "http,https,data"  # its mm_media_ref_schemes (no --allowed-local-media-path)
MAX_ITEM_BYTES: Final = 32 * 1024 * 1024  # the servicer's default per-item limit


def expanded_by_refs(
    request: vllm.GenerateRequest, prompt: Sequence[int], model: ServedModel
) -> tuple[int, ...]:
    """The prompt with every ref's anchor expanded, as the worker's processor expands it."""
    if request.WhichOneof("input") != "tokenized" or request.HasField("mm_inputs"):
        raise invalid(
            "media_refs requires tokenized input and cannot be combined with preprocessed "
            "multimodal inputs"
        )
    if not model.mm_processor:
        raise invalid("media_refs sent but --mm-processor (SMG_VLLM_MM_PROCESSOR) is off")
    items = request.media_refs.items
    if not items:
        raise invalid("media_refs is set but carries no items")
    vision = _vision(model.path, model.engine.served_name)
    accepted = SCHEMES.split(",")
    images = []
    for index, item in enumerate(items):
        where = f"media_refs[{index}]"
        if item.modality != common.IMAGE:
            raise invalid(f"{where}: modality {common.Modality.Name(item.modality)}: images only")
        if not item.url:
            raise invalid(f"{where}: empty url")
        scheme = item.url.partition(":")[0].lower() if ":" in item.url else ""
        if scheme not in accepted:
            raise invalid(
                f"{where}: url scheme '{scheme or 'none'}' is not accepted by this worker "
                f"(accepted: {SCHEMES})"
            )
        if scheme != "data":
            raise invalid(f"{where}: {scheme} URLs are not fetched by this reference engine")
        try:
            images.append(vision.process(_data_of(item.url, where), where))
        except ClientError as error:
            raise invalid(error.message) from None
    anchor = model.tokenizer.encode(vision.placeholder, add_special_tokens=False)
    if len(anchor) != 1:
        raise invalid(f"the placeholder {vision.placeholder!r} is not one token")
    found = [at for at, token in enumerate(prompt) if token == anchor[0]]
    if len(found) != len(images):
        raise invalid(
            "multimodal placeholder validation failed: "
            f"{len(found)} {vision.placeholder!r} anchors for {len(images)} media_refs"
        )
    expanded: list[int] = []
    at = 0
    for position, image in zip(found, images, strict=True):
        expanded.extend(prompt[at:position])
        expanded.extend(model.tokenizer.encode(image.replacement, add_special_tokens=False))
        at = position + 1
    expanded.extend(prompt[at:])
    return checked_prompt(expanded, model)


def _data_of(url: str, where: str) -> bytes:
    """A `data:` URL's bytes as vLLM's fetcher reads them: `;base64` last in the header, the
    media type not looked at (its image loader reads the bytes)."""
    header, comma, payload = url.partition(",")
    if not comma or not header.lower().endswith(";base64"):
        raise invalid(f"{where}: only base64 data: URLs are taken")
    if len(payload) > (MAX_ITEM_BYTES + 2) // 3 * 4:
        raise invalid(f"{where}: larger than {MAX_ITEM_BYTES} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{where}: invalid base64") from None


@cache
def _vision(path: Path, model_id: str) -> ImageProcessor:
    vision = load_vision(path, model_id)
    if vision is None or isinstance(vision, VisionRefusal):
        reason = "a text-only model" if vision is None else vision.reason
        raise invalid(f"this worker's model takes no images ({reason})")
    return vision
