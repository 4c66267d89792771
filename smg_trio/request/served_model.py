"""Pure. One model the gateway serves, as a request sees it (docs/fleet.md §4): its folder
(tokenizer, template, EOS ids, context length), its `PromptModel` with its own parsers, and
the names clients may put in `model`. The first name is the model's key: its workers carry it
(`Worker.model`), so the pool routes a request only to them, and metrics and log lines say it.
"""

from __future__ import annotations

from dataclasses import dataclass

from smg_trio.core.frontend_options import DEFAULT_FRONTEND, FrontendOptions
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.model.folder import ModelDir
from smg_trio.neutral.pooling import GENERATION_MODEL, ModelPooler, Task
from smg_trio.request.endpoints import ModelNotFound
from smg_trio.request.preparation import prompt_model_for


class TaskNotServed(ClientError):
    """A path for a task the model does not serve: a 404 in vLLM's NotFoundError shape."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=404, code="model_not_found", param="model")

    @property
    def error_type(self) -> str:
        return "NotFoundError"


@dataclass(frozen=True, slots=True)
class ServedModel:
    names: tuple[str, ...]  # never empty; names[0] is the key
    folder: ModelDir
    prompt_model: PromptModel
    pooler: ModelPooler = GENERATION_MODEL  # its tasks and pooler (docs/pooling.md §4)

    @property
    def key(self) -> str:
        return self.names[0]

    def check(self, model: str | None) -> None:
        """A request for this model may name it by any of its names, or none."""
        if model is not None and model not in self.names:
            raise ModelNotFound(model)

    def check_task(self, task: Task, path: str) -> None:
        """A path for a task this model does not serve: a 404 naming the model (docs/pooling.md
        §4; vLLM does not route the path at all)."""
        if task not in self.pooler.tasks:
            serves = ", ".join(sorted(t.value for t in self.pooler.tasks))
            raise TaskNotServed(
                f"The model `{self.key}` does not support {path} (it serves: {serves})"
            )


def served_model(
    folder: ModelDir,
    names: tuple[str, ...] = (),
    *,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
    stream_interval: int = 1,
    pooler: ModelPooler = GENERATION_MODEL,
    frontend: FrontendOptions = DEFAULT_FRONTEND,
) -> ServedModel:
    """`folder` served under `names` (its own name without any) with its parsers."""
    return ServedModel(
        names=names or (folder.served_name,),
        folder=folder,
        prompt_model=prompt_model_for(
            folder, tool_call_parser, reasoning_parser, stream_interval, frontend
        ),
        pooler=pooler,
    )
