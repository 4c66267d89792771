"""CPU. An image's bytes as a bounded RGB picture (Pillow), or a 400 naming the part.

Every failure a client can cause is a `ClientError`: bytes that are no image, a truncated file,
a picture above the pixel limit (checked from the header, before any pixel is decoded: a
decompression bomb never expands). RGBA and LA pictures are composited on white, as vLLM's
media loader does (`convert_image_mode`); every other mode is converted to RGB.
"""

from __future__ import annotations

import io
from typing import Final

from PIL import Image, UnidentifiedImageError

from smg_trio.errors import ClientError

# vLLM has no such bound (Pillow's own bomb check is 2 x 89.5 M pixels); a 40 M-pixel default
# keeps one image below 160 MB of RGBA while still taking an 8K photograph (docs/images.md §3).
DEFAULT_MAX_PIXELS: Final = 40_000_000
WHITE: Final = (255, 255, 255)


def decoded_image(data: bytes, param: str, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """`data` decoded into an RGB picture; a 400 naming `param` when it cannot be."""
    try:
        picture = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise _refused(param, f"the image is too large ({exc})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        kind = "an unknown format" if isinstance(exc, UnidentifiedImageError) else str(exc)
        raise _refused(param, f"the data is not an image Pillow can read ({kind})") from None
    with picture:
        width, height = picture.size
        if width <= 0 or height <= 0:
            raise _refused(param, f"the image has no pixels ({width}x{height})")
        if width * height > max_pixels:
            raise _refused(
                param,
                f"the image is {width}x{height} = {width * height} pixels, above the limit of "
                f"{max_pixels}",
            )
        try:
            picture.load()
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise _refused(param, f"the image data is truncated or corrupt ({exc})") from None
        try:
            return _rgb(picture)
        except (OSError, ValueError) as exc:
            raise _refused(
                param, f"the image's mode {picture.mode} cannot become RGB ({exc})"
            ) from None


def _rgb(picture: Image.Image) -> Image.Image:
    """vLLM's `convert_image_mode(picture, "RGB")`: transparency composited on white."""
    if picture.mode == "RGB":
        return picture.copy()
    if picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info:
        rgba = picture if picture.mode == "RGBA" else picture.convert("RGBA")
        converted = Image.new("RGB", rgba.size, WHITE)
        converted.paste(rgba, mask=rgba.split()[3])
        return converted
    return picture.convert("RGB")


def _refused(param: str, reason: str) -> ClientError:
    return ClientError(f"{param}: {reason}", code="invalid_image", param=param)
