"""TokenSpeed wire: golden bytes for every message, decode tolerance, validation, spec cases.

Each golden hex literal was derived by msgpack-encoding the layout of docs/wire.md §B as plain Python
lists and dicts (shown next to it as `*_LAYOUT`), never through our structs. ABORT, INIT and the
dead sentinel are the shared transport's (test_zmq_transport.py); TokenSpeed's HELLO/READY and
registration differ and are pinned here.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire import tokenspeed_zmq as ts
from smg_trio.wire import zmq_transport as t

SAMPLING_LAYOUT: list[Any] = [
    8,  # max_new_tokens
    None,  # stop
    [13],  # stop_token_ids
    0.7,  # temperature
    1.0,  # top_p
    1 << 30,  # top_k: disabled
    0.0,  # min_p
    0.0,  # frequency_penalty
    0.0,  # presence_penalty
    1.0,  # repetition_penalty
    0,  # min_new_tokens
    *[None, None, None, None],  # json_schema, regex, ebnf, structural_tag
    False,  # ignore_eos
    True,  # skip_special_tokens
    True,  # spaces_between_special_tokens
    False,  # no_stop_trim
    *[None, None, None, None, None, None],  # thinking_budget .. logprobs
    1,  # n
    [],  # stop_strs
    0,  # stop_str_max_len
    True,  # is_normalized
]
ADD_LAYOUT: list[Any] = [
    "TokenizedGenerateReqInput",
    "r1",
    None,
    None,
    [1, 2, 3],
    SAMPLING_LAYOUT,
    False,  # return_logprob
    -1,  # logprob_start_len
    0,  # top_logprobs_num
    None,  # token_ids_logprob
    True,  # stream
    *[None, None, None, False, 0.0, None, None, None, None, None, None, None, None, None],
]
ADD = bytes.fromhex(
    "dc0019b9546f6b656e697a656447656e6572617465526571496e707574a27231c0c093010203dc001d08c091"
    "0dcb3fe6666666666666cb3ff0000000000000ce40000000cb0000000000000000cb0000000000000000cb00"
    "00000000000000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c0c0c0019000c3c2ff00c0c3c0c0c0c2"
    "cb0000000000000000c0c0c0c0c0c0c0c0c0"
)
HELLO_LAYOUT = {"status": "HELLO", "local": True, "headless": True, "parallel_config_hash": None}
HELLO = bytes.fromhex(
    "84a6737461747573a548454c4c4fa56c6f63616cc3a8686561646c657373c3b4706172616c6c656c5f636f6e"
    "6669675f68617368c0"
)
REGISTRATION_LAYOUT: dict[str, Any] = {
    "max_model_len": 4096,
    "num_gpu_blocks": 1000,
    "prefix_granularity": 16,
    "dp_stats_address": None,
    "dtype": "bfloat16",
    "multimodal_encoder_dtype": None,
    "vllm_version": "tokenspeed-0.1.1",
    "world_size": 1,
    "data_parallel_size": 1,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "decode_context_parallel_size": 1,
    "data_parallel_rank": 0,
    "max_num_seqs": 128,
    "max_num_batched_tokens": 8192,
    "instance_id": "tiny",
    "kv_cache_size_tokens": 16000,
    "kv_cache_max_concurrency": None,
    "kv_events_config": None,
}
REGISTRATION = bytes.fromhex(
    "de0013ad6d61785f6d6f64656c5f6c656ecd1000ae6e756d5f6770755f626c6f636b73cd03e8b27072656669"
    "785f6772616e756c617269747910b064705f73746174735f61646472657373c0a56474797065a862666c6f61"
    "743136b86d756c74696d6f64616c5f656e636f6465725f6474797065c0ac766c6c6d5f76657273696f6eb074"
    "6f6b656e73706565642d302e312e31aa776f726c645f73697a6501b2646174615f706172616c6c656c5f7369"
    "7a6501b474656e736f725f706172616c6c656c5f73697a6501b6706970656c696e655f706172616c6c656c5f"
    "73697a6501bc6465636f64655f636f6e746578745f706172616c6c656c5f73697a6501b2646174615f706172"
    "616c6c656c5f72616e6b00ac6d61785f6e756d5f73657173cc80b66d61785f6e756d5f626174636865645f74"
    "6f6b656e73cd2000ab696e7374616e63655f6964a474696e79b46b765f63616368655f73697a655f746f6b65"
    "6e73cd3e80b86b765f63616368655f6d61785f636f6e63757272656e6379c0b06b765f6576656e74735f636f"
    "6e666967c0"
)
TAG = "BatchTokenIDOutSlim"
RUNNING_LAYOUT: list[Any] = [TAG, ["r1"], [[10]], [""], [3], [1], [0], [[]], [[]], 0, 0, 0, 0, 0]
RUNNING = bytes.fromhex(
    "9eb34261746368546f6b656e49444f7574536c696d91a2723191910a91a0910391019100919091900000000000"
)
FINISHED_LAYOUT: list[Any] = [
    TAG,
    ["r1", "r2"],
    [[11], []],
    ["length", "abort"],
    [3, 5],
    [2, 0],
    [2, 0],
    [[-0.5], []],
    [[11], []],
    *[1, 4, 2, 30, 100],
]
FINISHED = bytes.fromhex(
    "9eb34261746368546f6b656e49444f7574536c696d92a27231a2723292910b9092a66c656e677468a561626f"
    "72749203059202009202009291cbbfe00000000000009092910b900104021e64"
)
FINISHED_ROWS = (
    ts.OutputRow(
        rid="r1",
        output_ids=(11,),
        finished_reason="length",
        prompt_tokens=3,
        completion_tokens=2,
        cached_tokens=2,
        logprobs=(-0.5,),
        logprob_token_ids=(11,),
    ),
    ts.OutputRow(rid="r2", output_ids=(), finished_reason="abort", prompt_tokens=5),
)
DEFAULT_SAMPLING = SamplingParams()


def _request(
    sampling: SamplingParams = DEFAULT_SAMPLING,
    *,
    prompt: tuple[int, ...] = (1, 2, 3),
    max_model_len: int = 100,
    vocab_size: int | None = None,
) -> ts.TokenizedGenerateReqInput:
    """The ADD for `sampling` as the gateway sends it: finalized, then built."""
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.COMPLETION,
        model="m",
        prompt_ids=prompt,
        sampling=sampling,
    )
    (request,) = finalize(
        plan, WorkerTarget(runtime=Runtime.TOKENSPEED, wire=Wire.ZMQ), None
    ).requests
    return ts.build_request(
        request,
        engine_request_id="r1",
        max_model_len=max_model_len,
        vocab_size=vocab_size,
    )


def _wire_sampling(request: ts.TokenizedGenerateReqInput) -> list[Any]:
    layout = msgspec.msgpack.decode(ts.encode_request(request))
    assert isinstance(layout, list)
    assert layout[0] == "TokenizedGenerateReqInput"
    sampling = layout[5]
    assert isinstance(sampling, list)
    assert len(sampling) == 29
    return sampling


def test_layouts_are_what_the_golden_bytes_hold() -> None:
    assert len(SAMPLING_LAYOUT) == 29
    assert len(ADD_LAYOUT) == 25
    for layout, golden in [
        (ADD_LAYOUT, ADD),
        (HELLO_LAYOUT, HELLO),
        (REGISTRATION_LAYOUT, REGISTRATION),
        (RUNNING_LAYOUT, RUNNING),
        (FINISHED_LAYOUT, FINISHED),
    ]:
        assert msgspec.msgpack.encode(layout) == golden


def test_add_golden_bytes_and_round_trip() -> None:
    request = _request(SamplingParams(temperature=0.7, max_tokens=8, stop_token_ids=(13,)))
    assert ts.encode_request(request) == ADD
    assert ts.decode_request(ADD) == request


def test_hello_ready_golden_bytes_decode_with_the_shared_decoder() -> None:
    assert ts.encode_handshake(t.HELLO) == HELLO
    hello = t.decode_handshake(HELLO)
    assert (hello.status, hello.local, hello.headless) == ("HELLO", True, True)
    ready = ts.encode_handshake(t.READY)
    assert msgspec.msgpack.decode(ready) == {**HELLO_LAYOUT, "status": "READY"}


def test_registration_golden_bytes() -> None:
    response = ts.ReadyResponse(
        max_model_len=4096,
        num_gpu_blocks=1000,
        prefix_granularity=16,
        vllm_version="tokenspeed-0.1.1",
        max_num_seqs=128,
        max_num_batched_tokens=8192,
        instance_id="tiny",
        kv_cache_size_tokens=16000,
    )
    assert ts.encode_ready_response(response) == REGISTRATION
    assert ts.decode_ready_response(REGISTRATION) == response
    with pytest.raises(BackendProtocolError):
        ts.decode_ready_response(msgspec.msgpack.encode({"prefix_granularity": 16}))


def test_outputs_golden_bytes_running_and_finished() -> None:
    running = ts.build_batch(
        [ts.OutputRow(rid="r1", output_ids=(10,), prompt_tokens=3, completion_tokens=1)]
    )
    assert ts.encode_outputs(running) == RUNNING
    assert ts.split_batch(ts.decode_outputs([RUNNING])) == ts.split_batch(running)
    finished = ts.build_batch(
        FINISHED_ROWS,
        engine_index=1,
        num_running=4,
        num_waiting=2,
        kv_active_pages=30,
        kv_total_pages=100,
    )
    assert ts.encode_outputs(finished) == FINISHED
    decoded = ts.decode_outputs([FINISHED])
    assert decoded == finished
    assert ts.split_batch(decoded) == FINISHED_ROWS
    assert (decoded.engine_index, decoded.num_running, decoded.kv_total_pages) == (1, 4, 100)


def test_outputs_without_the_load_tail_or_with_extra_fields_decode() -> None:
    old = ts.decode_outputs([msgspec.msgpack.encode(FINISHED_LAYOUT[:9])])
    assert ts.split_batch(old) == FINISHED_ROWS
    assert (old.engine_index, old.num_running, old.kv_total_pages) == (0, 0, 0)
    future = ts.decode_outputs([msgspec.msgpack.encode([*FINISHED_LAYOUT, [1, 2], "new"])])
    assert ts.split_batch(future) == FINISHED_ROWS


@pytest.mark.parametrize(
    "layout",
    [
        ["BatchTokenIDOut", *FINISHED_LAYOUT[1:]],  # another struct's tag
        FINISHED_LAYOUT[:8],  # a required column missing
        [TAG, ["r1"], [["x"]], [""], [1], [1], [0], [[]], [[]]],  # wrong element type
    ],
)
def test_malformed_outputs_are_protocol_errors(layout: list[Any]) -> None:
    with pytest.raises(BackendProtocolError):
        ts.decode_outputs([msgspec.msgpack.encode(layout)])


def test_ragged_batches_are_protocol_errors() -> None:
    ragged = [TAG, ["r1", "r2"], [[1], [2]], ["", ""], [1, 1], [1, 1], [0, 0], [[]], [[], []]]
    with pytest.raises(BackendProtocolError, match="ragged"):
        ts.split_batch(ts.decode_outputs([msgspec.msgpack.encode(ragged)]))


def test_request_decoder_accepts_smg_short_layout_and_extras() -> None:
    short = ADD_LAYOUT[:11]  # smg emits indices 0-10
    assert ts.decode_request(msgspec.msgpack.encode(short)) == ts.decode_request(ADD)
    assert ts.decode_request(msgspec.msgpack.encode([*ADD_LAYOUT, "future"])).rid == "r1"
    with pytest.raises(BackendProtocolError):
        ts.decode_request(msgspec.msgpack.encode(ADD_LAYOUT[:5]))
    with pytest.raises(BackendProtocolError):
        ts.decode_request(msgspec.msgpack.encode(["GenerateReqInput", *ADD_LAYOUT[1:]]))


# Spec cases (docs/stops-and-finalize.md §5) and the normalized sampling form (docs/wire.md §B.4).


def test_case_12_stop_ids_forwarded_and_strings_never_on_the_wire() -> None:
    wire = _wire_sampling(_request(SamplingParams(stop_token_ids=(13,))))
    assert (wire[1], wire[2], wire[26], wire[27]) == (None, [13], [], 0)
    assert _wire_sampling(_request())[2] is None


def test_greedy_is_sent_normalized() -> None:
    wire = _wire_sampling(_request(SamplingParams(temperature=0.0, seed=5)))
    assert (wire[3], wire[5], wire[23], wire[28]) == (1.0, 1, 0, True)


@pytest.mark.parametrize(
    ("top_k", "wire_top_k"), [(None, 1 << 30), (-1, 1 << 30), (0, 1 << 30), (5, 5)]
)
def test_top_k_sentinel(top_k: int | None, wire_top_k: int) -> None:
    assert _wire_sampling(_request(SamplingParams(top_k=top_k)))[5] == wire_top_k


def test_max_tokens_defaults_to_the_rest_of_the_context() -> None:
    assert _wire_sampling(_request())[0] == 97
    assert _wire_sampling(_request(SamplingParams(max_tokens=8)))[0] == 8


def test_flags_and_logprobs_map_to_their_fields() -> None:
    request = _request(
        SamplingParams(
            ignore_eos=True, skip_special_tokens=False, no_stop_trim=True, logprobs=0, seed=9
        )
    )
    wire = _wire_sampling(request)
    assert (wire[15], wire[16], wire[18], wire[23], wire[24]) == (True, False, True, 9, None)
    assert (request.return_logprob, request.top_logprobs_num, request.logprob_start_len) == (
        True,
        0,
        -1,
    )


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("", None),
        ("stop", "stop"),
        ("length", "length"),
        ("abort", "abort"),
        ("error", "error"),
        ("garbage", "stop"),
    ],
)
def test_case_57_finish_reasons_normalize(raw: str, text: str | None) -> None:
    assert ts.finish_reason_text(raw) == text


def test_case_56_finishing_row_carries_tokens_and_cumulative_counts() -> None:
    ticks = [
        ts.build_batch(
            [ts.OutputRow(rid="r1", output_ids=(10,), prompt_tokens=3, completion_tokens=1)]
        ),
        ts.build_batch(
            [
                ts.OutputRow(
                    rid="r1",
                    output_ids=(11,),
                    finished_reason="length",
                    prompt_tokens=3,
                    completion_tokens=2,
                )
            ]
        ),
    ]
    rows = [ts.split_batch(ts.decode_outputs([ts.encode_outputs(tick)]))[0] for tick in ticks]
    assert [
        (row.output_ids, ts.finish_reason_text(row.finished_reason), row.completion_tokens)
        for row in rows
    ] == [
        ((10,), None, 1),
        ((11,), "length", 2),
    ]


# Validation: every rejection is a 400 naming its parameter. The ranges of the knobs are
# neutral.validation's (tests/neutral); TokenSpeed's own limits are finalize's (reached here
# through it); the builder checks bytes and the engine's context and vocabulary.


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        (SamplingParams(top_k=128), "top_k"),
        (SamplingParams(top_k=-2), "top_k"),
        (SamplingParams(repetition_penalty=2.5), "repetition_penalty"),
        (SamplingParams(repetition_penalty=-0.1), "repetition_penalty"),
        (SamplingParams(max_tokens=0), "max_tokens"),
        (SamplingParams(max_tokens=8.0), "max_tokens"),  # type: ignore[arg-type]
        (SamplingParams(max_tokens=4, min_tokens=5), "min_tokens"),
        (SamplingParams(seed=-(2**63) - 1), "seed"),
        (SamplingParams(logprobs=1), "logprobs"),
        (SamplingParams(stop_token_ids=(1000,)), "stop_token_ids"),
    ],
)
def test_invalid_sampling_is_rejected_naming_the_parameter(
    sampling: SamplingParams, param: str
) -> None:
    with pytest.raises(ClientError) as caught:
        _request(sampling, vocab_size=1000)
    assert (caught.value.status, caught.value.param) == (400, param)
    assert param in caught.value.message or param == "logprobs"


def test_top_logprobs_are_unsupported_on_this_wire() -> None:
    with pytest.raises(ClientError) as caught:
        _request(SamplingParams(logprobs=5))
    assert (caught.value.code, caught.value.param) == ("start_generation_failed", "logprobs")


@pytest.mark.parametrize(
    ("prompt", "max_model_len", "words"),
    [((), 100, "at least one token"), ((1, 1000), 100, "[0, 1000)"), ((1, 2), 2, "max_tokens")],
)
def test_invalid_prompt_is_rejected(
    prompt: tuple[int, ...], max_model_len: int, words: str
) -> None:
    with pytest.raises(ClientError) as caught:
        _request(prompt=prompt, max_model_len=max_model_len, vocab_size=1000)
    assert caught.value.param == "prompt"
    assert words in caught.value.message


# Round trips.

rows_strategy = st.lists(
    st.integers(0, 4).flatmap(
        lambda n: st.builds(
            ts.OutputRow,
            rid=st.text(max_size=10),
            output_ids=st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n).map(tuple),
            finished_reason=st.sampled_from(["", "stop", "length", "abort", "error", "other"]),
            prompt_tokens=st.integers(0, 10**6),
            completion_tokens=st.integers(0, 10**6),
            cached_tokens=st.integers(0, 10**6),
            logprobs=st.lists(st.floats(allow_nan=False), min_size=n, max_size=n).map(tuple),
            logprob_token_ids=st.lists(st.integers(0, 2**31), min_size=n, max_size=n).map(tuple),
        )
    ),
    max_size=5,
)


@given(rows=rows_strategy, engine_index=st.integers(0, 2**16 - 1), load=st.integers(0, 10**6))
def test_batches_round_trip(rows: list[ts.OutputRow], engine_index: int, load: int) -> None:
    batch = ts.build_batch(rows, engine_index=engine_index, num_running=load, kv_total_pages=load)
    decoded = ts.decode_outputs([ts.encode_outputs(batch)])
    assert decoded == batch
    assert ts.split_batch(decoded) == tuple(rows)


@given(
    temperature=st.floats(0.0, 5.0),
    top_k=st.none() | st.integers(-1, 127),
    max_tokens=st.none() | st.integers(1, 50),
    stop_ids=st.lists(st.integers(0, 999), max_size=4).map(tuple),
)
def test_requests_round_trip(
    temperature: float, top_k: int | None, max_tokens: int | None, stop_ids: tuple[int, ...]
) -> None:
    sampling = SamplingParams(
        temperature=temperature, top_k=top_k, max_tokens=max_tokens, stop_token_ids=stop_ids
    )
    request = _request(sampling, vocab_size=1000)
    assert ts.decode_request(ts.encode_request(request)) == request
