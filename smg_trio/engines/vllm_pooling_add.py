"""Pure. The reference vLLM EngineCore's pooling ADD (docs/pooling.md §5): an
`EngineCoreRequest` with `sampling_params` nil and `pooling_params` set becomes a request that
finishes in its first step with the pooler's tensor (`engines.pooling`).

Checks as EngineCore's: a prompt within the vocabulary and the context (a pooling prompt may
fill the whole context, nothing follows it); an unknown task or dimensions beyond the
embedding size end the request with an ERROR output (real vLLM's frontend refuses those before
they reach it). Unlike a real engine converted to one pooler, this one serves `embed` and
`classify` both.
"""

from __future__ import annotations

import msgspec

from smg_trio.engines.generation import Generation, Greedy, StopRules
from smg_trio.engines.pooling import pooled_values
from smg_trio.engines.wire_adapter import (
    ActiveRequest,
    Add,
    Command,
    EngineModel,
    Reject,
    prompt_problem,
)
from smg_trio.errors import BackendProtocolError
from smg_trio.wire.vllm_pooling import decode_pooling_params
from smg_trio.wire.vllm_zmq import EngineCoreRequest


def pooling_add(request: EngineCoreRequest, model: EngineModel) -> Command:
    """The command for an ADD without sampling params (see the module doc)."""
    rid, client = request.request_id, request.client_index
    if request.pooling_params is None:
        return Reject(rid, client, "the request has neither sampling nor pooling params")
    try:
        params = decode_pooling_params(request.pooling_params)
    except BackendProtocolError as exc:
        return Reject(rid, client, str(exc))
    prompt = tuple(request.prompt_token_ids or ())
    problem = _prompt_problem(prompt, model)
    if problem is not None:
        return Reject(rid, client, problem)
    if params.task not in ("embed", "classify"):
        return Reject(rid, client, f"unsupported pooling task {params.task!r}")
    try:
        values = pooled_values(
            prompt,
            task=params.task,
            hidden_size=model.hidden_size,
            num_labels=model.num_labels,
            dimensions=params.dimensions,
            use_activation=params.use_activation,
        )
    except ValueError as exc:
        return Reject(rid, client, str(exc))
    generation = Generation(
        model.source, prompt, Greedy(), StopRules(max_tokens=1, max_model_len=model.max_model_len)
    )
    return Add(
        ActiveRequest(rid, client, generation, prompt_ids=prompt, pooled=values),
        received={"pooling_params": msgspec.to_builtins(params)},
    )


def _prompt_problem(prompt: tuple[int, ...], model: EngineModel) -> str | None:
    """`wire_adapter.prompt_problem`'s checks, but the prompt may fill the whole context."""
    if len(prompt) == model.max_model_len:
        return prompt_problem(prompt[:-1], model) or prompt_problem(prompt[-1:], model)
    return prompt_problem(prompt, model)
