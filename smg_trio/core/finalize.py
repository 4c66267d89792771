"""Pure. The last request-building step: shape a GeneratePlan for one worker's runtime and wire.

`finalize` is the single polymorphism point over (runtime, wire) (ARCHITECTURE.md §2, spec
stops-and-finalize.md §1). It decides what the ENGINE is asked to stop on and returns the
router obligation: the stop strings the engine will never see. What the CLIENT sees is always
enforced by the router's stop scanner from `plan.stop_spec`, on every runtime.

- SGLang gRPC, vLLM ZMQ, TokenSpeed ZMQ are token-only for stops: string stops are stripped;
  each one that encodes to exactly one token becomes a stop token id (dedup, order kept).
- vLLM ZMQ (a tokenizer-less EngineCore) also gets the tokenizer's EOS ids, unless ignore_eos.
- vLLM gRPC, TokenSpeed gRPC, TRT-LLM gRPC keep their strings: the engine matches them too.
- MLX gRPC has no string-stop field: a request with string stops is the client's error.
- UNSPECIFIED, or a runtime with no adapter for the wire, raises UnsupportedRuntime.
n > 1 becomes n engine requests (`<id>-<i>`, seed + i): no engine wire here fans out for us.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from smg_trio.core.plan import GeneratePlan, SamplingParams, StopSpec
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, UnsupportedRuntime
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire, require_adapter


class WorkerTarget(msgspec.Struct, frozen=True, kw_only=True):
    """What finalize needs to know about the worker a request goes to."""

    runtime: Runtime
    wire: Wire


class EngineRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One engine request (one choice). Wire modules encode it for their engine."""

    request_id: str
    choice_index: int
    endpoint: Endpoint  # some engines' request builders differ per client endpoint (TRT-LLM, vLLM)
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams


class Finalized(msgspec.Struct, frozen=True, kw_only=True):
    runtime: Runtime
    wire: Wire
    requests: tuple[EngineRequest, ...]
    router_stops: tuple[str, ...]  # the obligation: strings the engine will never see
    stop_spec: StopSpec  # what the router's scanner enforces for every choice


def finalize(
    plan: GeneratePlan, worker: WorkerTarget, tokenizer: TokenizerLike | None
) -> Finalized:
    """Shape `plan` for `worker`; raise before any I/O when the worker cannot take it."""
    require_adapter(worker.runtime, worker.wire)
    sampling = plan.sampling
    obligation: tuple[str, ...] = ()
    match worker.runtime:
        case Runtime.SGLANG:
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
        case Runtime.VLLM if worker.wire is Wire.ZMQ:
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
            sampling = _fold_eos(sampling, tokenizer)
        case Runtime.TOKENSPEED if worker.wire is Wire.ZMQ:
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
        case Runtime.VLLM | Runtime.TOKENSPEED:
            pass  # gRPC: the engine's servicer detokenizes and matches the strings itself
        case Runtime.TRTLLM:
            if plan.endpoint is not Endpoint.COMPLETION:
                # TRT-LLM's chat/generate builders send stop words only; the router enforces
                # the client's ids (spec §1.2, case 18).
                sampling = msgspec.structs.replace(sampling, stop_token_ids=())
        case Runtime.MLX:
            if sampling.stop:
                raise ClientError(
                    "invalid request parameters: the MLX engine cannot take string stop "
                    "sequences; use stop_token_ids",
                    code="invalid_request_parameters",
                    param="stop",
                )
        case Runtime.UNSPECIFIED:  # pragma: no cover - require_adapter raised already
            raise UnsupportedRuntime("the engine runtime must be declared")
        case _:  # pragma: no cover - require_adapter raised already
            raise UnsupportedRuntime(
                f"runtime {worker.runtime.value!r} has no adapter for {worker.wire.value}"
            )
    return Finalized(
        runtime=worker.runtime,
        wire=worker.wire,
        requests=tuple(_fan_out(plan, sampling)),
        router_stops=obligation,
        stop_spec=plan.stop_spec,
    )


def _resolve_string_stops(
    sampling: SamplingParams, tokenizer: TokenizerLike | None
) -> tuple[SamplingParams, tuple[str, ...]]:
    """Strip every string stop; convert the single-token ones to stop ids (spec §1.3 step 2)."""
    if not sampling.stop:
        return sampling, ()
    ids = list(sampling.stop_token_ids)
    if tokenizer is not None:
        for text in sampling.stop:
            if not text:
                continue
            encoded = tokenizer.encode(text, add_special_tokens=False)
            # A multi-token stop must never become one of its sub-token ids: the engine would
            # stop too early. Only an exact single-token stop is safe to hand to the engine.
            if len(encoded) == 1 and encoded[0] not in ids:
                ids.append(encoded[0])
    resolved = msgspec.structs.replace(sampling, stop=(), stop_token_ids=tuple(ids))
    return resolved, sampling.stop


def _fold_eos(sampling: SamplingParams, tokenizer: TokenizerLike | None) -> SamplingParams:
    """vLLM EngineCore has no tokenizer: give it the EOS ids, unless the client ignores EOS."""
    if sampling.ignore_eos or tokenizer is None:
        return sampling
    return msgspec.structs.replace(
        sampling, stop_token_ids=_append_missing(sampling.stop_token_ids, tokenizer.eos_token_ids)
    )


def _append_missing(ids: Sequence[int], extra: Iterable[int]) -> tuple[int, ...]:
    merged = list(ids)
    for token_id in extra:
        if token_id not in merged:
            merged.append(token_id)
    return tuple(merged)


def _fan_out(plan: GeneratePlan, sampling: SamplingParams) -> list[EngineRequest]:
    if plan.n == 1:
        return [
            EngineRequest(
                request_id=plan.request_id,
                choice_index=0,
                endpoint=plan.endpoint,
                prompt_ids=plan.prompt_ids,
                sampling=sampling,
            )
        ]
    return [
        EngineRequest(
            request_id=f"{plan.request_id}-{index}",
            choice_index=index,
            endpoint=plan.endpoint,
            prompt_ids=plan.prompt_ids,
            sampling=(
                sampling
                if sampling.seed is None
                else msgspec.structs.replace(sampling, seed=sampling.seed + index)
            ),
        )
        for index in range(plan.n)
    ]
