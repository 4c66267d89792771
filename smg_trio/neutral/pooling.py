"""Pure. The engine-neutral vocabulary of pooling models (docs/pooling.md): what a model serves
(`Task`, from vLLM's `--runner`/`--convert` concepts), one pooling engine request per input
(`PoolingRequest`) and its one result (`PooledOutput`).

A pooling request never streams: the engine answers once, at its finish, with one tensor (an
embedding, class probabilities). The request layer sends one `PoolingRequest` per input of a
client request; every backend that pools answers each with one `PooledOutput` (the seam:
`backends/base.py: Pooler`).
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from smg_trio.errors import ConfigError


class Task(enum.Enum):
    """What a model serves, by vLLM's task names."""

    GENERATE = "generate"
    EMBED = "embed"
    CLASSIFY = "classify"


class PoolingTask(enum.Enum):
    """The pooler a pooling request asks for: vLLM's `PoolingParams.task`."""

    EMBED = "embed"
    CLASSIFY = "classify"


RUNNERS: Final = ("generate", "pooling")
"""vLLM's `--runner` values we take (its `auto` and `draft` need the weights' architecture)."""
CONVERTS: Final = ("embed", "classify")
"""vLLM's `--convert` values we take with `--runner pooling`."""


def model_tasks(runner: str, convert: str | None) -> frozenset[Task]:
    """The tasks a model run as vLLM's `--runner RUNNER --convert CONVERT` serves.

    `generate` serves generation only; `pooling` serves the pooler `convert` names (`embed`
    when None, as a Llama-type model converted by vLLM is an embedding model by default).
    """
    if runner not in RUNNERS:
        raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    if runner == "generate":
        if convert is not None:
            raise ConfigError(f"convert {convert!r} needs runner 'pooling'")
        return frozenset({Task.GENERATE})
    chosen = convert or "embed"
    if chosen not in CONVERTS:
        raise ConfigError(f"convert must be one of {', '.join(CONVERTS)}, got {chosen!r}")
    return frozenset({Task(chosen)})


class PoolingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One engine request for one input of a pooling client request."""

    request_id: str  # the client-facing id; backends add a unique suffix per input
    input_index: int
    prompt_ids: tuple[int, ...]
    task: PoolingTask
    dimensions: int | None = None  # Matryoshka truncation; None: the model's full size
    use_activation: bool | None = None  # None: the pooler's default (normalise, softmax)


class PooledOutput(msgspec.Struct, frozen=True, kw_only=True):
    """The engine's one answer to a `PoolingRequest`: a float tensor, flat and row-major."""

    values: tuple[float, ...]
    shape: tuple[int, ...]
    prompt_tokens: int


class ModelPooler(msgspec.Struct, frozen=True, kw_only=True):
    """What a pooling model's folder says of its pooler (docs/pooling.md §4): the tasks it is
    served for, its embedding size, its Matryoshka dimensions and its class labels."""

    tasks: frozenset[Task]
    hidden_size: int | None = None
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] | None = None
    labels: tuple[str, ...] = ("LABEL_0", "LABEL_1")

    @property
    def pooling_task(self) -> PoolingTask | None:
        """The pooler the model was converted to; None for a generation model."""
        if Task.EMBED in self.tasks:
            return PoolingTask.EMBED
        if Task.CLASSIFY in self.tasks:
            return PoolingTask.CLASSIFY
        return None


GENERATION_MODEL: Final = ModelPooler(tasks=frozenset({Task.GENERATE}))
