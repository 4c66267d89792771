"""CPU. What every family's image processing shares (docs/images.md §4): its transformers
image processor built from the folder's settings, run on one picture with a failure as the
client's 400, the request's `mm_processor_kwargs` refused where a family takes none, and the
image's identifier (a digest of the settings and the bytes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from smg_trio.errors import ClientError, ConfigError

# Keys of a folder's image processor settings that name it rather than configure it.
NOT_KWARGS: Final = frozenset({"image_processor_type", "processor_class", "auto_map"})

P = TypeVar("P")


def processor_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in NOT_KWARGS}


def built_processor(build: Callable[..., P], kwargs: Mapping[str, Any], family: str) -> P:
    """`build(**kwargs)`; settings it refuses are the operator's (a ConfigError at startup)."""
    try:
        return build(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"the {family} image processor config is invalid: {exc}") from exc


def settings_salt(model_id: str, **settings: Any) -> bytes:
    """The identifier's salt: the model and every setting that changes the tensors."""
    return json.dumps({"model": model_id, **settings}, sort_keys=True).encode()


def image_identifier(salt: bytes, data: bytes) -> str:
    digest = hashlib.blake2b(salt, digest_size=32)
    digest.update(data)
    return digest.hexdigest()


def refuse_options(options: Mapping[str, Any] | None) -> None:
    """A family that takes no `mm_processor_kwargs`: the first key is a 400 naming it."""
    if options:
        key = next(iter(options))
        raise ClientError(
            f"mm_processor_kwargs.{key}: not taken for this model's images yet",
            param=f"mm_processor_kwargs.{key}",
        )


def option_refusal(key: str, reason: str) -> ClientError:
    """The 400 for one `mm_processor_kwargs` key, naming it."""
    param = f"mm_processor_kwargs.{key}"
    return ClientError(f"{param}: {reason}", param=param)


def processed(
    processor: Callable[..., Mapping[str, Any]],
    images: list[Any],
    param: str,
    **call: Any,
) -> Mapping[str, Any]:
    """`processor(images=..., return_tensors="np", **call)`; a picture it cannot take (an
    aspect ratio, a size) is the client's 400 naming `param`."""
    try:
        return processor(images=images, return_tensors="np", **call)
    except (ValueError, TypeError, OSError) as exc:
        raise ClientError(
            f"{param}: the image cannot be processed ({exc})", code="invalid_image", param=param
        ) from None
