"""finalize: the runtime x wire matrix (docs/stops-and-finalize.md §1, cases A1-A11, A17, A18)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, UnsupportedRuntime
from smg_trio.neutral.capabilities import SUPPORTED_PAIRS, require_adapter
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire, parse_runtime, parse_wire
from smg_trio.neutral.sampling import EosIds, SamplingParams
from tests.core.mock_tokenizers import WordMockTokenizer

T1 = WordMockTokenizer()
NO_EOS = EosIds()


def plan(
    *,
    stop: tuple[str, ...] = (),
    ids: tuple[int, ...] = (),
    ignore_eos: bool = False,
    n: int = 1,
    seed: int | None = None,
    endpoint: Endpoint = Endpoint.CHAT,
    **sampling: object,
) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2),
        sampling=msgspec.convert(
            {"max_tokens": 8, **sampling}
            | {"stop": stop, "stop_token_ids": ids, "ignore_eos": ignore_eos, "seed": seed},
            SamplingParams,
        ),
        n=n,
        stop_spec=StopSpec(strings=stop, token_ids=(999, *ids)),
    )


def run(
    runtime: Runtime,
    wire: Wire,
    p: GeneratePlan,
    tokenizer: TokenizerLike | None = T1,
    eos_ids: EosIds = NO_EOS,
) -> Finalized:
    return finalize(p, WorkerTarget(runtime=runtime, wire=wire, eos_ids=eos_ids), tokenizer)


# The golden table: one request (stop [".", "Hello world"], ids [42]) on every pair.
# Columns: engine stop strings, engine stop ids — or the error raised. The router's scanner
# enforces the plan's whole stop_spec on every pair, whatever the engine was asked.
GOLDEN: dict[tuple[Runtime, Wire], tuple[tuple[str, ...], tuple[int, ...]] | str] = {
    (Runtime.SGLANG, Wire.GRPC): ((), (42, 6)),
    (Runtime.VLLM, Wire.GRPC): ((".", "Hello world"), (42,)),
    (Runtime.VLLM, Wire.ZMQ): ((), (42, 6, 999)),
    (Runtime.TOKENSPEED, Wire.ZMQ): ((), (42, 6)),
    (Runtime.TOKENSPEED, Wire.GRPC): ((".", "Hello world"), (42,)),
    (Runtime.TRTLLM, Wire.GRPC): ((".", "Hello world"), ()),
    (Runtime.MLX, Wire.GRPC): "ClientError",
    (Runtime.SGLANG, Wire.ZMQ): "UnsupportedRuntime",
    (Runtime.MLX, Wire.ZMQ): "UnsupportedRuntime",
    (Runtime.TRTLLM, Wire.ZMQ): "UnsupportedRuntime",
    (Runtime.UNSPECIFIED, Wire.ZMQ): "UnsupportedRuntime",
    (Runtime.UNSPECIFIED, Wire.GRPC): "UnsupportedRuntime",
}


def test_golden_table_covers_every_pair() -> None:
    assert set(GOLDEN) == {(r, w) for r in Runtime for w in Wire}
    assert {pair for pair, row in GOLDEN.items() if not isinstance(row, str)} | {
        (Runtime.MLX, Wire.GRPC)
    } == SUPPORTED_PAIRS


@pytest.mark.parametrize(("runtime", "wire"), list(GOLDEN))
def test_golden_table(runtime: Runtime, wire: Wire) -> None:
    expected = GOLDEN[(runtime, wire)]
    p = plan(stop=(".", "Hello world"), ids=(42,))
    if isinstance(expected, str):
        with pytest.raises(ClientError if expected == "ClientError" else UnsupportedRuntime):
            run(runtime, wire, p)
        return
    out = run(runtime, wire, p)
    (request,) = out.requests
    assert (request.sampling.stop, request.sampling.stop_token_ids) == expected
    assert request.prompt_ids == p.prompt_ids


def test_a1_sglang_single_token_stop_becomes_an_id() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == (6,)


def test_a2_multi_token_stop_never_becomes_a_sub_token_id() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=("Hello world",)))
    assert out.requests[0].sampling.stop_token_ids == ()


def test_a3_existing_ids_keep_order_and_are_not_duplicated() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".", "Hello world"), ids=(6, 42)))
    assert out.requests[0].sampling.stop_token_ids == (6, 42)


def test_a4_without_a_tokenizer_strings_are_still_stripped() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".",)), tokenizer=None)
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == ()


def test_a5_no_stops_leaves_ids_untouched() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(ids=(7,)))
    assert out.requests[0].sampling.stop_token_ids == (7,)


def test_a6_vllm_grpc_keeps_strings() -> None:
    out = run(Runtime.VLLM, Wire.GRPC, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == (".",)
    assert out.requests[0].sampling.stop_token_ids == ()


def test_a7_vllm_zmq_converts_and_folds_eos() -> None:
    out = run(Runtime.VLLM, Wire.ZMQ, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == (6, 999)


@pytest.mark.parametrize(("ids", "expected"), [((7,), (7, 999)), ((999,), (999,))])
def test_a8_eos_fold_dedups(ids: tuple[int, ...], expected: tuple[int, ...]) -> None:
    out = run(Runtime.VLLM, Wire.ZMQ, plan(ids=ids))
    assert out.requests[0].sampling.stop_token_ids == expected


def test_a9_ignore_eos_means_no_fold() -> None:
    out = run(Runtime.VLLM, Wire.ZMQ, plan(ids=(7,), ignore_eos=True))
    assert out.requests[0].sampling.stop_token_ids == (7,)


def test_a10_tokenspeed_zmq_never_gets_eos_and_grpc_keeps_strings() -> None:
    zmq = run(Runtime.TOKENSPEED, Wire.ZMQ, plan(stop=(".",)))
    assert zmq.requests[0].sampling.stop == ()
    assert zmq.requests[0].sampling.stop_token_ids == (6,)
    grpc = run(Runtime.TOKENSPEED, Wire.GRPC, plan(stop=(".",)))
    assert grpc.requests[0].sampling.stop == (".",)
    assert grpc.requests[0].sampling.stop_token_ids == ()


def test_a11_tokenspeed_multi_token_stop_keeps_user_ids() -> None:
    out = run(Runtime.TOKENSPEED, Wire.ZMQ, plan(stop=("Hello world",), ids=(42,)))
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == (42,)


def test_a17_mlx_rejects_string_stops_but_takes_ids() -> None:
    with pytest.raises(ClientError) as info:
        run(Runtime.MLX, Wire.GRPC, plan(stop=("x",)))
    assert info.value.status == 400
    assert info.value.code == "invalid_request_parameters"
    assert "MLX" in info.value.message
    out = run(Runtime.MLX, Wire.GRPC, plan(ids=(5,)))
    assert out.requests[0].sampling.stop_token_ids == (5,)


def test_a18_trtllm_chat_sends_words_not_ids_but_the_router_keeps_them() -> None:
    p = plan(stop=("END",), ids=(5,))
    out = run(Runtime.TRTLLM, Wire.GRPC, p)
    assert out.requests[0].sampling.stop == ("END",)
    assert out.requests[0].sampling.stop_token_ids == ()
    assert 5 in p.stop_spec.token_ids  # the router's scanner enforces it (finalize leaves it)
    completion = run(Runtime.TRTLLM, Wire.GRPC, plan(ids=(5,), endpoint=Endpoint.COMPLETION))
    assert completion.requests[0].sampling.stop_token_ids == (5,)


def test_n_fans_out_with_distinct_ids_and_seeds() -> None:
    out = run(Runtime.VLLM, Wire.ZMQ, plan(n=2, seed=7, stop=(".",)))
    assert [r.request_id for r in out.requests] == ["r1-0", "r1-1"]
    assert [r.choice_index for r in out.requests] == [0, 1]
    assert [r.sampling.seed for r in out.requests] == [7, 8]
    assert {r.sampling.stop_token_ids for r in out.requests} == {(6, 999)}
    unseeded = run(Runtime.VLLM, Wire.ZMQ, plan(n=3))
    assert [r.sampling.seed for r in unseeded.requests] == [None, None, None]


def test_vllm_refuses_n_above_1_with_greedy_sampling_as_its_sampling_params_do() -> None:
    """vLLM 0.32's server: "n must be 1 when using greedy sampling, got 2." (temperature below
    1e-5); with any other temperature, or unset (vLLM's default is 1.0), n > 1 is fine, and
    other runtimes take greedy n > 1."""
    for wire in (Wire.ZMQ, Wire.GRPC):
        for temperature in (0.0, 1e-6):
            with pytest.raises(ClientError) as info:
                run(Runtime.VLLM, wire, plan(n=2, temperature=temperature))
            assert info.value.param == "n"
            assert "greedy" in info.value.message
        assert len(run(Runtime.VLLM, wire, plan(n=2, temperature=0.7)).requests) == 2
        assert len(run(Runtime.VLLM, wire, plan(n=2)).requests) == 2
        assert len(run(Runtime.VLLM, wire, plan(temperature=0.0)).requests) == 1
    assert len(run(Runtime.SGLANG, Wire.GRPC, plan(n=2, temperature=0.0)).requests) == 2


def test_unspecified_runtime_is_rejected_with_a_clear_message() -> None:
    with pytest.raises(UnsupportedRuntime, match="must be declared"):
        require_adapter(Runtime.UNSPECIFIED, Wire.ZMQ)
    with pytest.raises(UnsupportedRuntime, match="'sglang' has no adapter for the zmq wire"):
        require_adapter(Runtime.SGLANG, Wire.ZMQ)


@pytest.mark.parametrize(
    ("name", "runtime"),
    [("vLLM", Runtime.VLLM), ("TensorRT-LLM", Runtime.TRTLLM), (" sglang ", Runtime.SGLANG)],
)
def test_parse_runtime(name: str, runtime: Runtime) -> None:
    assert parse_runtime(name) is runtime


def test_parse_unknown_names_the_value() -> None:
    with pytest.raises(UnsupportedRuntime, match="'llamacpp'"):
        parse_runtime("llamacpp")
    with pytest.raises(UnsupportedRuntime, match="'http'"):
        parse_wire("http")


# Endpoints whose prompt is a chat template's (Responses is chat underneath).
CHAT_PROMPTED = (Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.MESSAGES)


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_chat_forces_skip_special_tokens_on_vllm_and_sglang_grpc(endpoint: Endpoint) -> None:
    asked = plan(endpoint=endpoint, skip_special_tokens=False)
    for runtime in (Runtime.VLLM, Runtime.SGLANG):
        (request,) = run(runtime, Wire.GRPC, asked).requests
        assert request.sampling.skip_special_tokens is (endpoint in CHAT_PROMPTED)
    for runtime, wire in [(Runtime.TOKENSPEED, Wire.GRPC), (Runtime.VLLM, Wire.ZMQ)]:
        assert not run(runtime, wire, asked).requests[0].sampling.skip_special_tokens


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_only_completions_keep_the_stop_in_output_on_vllm_grpc_and_trtllm(
    endpoint: Endpoint,
) -> None:
    asked = plan(endpoint=endpoint, no_stop_trim=True)
    for runtime in (Runtime.VLLM, Runtime.TRTLLM):
        (request,) = run(runtime, Wire.GRPC, asked).requests
        assert request.sampling.no_stop_trim is (endpoint is Endpoint.COMPLETION)
    # SGLang and TokenSpeed take no_stop_trim on every endpoint.
    assert run(Runtime.SGLANG, Wire.GRPC, asked).requests[0].sampling.no_stop_trim
    assert run(Runtime.TOKENSPEED, Wire.ZMQ, asked).requests[0].sampling.no_stop_trim


@pytest.mark.parametrize(
    ("endpoint", "default"),
    [(Endpoint.CHAT, 2048), (Endpoint.GENERATE, 2048), (Endpoint.COMPLETION, 16)],
)
def test_trtllm_always_gets_max_tokens(endpoint: Endpoint, default: int) -> None:
    unset = run(Runtime.TRTLLM, Wire.GRPC, plan(endpoint=endpoint, max_tokens=None))
    assert unset.requests[0].sampling.max_tokens == default
    assert (
        run(Runtime.TRTLLM, Wire.GRPC, plan(endpoint=endpoint)).requests[0].sampling.max_tokens == 8
    )
    # Others leave an unset max_tokens to the wire (vLLM ZMQ: the rest of the context).
    assert (
        run(Runtime.VLLM, Wire.GRPC, plan(max_tokens=None)).requests[0].sampling.max_tokens is None
    )


# vLLM over ZMQ: EOS (docs/stops-and-finalize.md §5 cases 13 and 15).


def test_case_13_eos_ids_merge_for_the_engine() -> None:
    eos = EosIds(5, (7,))
    (request,) = run(Runtime.VLLM, Wire.ZMQ, plan(ids=(7, 9)), None, eos).requests
    s = request.sampling
    assert (s.stop_token_ids, s.eos_token_id, s.all_stop_token_ids) == ((7, 9), 5, (5, 7, 9))
    (ignoring,) = run(Runtime.VLLM, Wire.ZMQ, plan(ids=(9,), ignore_eos=True), None, eos).requests
    s = ignoring.sampling
    assert (s.stop_token_ids, s.eos_token_id, s.all_stop_token_ids) == ((9,), None, (5, 7, 9))
    assert s.ignore_eos


def test_case_15_folded_ids_keep_their_order() -> None:
    p = plan(ids=(9, 5, 7))
    (request,) = run(Runtime.VLLM, Wire.ZMQ, p, None, EosIds(5, (7, 9))).requests
    s = request.sampling
    assert (s.stop_token_ids, s.eos_token_id, s.all_stop_token_ids) == ((9, 5, 7), 5, (5, 7, 9))


def test_eos_extra_ids_become_stop_ids_and_no_eos_means_none() -> None:
    (request,) = run(Runtime.VLLM, Wire.ZMQ, plan(), None, EosIds(2, (7,))).requests
    assert (request.sampling.stop_token_ids, request.sampling.eos_token_id) == ((7,), 2)
    (bare,) = run(Runtime.VLLM, Wire.ZMQ, plan(), None).requests
    assert bare.sampling == plan().sampling
    # With a tokenizer, its EOS ids (T1: 999) come first, then the folder's extra ones.
    (both,) = run(Runtime.VLLM, Wire.ZMQ, plan(ids=(9, 9)), T1, EosIds(2, (7,))).requests
    assert both.sampling.stop_token_ids == (9, 999, 7)
    # EOS is vLLM-over-ZMQ's alone: no other pair gets the fields.
    (grpc,) = run(Runtime.VLLM, Wire.GRPC, plan(), None, EosIds(2, (7,))).requests
    assert (grpc.sampling.eos_token_id, grpc.sampling.all_stop_token_ids) == (None, ())


def test_tokenspeed_zmq_dedups_stop_ids() -> None:
    (request,) = run(Runtime.TOKENSPEED, Wire.ZMQ, plan(ids=(13, 13, 4))).requests
    assert request.sampling.stop_token_ids == (13, 4)


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        ({"top_k": 128}, "top_k"),
        ({"top_k": -2}, "top_k"),
        ({"repetition_penalty": 2.5}, "repetition_penalty"),
        ({"repetition_penalty": -0.1}, "repetition_penalty"),
        ({"logprobs": 1}, "logprobs"),
    ],
)
def test_tokenspeed_zmq_limits_are_the_clients_error(sampling: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as caught:
        run(Runtime.TOKENSPEED, Wire.ZMQ, plan(**sampling))
    assert (caught.value.status, caught.value.param) == (400, param)
    assert param in caught.value.message or param == "logprobs"
    # Over gRPC TokenSpeed's servicer takes them.
    run(Runtime.TOKENSPEED, Wire.GRPC, plan(**sampling))


def test_tokenspeed_zmq_top_logprobs_are_unsupported() -> None:
    with pytest.raises(ClientError) as caught:
        run(Runtime.TOKENSPEED, Wire.ZMQ, plan(logprobs=5))
    assert (caught.value.code, caught.value.param) == ("start_generation_failed", "logprobs")
    assert run(Runtime.TOKENSPEED, Wire.ZMQ, plan(logprobs=0)).requests[0].sampling.logprobs == 0


ADAPTED_PAIRS = [pair for pair, golden in GOLDEN.items() if golden != "UnsupportedRuntime"]


@pytest.mark.parametrize(("runtime", "wire"), ADAPTED_PAIRS)
@pytest.mark.parametrize("param", ["prompt_logprobs", "echo"])
def test_prompt_logprobs_only_on_vllm_zmq_else_400_naming_the_field(
    runtime: Runtime, wire: Wire, param: str
) -> None:
    asked = msgspec.structs.replace(plan(prompt_logprobs=2), prompt_logprobs_param=param)
    if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
        (request,) = run(runtime, wire, asked).requests
        assert request.sampling.prompt_logprobs == 2
        return
    with pytest.raises(ClientError) as caught:
        run(runtime, wire, asked)
    assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize(("runtime", "wire"), ADAPTED_PAIRS)
def test_prompt_logprobs_implied_by_chat_echo_are_dropped_where_not_returned(
    runtime: Runtime, wire: Wire
) -> None:
    implied = msgspec.structs.replace(plan(prompt_logprobs=0), prompt_logprobs_param=None)
    kept = 0 if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ) else None
    (request,) = run(runtime, wire, implied).requests
    assert request.sampling.prompt_logprobs == kept
