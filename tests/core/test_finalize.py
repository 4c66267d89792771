"""finalize: the runtime x wire matrix (spec stops-and-finalize.md §1, cases A1-A11, A17, A18)."""

from __future__ import annotations

import pytest

from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan, SamplingParams, StopSpec
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, UnsupportedRuntime
from smg_trio.neutral.runtime import (
    SUPPORTED_PAIRS,
    Endpoint,
    Runtime,
    Wire,
    parse_runtime,
    parse_wire,
    require_adapter,
)
from tests.core.mock_tokenizers import WordMockTokenizer

T1 = WordMockTokenizer()


def plan(
    *,
    stop: tuple[str, ...] = (),
    ids: tuple[int, ...] = (),
    ignore_eos: bool = False,
    n: int = 1,
    seed: int | None = None,
    endpoint: Endpoint = Endpoint.CHAT,
) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2),
        sampling=SamplingParams(
            stop=stop, stop_token_ids=ids, ignore_eos=ignore_eos, seed=seed, max_tokens=8
        ),
        n=n,
        stop_spec=StopSpec(strings=stop, token_ids=(999, *ids)),
    )


def run(
    runtime: Runtime,
    wire: Wire,
    p: GeneratePlan,
    tokenizer: TokenizerLike | None = T1,
) -> Finalized:
    return finalize(p, WorkerTarget(runtime=runtime, wire=wire), tokenizer)


# The golden table: one request (stop [".", "Hello world"], ids [42]) on every pair.
# Columns: engine stop strings, engine stop ids, router obligation — or the error raised.
GOLDEN: dict[
    tuple[Runtime, Wire], tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]] | str
] = {
    (Runtime.SGLANG, Wire.GRPC): ((), (42, 6), (".", "Hello world")),
    (Runtime.VLLM, Wire.GRPC): ((".", "Hello world"), (42,), ()),
    (Runtime.VLLM, Wire.ZMQ): ((), (42, 6, 999), (".", "Hello world")),
    (Runtime.TOKENSPEED, Wire.ZMQ): ((), (42, 6), (".", "Hello world")),
    (Runtime.TOKENSPEED, Wire.GRPC): ((".", "Hello world"), (42,), ()),
    (Runtime.TRTLLM, Wire.GRPC): ((".", "Hello world"), (), ()),
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
    assert (request.sampling.stop, request.sampling.stop_token_ids, out.router_stops) == expected
    # The router's own stop rules never depend on the runtime.
    assert out.stop_spec == p.stop_spec
    assert request.prompt_ids == p.prompt_ids


def test_a1_sglang_single_token_stop_becomes_an_id() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == (6,)
    assert out.router_stops == (".",)


def test_a2_multi_token_stop_never_becomes_a_sub_token_id() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=("Hello world",)))
    assert out.requests[0].sampling.stop_token_ids == ()
    assert out.router_stops == ("Hello world",)


def test_a3_existing_ids_keep_order_and_are_not_duplicated() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".", "Hello world"), ids=(6, 42)))
    assert out.requests[0].sampling.stop_token_ids == (6, 42)
    assert out.router_stops == (".", "Hello world")


def test_a4_without_a_tokenizer_strings_are_still_stripped() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(stop=(".",)), tokenizer=None)
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == ()
    assert out.router_stops == (".",)


def test_a5_no_stops_leaves_ids_untouched() -> None:
    out = run(Runtime.SGLANG, Wire.GRPC, plan(ids=(7,)))
    assert out.requests[0].sampling.stop_token_ids == (7,)
    assert out.router_stops == ()


def test_a6_vllm_grpc_keeps_strings() -> None:
    out = run(Runtime.VLLM, Wire.GRPC, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == (".",)
    assert out.requests[0].sampling.stop_token_ids == ()
    assert out.router_stops == ()


def test_a7_vllm_zmq_converts_and_folds_eos() -> None:
    out = run(Runtime.VLLM, Wire.ZMQ, plan(stop=(".",)))
    assert out.requests[0].sampling.stop == ()
    assert out.requests[0].sampling.stop_token_ids == (6, 999)
    assert out.router_stops == (".",)


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
    out = run(Runtime.TRTLLM, Wire.GRPC, plan(stop=("END",), ids=(5,)))
    assert out.requests[0].sampling.stop == ("END",)
    assert out.requests[0].sampling.stop_token_ids == ()
    assert 5 in out.stop_spec.token_ids
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


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_every_engine_request_carries_the_client_endpoint(endpoint: Endpoint) -> None:
    out = run(Runtime.TRTLLM, Wire.GRPC, plan(n=2, endpoint=endpoint))
    assert {r.endpoint for r in out.requests} == {endpoint}
