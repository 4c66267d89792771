"""The differential harness's kept divergences are narrow: each rule keeps only its own field,
case and wire, so anything else still fails a case (tests/e2e/vllm_kept.py)."""

from __future__ import annotations

from tests.e2e.differential import MISSING, Divergence, diff
from tests.e2e.vllm_kept import split_kept

VLLM_ERROR = {
    "error": {"message": "n must be 1", "type": "BadRequestError", "param": None, "code": 400}
}
OUR_ERROR = {
    "error": {
        "message": "n must be 1 when temperature is 0",
        "type": "invalid_request_error",
        "param": "n",
        "code": "invalid_request_parameters",
    }
}


def test_an_error_in_openais_shape_is_kept_but_a_different_status_is_not() -> None:
    found = diff(VLLM_ERROR, OUR_ERROR)
    assert {d.path for d in found} == {"$.error.type", "$.error.param", "$.error.code"}
    unexplained, kept = split_kept("n2_greedy-chat", "zmq", found)
    assert unexplained == []
    assert len(kept) == 3
    status = Divergence("status", 400, 200)
    assert split_kept("n2_greedy-chat", "zmq", [status])[0] == [status]


def test_a_text_or_usage_count_divergence_is_never_kept() -> None:
    vllm = {"choices": [{"text": "a b"}], "usage": {"completion_tokens": 3}}
    ours = {"choices": [{"text": "a c"}], "usage": {"completion_tokens": 4}}
    found = diff(vllm, ours)
    assert len(found) == 2
    assert split_kept("stop_string-completions", "zmq", found) == (found, [])


def test_cached_token_details_are_kept_only_when_the_engine_reported_some() -> None:
    reported = Divergence("$.usage.prompt_tokens_details", MISSING, {"cached_tokens": 16})
    made_up = Divergence("$.usage.prompt_tokens_details", MISSING, {"cached_tokens": 0})
    unexplained, kept = split_kept("over_context-chat", "grpc", [reported, made_up])
    assert unexplained == [made_up]
    assert [d for d, _ in kept] == [reported]


def test_case_and_wire_scoped_rules_apply_to_their_case_and_wire_only() -> None:
    refused = [
        Divergence("status", 200, 400),
        Divergence("$", {}, {}),
        Divergence("[DONE]", True, False),
    ]
    assert split_kept("prompt_logprobs-completions", "grpc", refused)[0] == []
    assert split_kept("prompt_logprobs-completions", "zmq", refused)[0] == refused
    assert split_kept("logprobs-chat", "grpc", refused)[0] == refused
    shorter = Divergence("$.choices[0].logprobs.content.length", 4, 2)
    assert split_kept("logprobs_with_stop-chat", "zmq", [shorter])[0] == []
    assert split_kept("logprobs-chat", "zmq", [shorter])[0] == [shorter]
