"""Pure. A pooling path's body → its `PoolingPlan` (docs/pooling.md §3): the task the path
asks for, checked against what the model was converted to, `dimensions` checked against its
Matryoshka support, and every input made into checked prompt ids (`pooling_inputs.py`).
Every problem is a 400 in vLLM's words.
"""

from __future__ import annotations

import datetime as _dt

from smg_trio.core.pooling_inputs import PoolingPlan, input_prompts
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import ModelPooler, PoolingTask, Task
from smg_trio.wire.openai_pooling import CLASSIFY_PATH, EMBEDDINGS_PATH, PoolingOptions

_TOKEN_TASKS = ("token_embed", "token_classify")


def prepare_pooling(
    path: str,
    options: PoolingOptions,
    model: PromptModel,
    pooler: ModelPooler,
    *,
    request_id: str,
    now: _dt.datetime,
) -> PoolingPlan:
    task = path_task(path, options, pooler)
    if options.dimensions is not None and task is PoolingTask.EMBED:
        check_dimensions(options.dimensions, model.name, pooler)
    prompts = input_prompts(options, model, now=now)
    return PoolingPlan(
        path=path,
        request_id=options.request_id or request_id,
        model=model.name,
        task=task,
        prompts=prompts,
        options=options,
    )


def served_task(path: str, pooler: ModelPooler) -> Task:
    """The model task a pooling path needs: embeddings embed, classify classifies, /pooling
    needs a pooling model (the one it was converted to)."""
    if path == EMBEDDINGS_PATH:
        return Task.EMBED
    if path == CLASSIFY_PATH:
        return Task.CLASSIFY
    own = pooler.pooling_task
    return Task.EMBED if own is None else Task(own.value)


def path_task(path: str, options: PoolingOptions, pooler: ModelPooler) -> PoolingTask:
    """The pooler a path asks for: embeddings embed, classify classifies, /pooling takes
    `task` (default: the model's own)."""
    if path == EMBEDDINGS_PATH:
        return PoolingTask.EMBED
    if path == CLASSIFY_PATH:
        return PoolingTask.CLASSIFY
    own = pooler.pooling_task
    supported = [] if own is None else [own.value]
    if options.task is None:
        if own is None:
            raise ClientError("the model serves no pooling task", param="task")
        return own
    if options.task in _TOKEN_TASKS:
        raise ClientError(
            f"Unsupported task: {options.task!r}: per-token pooling is not served by this "
            f"gateway. Supported tasks: {supported}",
            param="task",
        )
    if options.task not in supported:
        raise ClientError(
            f"Unsupported task: {options.task!r} Supported tasks: {supported}", param="task"
        )
    return PoolingTask(options.task)


def check_dimensions(dimensions: int, model_name: str, pooler: ModelPooler) -> None:
    """vLLM's checks of `dimensions` for an embedding model."""
    if not pooler.matryoshka:
        raise ClientError(
            f"Model {model_name!r} does not support Matryoshka embeddings; dimensions must "
            f"be unset (received dimensions={dimensions}).",
            param="dimensions",
        )
    size = pooler.hidden_size
    if size is not None and not 1 <= dimensions <= size:
        raise ClientError(
            f"Model {model_name!r} only supports dimensions in range [1, {size}], "
            f"got {dimensions}.",
            param="dimensions",
        )
    allowed = pooler.matryoshka_dimensions
    if allowed is not None and dimensions not in allowed:
        raise ClientError(
            f"Model {model_name!r} only supports Matryoshka dimensions {list(allowed)}, "
            f"got {dimensions}.",
            param="dimensions",
        )
