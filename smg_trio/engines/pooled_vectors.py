"""Pure. What a reference engine serving a pooling model answers: a deterministic embedding of
the prompt's token ids (docs/pooling.md, "the reference engines").

The same ids give the same vector on every wire and in every process, so a test can compare a
vector that went through the gateway with one computed here. The vector is L2-normalised, as
vLLM's embed pooler normalises by default, and every value is a float32 (what the wires carry:
protobuf `float`, a float32 tensor), so no wire rounds it again.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

DEFAULT_EMBEDDING_DIM: Final = 64
"""The vector length when the model folder's config.json states no `hidden_size`."""


def embedding_dim(config: Mapping[str, Any]) -> int:
    """The vector length of a model: its hidden size (last-token pooling pools a hidden
    state), else `DEFAULT_EMBEDDING_DIM`."""
    size = config.get("hidden_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    return DEFAULT_EMBEDDING_DIM


def pooled_vector(prompt_ids: Sequence[int], dim: int) -> tuple[float, ...]:
    """The unit-length float32 vector of `dim` values the reference model gives `prompt_ids`."""
    digest = hashlib.sha256(b"".join(struct.pack("<I", i) for i in prompt_ids)).digest()
    draw = random.Random(int.from_bytes(digest, "little"))
    raw = [draw.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(math.fsum(v * v for v in raw)) or 1.0
    return struct.unpack(f"<{dim}f", struct.pack(f"<{dim}f", *(v / norm for v in raw)))
