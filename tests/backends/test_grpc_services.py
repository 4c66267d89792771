"""The gRPC backend's message seam: finalize's endpoint rules reach each engine's message."""

from __future__ import annotations

import pytest

from smg_trio.backends.grpc_services import generate_message, service_for
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire._proto import trtllm_service_pb2, vllm_engine_pb2


def message(runtime: Runtime, endpoint: Endpoint) -> object:
    plan = GeneratePlan(
        request_id="r",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2),
        sampling=SamplingParams(skip_special_tokens=False, stop_token_ids=(5,)),
    )
    (request,) = finalize(plan, WorkerTarget(runtime=runtime, wire=Wire.GRPC), None).requests
    return generate_message(service_for(runtime), request, "r-1", None)


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_endpoint_rules_reach_the_messages(endpoint: Endpoint) -> None:
    # vLLM chat (and Responses and Messages, chat-templated too) forces skip_special_tokens;
    # the other endpoints keep the client's choice.
    vllm = message(Runtime.VLLM, endpoint)
    assert isinstance(vllm, vllm_engine_pb2.GenerateRequest)
    assert vllm.request_id == "r-1"
    chat_templated = endpoint in (Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.MESSAGES)
    assert vllm.sampling_params.skip_special_tokens is chat_templated
    # TRT-LLM sends the client's stop ids only for completions.
    trt = message(Runtime.TRTLLM, endpoint)
    assert isinstance(trt, trtllm_service_pb2.GenerateRequest)
    assert list(trt.stop_token_ids) == ([5] if endpoint is Endpoint.COMPLETION else [])
