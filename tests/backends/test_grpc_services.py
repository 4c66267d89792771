"""The gRPC backend hands each engine builder the client's endpoint, so endpoint rules apply."""

from __future__ import annotations

import pytest

from smg_trio.backends.grpc_services import grpc_generate
from smg_trio.core.finalize import EngineRequest
from smg_trio.core.plan import SamplingParams
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire.grpc_messages import build_trtllm_generate, build_vllm_generate


def request(endpoint: Endpoint) -> EngineRequest:
    return EngineRequest(
        request_id="r",
        choice_index=0,
        endpoint=endpoint,
        prompt_ids=(1, 2),
        sampling=SamplingParams(skip_special_tokens=False, stop_token_ids=(5,)),
    )


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_endpoint_rules_reach_the_builders(endpoint: Endpoint) -> None:
    generate = grpc_generate(request(endpoint), "r-1")
    assert generate.endpoint.value == endpoint.value
    # vLLM's chat builder forces skip_special_tokens; the others keep the client's choice.
    vllm = build_vllm_generate(generate)
    assert vllm.sampling_params.skip_special_tokens is (endpoint is Endpoint.CHAT)
    # TRT-LLM sends the client's stop ids only for completions.
    trt = build_trtllm_generate(generate)
    assert list(trt.stop_token_ids) == ([5] if endpoint is Endpoint.COMPLETION else [])
