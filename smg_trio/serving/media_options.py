"""I/O (startup). The image flags of `smg-trio serve`, by vLLM's names (docs/images.md §3):
`--limit-mm-per-prompt` (vLLM's JSON `{"image": N}`, or N), `--allowed-media-domains HOST...`,
`--allowed-local-media-path DIR` and the engines' `--[no-]mm-device-do-normalize` (§4.2); and
the `ImageLimits` the gateway is built with.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from smg_trio.core.media_addresses import MediaPolicy
from smg_trio.errors import ConfigError
from smg_trio.request.images import ImageLimits

if TYPE_CHECKING:
    from smg_trio.serving.config import GatewayConfig

MEDIA_FLAGS = (
    "limit_mm_per_prompt",
    "allowed_media_domains",
    "allowed_local_media_path",
    "mm_device_do_normalize",
)


def add_media_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--limit-mm-per-prompt",
        type=_image_limit,
        metavar="JSON",
        help='images per request, vLLM\'s form {"image": N} or N (default 16)',
    )
    serve.add_argument(
        "--allowed-media-domains",
        nargs="+",
        metavar="HOST",
        help="fetch image URLs from these hosts only, at any address (default: any host at a "
        "public address; loopback, private, link-local and metadata addresses refused)",
    )
    serve.add_argument(
        "--allowed-local-media-path",
        metavar="DIR",
        help="take file:// image URLs under this folder (default: refused)",
    )
    serve.add_argument(
        "--mm-device-do-normalize",
        action=argparse.BooleanOptionalAction,
        help="the engines' own setting, as given to them (vLLM's flag): whether they rescale "
        "and normalise pixels themselves, so Qwen-VL pixels go raw as uint8 (default: vLLM's, "
        "on for the families that support it); --no-mm-device-do-normalize sends normalised "
        "float32",
    )


def _image_limit(text: str) -> int:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON or an integer: {text!r}") from None
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"image"})
        if unknown:
            raise argparse.ArgumentTypeError(f"only images are taken, not {unknown}")
        value = value.get("image", 16)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise argparse.ArgumentTypeError(f"the image limit must be a count, got {text!r}")
    return value


def image_limits(config: GatewayConfig) -> ImageLimits:
    """The gateway's ImageLimits from the config (its folder resolved, its hosts lowercased)."""
    if config.limit_mm_per_prompt < 0:
        raise ConfigError(
            f"limit_mm_per_prompt must be 0 or more, got {config.limit_mm_per_prompt}"
        )
    local = config.allowed_local_media_path
    root = None
    if local is not None:
        root = os.path.realpath(local)
        if not os.path.isdir(root):
            raise ConfigError(f"allowed_local_media_path {local!r} is not a folder")
    domains = tuple(d.strip().lower().rstrip(".") for d in config.allowed_media_domains)
    if any(not d for d in domains):
        raise ConfigError("an allowed media domain must not be empty")
    return ImageLimits(
        max_images=config.limit_mm_per_prompt,
        policy=MediaPolicy(allowed_domains=domains, allowed_local_path=root),
    )
