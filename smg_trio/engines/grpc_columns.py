"""Pure. The Generate responses and health answers of the reference gRPC runtimes whose protos
share one layout (vLLM, SGLang, TokenSpeed, MLX): a response holding a `chunk` or a `complete`,
token ids, prompt and completion counts, and logprobs as parallel columns (`OutputLogProbs`
of `TopLogProbs`). Each runtime keeps only its `ColumnsResponses`: its message classes and
where it differs (what it counts, what a streamed complete repeats, how it reports the stop).
TRT-LLM's proto has another layout and builds its own messages (grpc_trtllm.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from smg_trio.engines.grpc_policy import (
    Delivery,
    Ending,
    EngineView,
    JobSpec,
    ServedModel,
    UnaryAnswer,
    columns_logprobs,
    finish_reason,
)


@dataclass(frozen=True)
class ColumnsResponses:
    """How one runtime spells its Generate responses; `chunk` and `complete` build them."""

    response: type[Message]  # GenerateResponse: oneof chunk / complete
    stream_chunk: type[Message]
    complete_message: type[Message]
    output_logprobs: type[Message]
    top_logprobs: type[Message]
    matched: Callable[[Ending], dict[str, Any]]
    """The complete's matched-stop fields for an ending (constructor keywords)."""
    tags_request_id: bool
    """The response carries the request id (SGLang, TokenSpeed)."""
    counts_carried_tokens: bool
    """completion_tokens counts the tokens the message carries (vLLM's servicer), not every
    token generated so far."""
    streamed_complete_repeats_delta: bool = True
    """When streaming, the complete repeats the last step's tokens; else it carries none (MLX)."""
    logprobs_without_tokens: bool = True
    """A message with no tokens still carries an (empty) logprobs message when asked (not MLX)."""

    def chunk(self, model: ServedModel, spec: JobSpec, delivery: Delivery) -> Message:
        ids = delivery.new_ids
        return self._response(
            spec,
            chunk=self.stream_chunk(
                token_ids=ids,
                prompt_tokens=len(spec.prompt_ids),
                completion_tokens=len(ids) if self.counts_carried_tokens else delivery.generated,
                output_logprobs=self._logprobs(model, spec, ids),
            ),
        )

    def complete(self, model: ServedModel, spec: JobSpec, delivery: Delivery) -> Message:
        ending = delivery.ending
        assert ending is not None
        if not spec.stream:
            ids = delivery.output_ids
        else:
            ids = delivery.new_ids if self.streamed_complete_repeats_delta else ()
        return self._response(
            spec,
            complete=self.complete_message(
                output_ids=ids,
                finish_reason=finish_reason(ending),
                prompt_tokens=len(spec.prompt_ids),
                completion_tokens=len(ids) if self.counts_carried_tokens else delivery.generated,
                output_logprobs=self._logprobs(model, spec, ids),
                **self.matched(ending),
            ),
        )

    def _response(self, spec: JobSpec, **field: Message) -> Message:
        if self.tags_request_id:
            return self.response(request_id=spec.request_id, **field)
        return self.response(**field)

    def _logprobs(self, model: ServedModel, spec: JobSpec, ids: tuple[int, ...]) -> Any:
        if spec.logprobs is None or not (ids or self.logprobs_without_tokens):
            return None
        return columns_logprobs(self.output_logprobs, self.top_logprobs, model, ids, spec.logprobs)


def health_answer(response: type[Message], *, healthy: str, unhealthy: str) -> UnaryAnswer:
    """HealthCheck: healthy while serving, with the runtime's own words either way."""

    def answer(request: Any, view: EngineView) -> Message:
        if view.serving:
            return response(healthy=True, message=healthy)
        return response(healthy=False, message=unhealthy)

    return answer
