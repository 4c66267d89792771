"""The reference vLLM engine as a subprocess, driven over the real wire by a minimal frontend."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

import msgspec
import pytest

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.generation import Generation, Greedy, StopRules
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import EosIds, SamplingParams
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutput, EngineCoreOutputs, FinishReason
from smg_trio.wire.zmq_transport import RequestType, is_engine_dead

from .zmq_frontend import Frontend, collect_until, running_engine, stop_engine

DEMO_EOS = EosIds(primary=0, extra=(2,))  # config.json: 0; generation_config: [2, 0]
CONTEXT = 4096
MODEL = load_engine_model(demo_model_path())
PROMPT_A = [400, 401, 402, 403]
PROMPT_B = [500, 501]


def request(
    request_id: str, prompt: Sequence[int], client_index: int = 0, **sampling: object
) -> vllm_zmq.EngineCoreRequest:
    plan = GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.GENERATE,
        model="demo",
        prompt_ids=tuple(prompt),
        sampling=msgspec.convert(sampling, SamplingParams),
    )
    # finalize folds the EOS ids in, as the gateway does for every vLLM-over-ZMQ request.
    target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=DEMO_EOS)
    (engine_request,) = finalize(plan, target, None).requests
    return vllm_zmq.build_request(
        engine_request,
        engine_request_id=request_id,
        max_model_len=CONTEXT,
        arrival_time=time.time(),
        client_index=client_index,
    )


def outputs_of(messages: Sequence[EngineCoreOutputs], request_id: str) -> list[EngineCoreOutput]:
    return [o for m in messages for o in m.outputs if o.request_id == request_id]


def tokens_of(messages: Sequence[EngineCoreOutputs], request_id: str) -> list[int]:
    return [t for o in outputs_of(messages, request_id) for t in o.new_token_ids]


def finished(*request_ids: str) -> Callable[[Sequence[EngineCoreOutputs]], bool]:
    def done(messages: Sequence[EngineCoreOutputs]) -> bool:
        ended = {o.request_id for m in messages for o in m.outputs if o.finish_reason is not None}
        return ended >= set(request_ids)

    return done


def test_handshake_is_a_headless_engines() -> None:
    with running_engine("vllm-zmq") as (_, handshake, process):
        assert handshake.hello_raw == {"status": "HELLO", "local": False, "headless": True}
        assert (handshake.ready.local, handshake.ready.headless) == (False, True)
        registration = vllm_zmq.decode_ready_response(handshake.registration)
        assert registration.max_model_len == CONTEXT
        assert registration.block_size == 16
        assert registration.dtype == "bfloat16"
        assert registration.vllm_version == "0.33.0"
        assert registration.data_parallel_rank == 0
        assert registration.max_num_seqs == 256
        assert stop_engine(process) < 5


def test_greedy_tokens_are_deterministic_batched_and_unperturbed() -> None:
    rules = StopRules(max_tokens=12, max_model_len=CONTEXT, eos_ids=frozenset({0}))
    expected = Generation(MODEL.source, PROMPT_A, Greedy(), rules)
    while expected.step().finish is None:
        pass
    engine_flags = ("--eos-probability", "0", "--step-ms", "20")  # 20 ms: all three join a step
    with running_engine("vllm-zmq", *engine_flags) as (frontend, _, _process):
        for request_id, prompt in (("a1", PROMPT_A), ("b", PROMPT_B), ("a2", PROMPT_A)):
            frontend.add_vllm(request(request_id, prompt, temperature=0.0, max_tokens=12))
        messages = collect_until(frontend.receive_vllm, finished("a1", "b", "a2"))
        frontend.add_vllm(request("a3", PROMPT_A, temperature=0.0, max_tokens=12))
        alone = collect_until(frontend.receive_vllm, finished("a3"))
    assert tokens_of(messages, "a1") == tokens_of(messages, "a2") == expected.output_ids
    assert tokens_of(alone, "a3") == expected.output_ids
    assert tokens_of(messages, "b") != expected.output_ids
    # One message per step, carrying one new token for every active request.
    assert max(len(m.outputs) for m in messages) == 3
    assert all(len(o.new_token_ids) == 1 for m in messages for o in m.outputs)
    first, *rest = outputs_of(messages, "a1")
    assert first.prefill_stats is not None
    assert first.prefill_stats.num_prompt_tokens == 4
    assert all(o.prefill_stats is None for o in rest)
    assert [o.finish_reason for o in rest][-1] == FinishReason.LENGTH
    assert all(m.finished_requests is None for m in messages)


def test_seeded_sampling_repeats_and_unseeded_does_not() -> None:
    with running_engine("vllm-zmq", "--eos-probability", "0") as (frontend, _, _process):
        for request_id, seed in (("s1", 7), ("s2", 7), ("s3", 8), ("u1", None), ("u2", None)):
            frontend.add_vllm(request(request_id, PROMPT_A, seed=seed, max_tokens=20))
        messages = collect_until(frontend.receive_vllm, finished("s1", "s2", "s3", "u1", "u2"))
    assert tokens_of(messages, "s1") == tokens_of(messages, "s2")
    assert tokens_of(messages, "s1") != tokens_of(messages, "s3")
    assert tokens_of(messages, "u1") != tokens_of(messages, "u2")


def test_eos_stops_only_when_the_request_names_it() -> None:
    with running_engine("vllm-zmq", "--eos-probability", "1") as (frontend, _, _process):
        for seed in range(6):
            frontend.add_vllm(request(f"e{seed}", PROMPT_A, seed=seed, max_tokens=10))
        frontend.add_vllm(request("ignore", PROMPT_A, ignore_eos=True, max_tokens=5))
        frontend.add_vllm(request("min", PROMPT_A, min_tokens=3, max_tokens=10))
        ids = [f"e{seed}" for seed in range(6)]
        messages = collect_until(frontend.receive_vllm, finished(*ids, "ignore", "min"))
    stops = set()
    for request_id in ids:
        (only,) = outputs_of(messages, request_id)
        assert only.finish_reason == FinishReason.STOP
        # The primary EOS stops without a reason; the extra one rides stop_token_ids.
        stops.add((only.new_token_ids, only.stop_reason))
    assert stops == {((0,), None), ((2,), 2)}
    ignored = outputs_of(messages, "ignore")
    assert ignored[-1].finish_reason == FinishReason.LENGTH
    assert set(tokens_of(messages, "ignore")) <= {0, 2}
    assert len(ignored) == 5
    minimum = tokens_of(messages, "min")
    assert len(minimum) == 4
    assert not {0, 2} & set(minimum[:3])
    assert outputs_of(messages, "min")[-1].finish_reason == FinishReason.STOP


def test_stop_token_ids_and_max_model_len() -> None:
    with running_engine("vllm-zmq", "--mode", "echo", "--max-model-len", "8") as (frontend, _, _p):
        frontend.add_vllm(request("stop", PROMPT_A, stop_token_ids=(402,), max_tokens=3))
        messages = collect_until(frontend.receive_vllm, finished("stop"))
        # max_tokens is the rest of the window: the engine ends at max_model_len.
        frontend.add_vllm(request("window", PROMPT_B, max_tokens=100))
        window = collect_until(frontend.receive_vllm, finished("window"))
    assert tokens_of(messages, "stop") == [400, 401, 402]
    last = outputs_of(messages, "stop")[-1]
    assert (last.finish_reason, last.stop_reason) == (FinishReason.STOP, 402)
    assert tokens_of(window, "window") == [500, 501, 500, 501, 500, 501]
    assert outputs_of(window, "window")[-1].finish_reason == FinishReason.LENGTH


def test_abort_stops_generation_within_a_step_and_says_nothing() -> None:
    with running_engine("vllm-zmq", "--step-ms", "20") as (frontend, _, _process):
        frontend.add_vllm(request("long", PROMPT_A, ignore_eos=True, max_tokens=1000))
        frontend.add_vllm(request("other", PROMPT_B, ignore_eos=True, max_tokens=1000))
        collect_until(frontend.receive_vllm, lambda seen: len(seen) >= 3)
        frontend.abort("long", "never-added")
        after = [frontend.receive_vllm() for _ in range(4)]
        counters = frontend.counters()
    # At most the step already under way when the ABORT was sent still carries it.
    assert not outputs_of(after[1:], "long")
    assert all(o.finish_reason is None for m in after for o in m.outputs)
    assert len(outputs_of(after, "other")) == 4
    assert counters["tokens_after_abort"] == 0
    assert counters["abort_ids_received"] == 2
    assert counters["requests_aborted"] == 1
    assert counters["requests_active"] == 1


def test_max_batch_makes_the_others_wait() -> None:
    # 20 ms steps: r2's ADD, sent right after r1's, is in before r1's 4 steps are over even on a
    # loaded machine (at step 0, r1 could finish alone before r2 was read: 1 output a message).
    engine_args = ("--max-batch", "2", "--eos-probability", "0", "--step-ms", "20")
    with running_engine("vllm-zmq", *engine_args) as (fe, _, _p):
        for request_id in ("r1", "r2", "r3"):
            fe.add_vllm(request(request_id, PROMPT_A, max_tokens=4))
        messages = collect_until(fe.receive_vllm, finished("r1", "r2", "r3"))
    assert max(len(m.outputs) for m in messages) == 2
    third_starts = next(i for i, m in enumerate(messages) if outputs_of([m], "r3"))
    first_ends = next(i for i, m in enumerate(messages) if m.outputs[0].finish_reason is not None)
    assert third_starts > first_ends


def test_utility_calls_answer_like_enginecore() -> None:
    with running_engine("vllm-zmq") as (frontend, _, _process):
        assert frontend.utility("get_supported_tasks") == (None, ["generate"])
        failure, value = frontend.utility("no_such_method")
        assert value is None
        assert failure is not None
        assert "no_such_method" in failure
        assert frontend.counters()["utility_calls"] == 3


def test_requests_the_engine_cannot_take_end_in_error() -> None:
    with running_engine("vllm-zmq", "--step-ms", "10") as (frontend, _, _process):
        frontend.add_vllm(request("dup", PROMPT_A, max_tokens=50, ignore_eos=True))
        frontend.add_vllm(request("dup", PROMPT_A, max_tokens=50, ignore_eos=True))
        frontend.add_vllm(request("vocab", [5000], max_tokens=5))
        undecodable = msgspec.msgpack.encode(["bad", [1], None, {"max_tokens": "x"}])
        frontend.send(RequestType.ADD, undecodable)
        errors: dict[str, EngineCoreOutput] = {}
        while len(errors) < 3:
            message = frontend.receive_vllm()
            for output in message.outputs:
                if output.finish_reason == FinishReason.ERROR:
                    assert message.finished_requests == (output.request_id,)
                    assert output.request_id not in errors
                    errors[output.request_id] = output
        assert set(errors) == {"dup", "vocab", "bad"}
        assert all(o.error is not None and o.error.message for o in errors.values())
        assert frontend.counters()["requests_rejected"] == 3


def test_structured_outputs_only_as_vllms_front_end_sends_them() -> None:
    """As the real EngineCore: a raw `choice` (its grammar backends compile none: vLLM's front
    end makes it a grammar) or a map without `_backend` fails the request; the grammar finalize
    writes for a choice is followed (the first choice, then EOS)."""
    choice = {"kind": "choice", "param": "structured_outputs.choice", "choices": ["yes", "no"]}
    good = request("good", PROMPT_A, max_tokens=20, constraint=choice)
    sent = good.sampling_params
    assert sent is not None
    assert sent.structured_outputs is not None
    assert sent.structured_outputs.grammar == 'root ::= "yes" | "no"'
    raw_choice = vllm_zmq.VllmStructuredOutputs(choice=("yes", "no"), backend="xgrammar")
    no_backend = msgspec.structs.replace(sent.structured_outputs, backend=None)
    with running_engine("vllm-zmq", "--step-ms", "10") as (frontend, _, _process):
        for request_id, structured in (("raw", raw_choice), ("bare", no_backend)):
            params = msgspec.structs.replace(sent, structured_outputs=structured)
            frontend.add_vllm(
                msgspec.structs.replace(good, request_id=request_id, sampling_params=params)
            )
        frontend.add_vllm(good)
        messages = collect_until(frontend.receive_vllm, finished("raw", "bare", "good"))
        for request_id in ("raw", "bare"):
            (output,) = outputs_of(messages, request_id)
            assert output.finish_reason == FinishReason.ERROR
        assert "CHOICE" in str(outputs_of(messages, "raw")[0].error)
        assert MODEL.tokenizer is not None
        yes = MODEL.tokenizer.encode("yes", add_special_tokens=False)
        assert tokens_of(messages, "good") == [*yes, DEMO_EOS.primary]
        assert outputs_of(messages, "good")[-1].finish_reason == FinishReason.STOP


def test_sigterm_aborts_in_flight_requests_and_exits() -> None:
    with running_engine("vllm-zmq", "--step-ms", "10", "--max-batch", "1") as (fe, _, process):
        fe.add_vllm(request("running", PROMPT_A, ignore_eos=True, max_tokens=1000))
        fe.add_vllm(request("queued", PROMPT_B, ignore_eos=True, max_tokens=1000))
        fe.receive_vllm()
        assert stop_engine(process) < 5
        last = collect_until(fe.receive_vllm, finished("running", "queued"))[-1]
    assert {(o.request_id, o.finish_reason) for o in last.outputs} == {
        ("running", FinishReason.ABORT),
        ("queued", FinishReason.ABORT),
    }
    assert set(last.finished_requests or ()) == {"running", "queued"}


def test_a_fatal_error_sends_the_dead_sentinel() -> None:
    with running_engine("vllm-zmq") as (frontend, _, process):
        frontend.add_vllm(request("lost", PROMPT_A, client_index=3))  # names no output socket
        assert is_engine_dead(frontend.receive())
        assert process.wait(5) == 1


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_idle_engine_exits_promptly(signal_name: str) -> None:
    frontend = Frontend()
    with running_engine("vllm-zmq", frontend=frontend) as (_, _, process):
        assert stop_engine(process, signal.Signals[signal_name]) < 2
