"""Pure. RFC 2397 `data:` URIs carrying an image: the media type and the decoded bytes.

Only base64 image data is taken (what the OpenAI and Anthropic SDKs send); the encoded length
is checked against the byte limit before anything is decoded.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from smg_trio.errors import ClientError


def is_data_uri(url: str) -> bool:
    return url[:5].lower() == "data:"


def image_data(url: str, param: str, *, max_bytes: int) -> bytes:
    """The bytes of a `data:image/...;base64,` URI; a 400 naming `param` otherwise."""
    header, comma, payload = url.partition(",")
    if not comma:
        raise _bad(param, "a data: URI needs a comma before its data")
    media = header[5:].split(";")
    media_type = media[0].strip().lower()
    if not media_type.startswith("image/"):
        raise _bad(param, f"the data: URI's media type is {media_type or 'missing'!r}, not image/*")
    if "base64" not in (p.strip().lower() for p in media[1:]):
        raise _bad(param, "the image data: URI must be base64 (';base64,')")
    if len(payload) > (max_bytes + 2) // 3 * 4 + 4:
        raise _bad(param, f"the image is larger than {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(param, "the data: URI's base64 is invalid") from None
    if not data:
        raise _bad(param, "the data: URI holds no data")
    return data


def _bad(param: str, reason: str) -> ClientError:
    return ClientError(f"{param}: {reason}", code="invalid_image", param=param)


# Image types by their first bytes (a data: URI's label: vLLM's image loader reads the bytes).
_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)


def data_uri_of(data: bytes) -> str:
    """Fetched image bytes as a base64 `data:` URI, labelled by their signature (WebP by its
    RIFF header; an unknown one `application/octet-stream`: decoders read the bytes)."""
    media_type = "application/octet-stream"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        media_type = "image/webp"
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            media_type = kind
            break
    return f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")


def canonical_data_uri(url: str) -> str:
    """A `data:` URI we took (`image_data`) in the form every reader takes: `;base64` last in
    its header (vLLM's fetcher reads the encoding there); the same string when it already is."""
    header, _, payload = url.partition(",")
    if header.lower().endswith(";base64"):
        return url
    media_type = header[5:].split(";")[0].strip().lower()
    return f"data:{media_type};base64,{payload}"
