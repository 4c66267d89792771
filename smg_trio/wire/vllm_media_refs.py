"""Pure. A prompt's images as vLLM gRPC `media_refs`, for a worker that processes images itself
(docs/images.md §5.1).

smg-grpc-servicer 0.14.0 with `--mm-processor` (advertised in `GetServerInfo.mm_processor` and
`mm_media_ref_schemes`) takes `GenerateRequest.media_refs`: tokenized input holding one
UNEXPANDED placeholder anchor per image, and one URL per image in prompt order; it fetches
each URL with vLLM's own fetcher and runs vLLM's processor over the ids, which finds each
anchor and expands it (a count of anchors other than the images' fails the request there).

What we send: our prompt with each image's span folded back to its anchor (the placeholder
token the chat template wrote, e.g. Qwen-VL's `<|image_pad|>`), and each image as a `data:`
URI of the bytes we fetched ourselves, under our own rules (docs/images.md §3): the worker
fetches nothing, so it can never be led to an address we would refuse, and it processes the
same bytes we counted. Only when every image has its source (a request's
`mm_processor_kwargs` leave none: the servicer passes no processor settings), every anchor is
one token, the anchors occur exactly once per image in the folded prompt, and the worker takes
`data`; else the tensors go (`vllm_grpc_media`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from smg_trio.neutral.media import MediaFeature
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.vllm_mm_features import checked_features


def media_ref_schemes(advertised: str) -> frozenset[str]:
    """`GetServerInfo.mm_media_ref_schemes` ("http,https,data"): the schemes, lowercased;
    empty when the worker processes no images itself."""
    return frozenset(s.strip().lower() for s in advertised.split(",") if s.strip())


def folded_prompt(features: Sequence[MediaFeature], prompt_ids: Sequence[int]) -> list[int]:
    """The prompt with each image's span replaced by its anchor (the ids before expansion)."""
    ids: list[int] = []
    at = 0
    for feature in features:
        ids.extend(prompt_ids[at : feature.offset])
        ids.extend(feature.anchor)
        at = feature.offset + feature.length
    ids.extend(prompt_ids[at:])
    return ids


def refs_fit(
    features: Sequence[MediaFeature], prompt_ids: Sequence[int], schemes: Collection[str]
) -> bool:
    """Whether these images can go as `media_refs` to a worker taking `schemes` (module doc)."""
    if not features or "data" not in schemes:
        return False
    if any(not f.source or len(f.anchor) != 1 or f.modality != "image" for f in features):
        return False
    checked_features(features, len(prompt_ids))
    folded = folded_prompt(features, prompt_ids)
    anchors = {f.anchor[0] for f in features}
    return sum(folded.count(anchor) for anchor in anchors) == len(features)


def vllm_media_refs(features: Sequence[MediaFeature]) -> vllm.MediaRefs:
    """One `MediaRef` per image, in prompt order: its `data:` URI."""
    return vllm.MediaRefs(
        items=[vllm.MediaRef(modality=common.IMAGE, url=f.source) for f in features]
    )
