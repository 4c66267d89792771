"""Pure. Images in a chat prompt: which parts carry them (how the template sees them:
core/template_content_format.py), and how each processed image's placeholder is expanded into the prompt and located there
(docs/images.md §2).

vLLM's rule, reproduced: the chat template renders one placeholder per image (the model's
`<image>`); the prompt text then gets each placeholder replaced, in order, by that image's
replacement text (the HF processor's expansion: tiles, tags, N x `<image>`), and the whole text
is tokenized once. Each image's span is found by its replacement's ids (or its `span_text`'s,
where the replacement's edges merge with the text around it: Gemma 3's newlines), searched in
order, as vLLM finds it; the span's positions holding the embed token receive the encoder's
outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError
from smg_trio.neutral.media import MediaFeature, MediaField, MediaSpan
from smg_trio.wire import openai as oa


class ImageRef(msgspec.Struct, frozen=True):
    """One image part of a request: where the client put it, and its URL (or `data:` URI)."""

    param: str  # e.g. "messages[1].content[0].image_url"
    url: str


class ProcessedImage(msgspec.Struct, frozen=True, kw_only=True):
    """One image after the model's processor (model/vision.py), not yet placed in a prompt."""

    placeholder: str  # what the chat template writes for an image (e.g. "<image>")
    replacement: str  # the text that replaces this image's placeholder
    embed_token_id: int  # the positions that receive encoder outputs hold this id
    embed_count: int  # how many of them (the encoder's output count)
    fields: tuple[MediaField, ...]
    identifier: str
    # The part of the replacement that is the span, when its edges merge with the text
    # around it into other tokens (Gemma 3's "\n\n" edges: "\n" + "\n\n" is one token);
    # empty: the whole replacement.
    span_text: str = ""
    source: str = ""  # the image as a `data:` URI (neutral/media.py MediaFeature.source)


def chat_image_refs(req: oa.ChatCompletionRequest) -> tuple[ImageRef, ...]:
    """Every image part of a chat request, in prompt order."""
    refs: list[ImageRef] = []
    for index, message in enumerate(req.messages):
        content = getattr(message, "content", None)
        if content is None or isinstance(content, str):
            continue
        for at, part in enumerate(content):
            if isinstance(part, oa.SourcedImagePart) and part.param:
                refs.append(ImageRef(param=part.param, url=part.image_url.url))
            elif isinstance(part, oa.ImagePart):
                param = f"messages[{index}].content[{at}].image_url"
                refs.append(ImageRef(param=param, url=part.image_url.url))
    return tuple(refs)


def expand_placeholders(
    text: str, placeholder: str, images: Sequence[ProcessedImage], param: str
) -> str:
    """`text` with its i-th `placeholder` replaced by image i's replacement text; a count that
    differs from the images' is a 400 (the template, or a text holding the placeholder)."""
    pieces = text.split(placeholder)
    if len(pieces) - 1 != len(images):
        raise ClientError(
            f"the prompt holds {len(pieces) - 1} image placeholder(s) {placeholder!r} for "
            f"{len(images)} image(s): the chat template must write one per image, and text "
            "must not contain the placeholder",
            param=param,
        )
    out = [pieces[0]]
    for image, piece in zip(images, pieces[1:], strict=True):
        out.append(image.replacement)
        out.append(piece)
    return "".join(out)


def place_images(
    prompt_ids: Sequence[int],
    images: Sequence[ProcessedImage],
    tokenizer: TokenizerLike,
    param: str,
) -> tuple[MediaFeature, ...]:
    """Each image's span in `prompt_ids` (its replacement's ids, found in order after the
    previous one), with its `is_embed` mask; the embed positions must number what the
    processor said the encoder outputs."""
    features: list[MediaFeature] = []
    start = 0
    for number, image in enumerate(images):
        span_text = image.span_text or image.replacement
        wanted = tuple(tokenizer.encode(span_text, add_special_tokens=False))
        offset = _find(prompt_ids, wanted, start)
        if offset < 0:
            raise ClientError(
                f"image {number}'s placeholder tokens are not in the tokenized prompt "
                "(its text merged with what surrounds it)",
                param=param,
            )
        mask = tuple(token == image.embed_token_id for token in wanted)
        if sum(mask) != image.embed_count:
            raise ClientError(
                f"image {number}: {sum(mask)} placeholder positions for {image.embed_count} "
                "encoder outputs",
                param=param,
            )
        features.append(
            MediaFeature(
                identifier=image.identifier,
                offset=offset,
                length=len(wanted),
                is_embed=None if all(mask) else mask,
                fields=image.fields,
                anchor=tuple(tokenizer.encode(image.placeholder, add_special_tokens=False)),
                source=image.source,
            )
        )
        start = offset + len(wanted)
    return tuple(features)


def _find(haystack: Sequence[int], needle: Sequence[int], start: int) -> int:
    if not needle:
        return -1
    first = needle[0]
    size = len(needle)
    last = len(haystack) - size
    at = start
    while at <= last:
        if haystack[at] == first and tuple(haystack[at : at + size]) == tuple(needle):
            return at
        at += 1
    return -1


def routing_ids(prompt_ids: Sequence[int], media: Sequence[MediaSpan]) -> tuple[int, ...]:
    """The prompt as prefix-matching routing sees it (cache_aware, docs/images.md §5): each
    image's span holds ids derived from its identifier instead of its placeholder ids, so two
    different images of one size (the same placeholders) part there, as the engine's prefix
    cache parts them (its block hashes take the identifiers), and a repeated image matches.
    Negative, so they never collide with a vocabulary id."""
    if not media:
        return tuple(prompt_ids)
    ids = list(prompt_ids)
    for feature in media:
        digest = hashlib.blake2b(feature.identifier.encode(), digest_size=6).digest()
        seed = int.from_bytes(digest, "big")  # the same in every gateway process
        for at in range(feature.offset, min(feature.offset + feature.length, len(ids))):
            ids[at] = -1 - ((seed + at - feature.offset) & 0x7FFFFFFFFFFF)
    return tuple(ids)
