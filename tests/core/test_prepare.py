"""prepare: template, tokenize once, map sampling, build the router's stop spec."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer, processors

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, prepare_chat, prepare_completion, prepare_generate
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.model.hf_tokenizer import ModelTokenizer
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint
from smg_trio.wire import openai_decode as oad

NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
DEMO = load_model_dir(demo_model_path())
MODEL = DEMO.prompt_model()
TINY_LLAMA = Path(__file__).resolve().parents[3] / "shared" / "models" / "tiny-llama"


def chat(body: dict[str, object], model: PromptModel = MODEL) -> GeneratePlan:
    req = oad.decode_chat_request(msgspec.json.encode(body))
    return prepare_chat(req, model, request_id="r1", now=NOW)


def chat_plan(**fields: object) -> GeneratePlan:
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    req = oad.decode_chat_request(msgspec.json.encode(body))
    return prepare_chat(req, MODEL, request_id="r1", now=NOW)


def test_chat_renders_the_template_and_tokenizes_it_once() -> None:
    plan = chat_plan()
    expected = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False) == expected
    assert plan.prompt_ids == tuple(DEMO.tokenizer.encode(expected, add_special_tokens=False))
    assert plan.endpoint is Endpoint.CHAT
    assert plan.model == "m"
    assert plan.n == 1


def test_bos_written_by_the_template_is_not_added_twice() -> None:
    # A tokenizer whose post-processor adds BOS, and a template that writes BOS itself: the chat
    # prompt must start with exactly one BOS (transformers encodes chat prompts without specials).
    hf = Tokenizer.from_file(str(demo_model_path() / "tokenizer.json"))
    hf.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    tokenizer = ModelTokenizer(hf, eos_token_ids=(2,))
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        special_tokens={"bos_token": "<|endoftext|>"},
    )
    model = msgspec.structs.replace(MODEL, tokenizer=tokenizer, chat_template=template)
    req = oad.decode_chat_request(b'{"messages":[{"role":"user","content":"hi"}]}')
    plan = prepare_chat(req, model, request_id="r", now=NOW)
    assert plan.prompt_ids.count(0) == 1
    assert plan.prompt_ids[0] == 0
    # ... while a completion prompt does get the post-processor's BOS.
    comp = oad.decode_completion_request(b'{"prompt":"hi"}')
    assert prepare_completion(comp, model, request_id="r").prompt_ids[0] == 0


@pytest.mark.skipif(not TINY_LLAMA.is_dir(), reason="shared tiny-llama model not present")
def test_tiny_llama_prompt_starts_with_one_bos() -> None:
    model = load_model_dir(TINY_LLAMA).prompt_model()
    req = oad.decode_chat_request(b'{"messages":[{"role":"user","content":"def hello(world):"}]}')
    plan = prepare_chat(req, model, request_id="r", now=NOW)
    assert plan.prompt_ids[0] == 1
    assert plan.prompt_ids.count(1) == 1
    assert plan.stop_spec.token_ids == (2, 7)
    # config.json's EOS is the primary one: a stop on it reports stop_reason null (as vLLM);
    # 7, generation_config.json's extra EOS, reports itself.
    assert plan.stop_spec.eos_token_id == 2


def test_unset_max_tokens_becomes_the_rest_of_the_context() -> None:
    plan = chat_plan()
    assert MODEL.context_length == 4096
    assert plan.sampling.max_tokens == 4096 - len(plan.prompt_ids)
    assert chat_plan(max_tokens=5).sampling.max_tokens == 5
    assert chat_plan(max_completion_tokens=6, max_tokens=5).sampling.max_tokens == 6


def test_max_tokens_over_the_context_is_capped_to_the_room_left() -> None:
    """vLLM 0.32: min(max_tokens, context - prompt); only a prompt with no room is a 400."""
    plan = chat_plan(max_tokens=4096)
    assert plan.sampling.max_tokens == 4096 - len(plan.prompt_ids)
    full = msgspec.structs.replace(MODEL, context_length=len(plan.prompt_ids))
    req = oad.decode_chat_request(
        msgspec.json.encode({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    )
    with pytest.raises(ClientError) as info:
        prepare_chat(req, full, request_id="r1", now=NOW)
    assert info.value.status == 400
    assert info.value.param == "messages"
    assert f"maximum context length is {len(plan.prompt_ids)}" in info.value.message


def test_stop_spec_has_eos_then_user_ids_and_strings() -> None:
    plan = chat_plan(stop=["\n\n", "END"], stop_token_ids=[7, 2])
    assert plan.stop_spec.strings == ("\n\n", "END")
    assert plan.stop_spec.token_ids == (0, 2, 7)
    assert plan.sampling.stop == ("\n\n", "END")
    assert plan.sampling.stop_token_ids == (7, 2)
    assert chat_plan(ignore_eos=True, stop_token_ids=[7]).stop_spec.token_ids == (7,)
    assert chat_plan().stop_spec.eos_token_id == DEMO.eos_ids.primary is not None
    assert chat_plan(ignore_eos=True).stop_spec.eos_token_id is None  # no EOS stop at all


def test_include_stop_str_in_output_is_no_stop_trim() -> None:
    assert chat_plan(include_stop_str_in_output=True).stop_spec.no_stop_trim
    assert chat_plan(no_stop_trim=True).sampling.no_stop_trim
    assert not chat_plan().stop_spec.no_stop_trim


def test_sampling_and_stream_fields_are_mapped() -> None:
    plan = chat_plan(
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        seed=3,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=True,
        top_logprobs=2,
        skip_special_tokens=False,
    )
    s = plan.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed, s.logprobs) == (
        0.5,
        0.9,
        5,
        0.1,
        3,
        2,
    )
    assert plan.n == 2
    assert plan.stream
    assert plan.include_usage
    assert not plan.stop_spec.skip_special_tokens


def test_an_image_without_its_processed_image_is_refused_naming_the_part() -> None:
    """core never sees an image's bytes: an image part reaching preparation unprocessed (a
    path that takes none) is a 400 naming the part."""
    with pytest.raises(ClientError) as info:
        chat_plan(
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ]
        )
    assert info.value.code == "multimodal_not_supported"
    assert info.value.param == "messages[0].content[0].image_url"


def test_text_parts_are_joined() -> None:
    plan = chat_plan(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ]
    )
    assert "a\nb" in DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)


def test_unknown_role_raised_by_the_template_is_a_400() -> None:
    # The demo template raises for roles it does not know; "tool" is one of them.
    with pytest.raises(ClientError) as info:
        chat_plan(messages=[{"role": "tool", "content": "x", "tool_call_id": "c"}])
    assert info.value.status == 400


def test_continue_final_message_cuts_after_the_last_content() -> None:
    plan = chat_plan(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Once upon"},
        ],
        add_generation_prompt=False,
        continue_final_message=True,
    )
    text = DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)
    assert text.endswith("<|im_start|>assistant\nOnce upon")


def test_model_without_template_cannot_chat() -> None:
    model = msgspec.structs.replace(MODEL, chat_template=None)
    with pytest.raises(ClientError, match="no chat template"):
        chat({"messages": [{"role": "user", "content": "x"}]}, model)


def test_completion_text_ids_and_echo() -> None:
    req = oad.decode_completion_request(b'{"prompt":"hello there","echo":true,"max_tokens":3}')
    plan = prepare_completion(req, MODEL, request_id="c")
    assert plan.endpoint is Endpoint.COMPLETION
    assert plan.echo_text == "hello there"
    assert plan.sampling.max_tokens == 3
    ids_req = oad.decode_completion_request(b'{"prompt":[5,6,7]}')
    ids_plan = prepare_completion(ids_req, MODEL, request_id="c")
    assert ids_plan.prompt_ids == (5, 6, 7)
    assert ids_plan.sampling.max_tokens == 16  # OpenAI's completions default


def completion_plan(**fields: object) -> GeneratePlan:
    req = oad.decode_completion_request(msgspec.json.encode({"prompt": "hello there", **fields}))
    return prepare_completion(req, MODEL, request_id="c")


def test_completion_prompt_logprobs_as_vllm_asks_for_them() -> None:
    # lm-eval-harness's scoring: one engine token (never shown), prompt logprobs at logprobs' width.
    scoring = completion_plan(echo=True, logprobs=1, max_tokens=0)
    assert (scoring.echo_only, scoring.sampling.max_tokens) == (True, 1)
    assert (scoring.sampling.prompt_logprobs, scoring.prompt_logprobs_param) == (1, "echo")
    echoed = completion_plan(echo=True, logprobs=3, max_tokens=2)
    assert (echoed.echo_only, echoed.sampling.max_tokens) == (False, 2)
    assert echoed.sampling.prompt_logprobs == 3
    assert completion_plan(echo=True, max_tokens=2).sampling.prompt_logprobs is None
    assert completion_plan(logprobs=3, max_tokens=2).sampling.prompt_logprobs is None
    extra = completion_plan(echo=True, logprobs=3, prompt_logprobs=5)  # the explicit one wins
    assert (extra.sampling.prompt_logprobs, extra.prompt_logprobs_param) == (5, "prompt_logprobs")


def test_chat_prompt_logprobs_explicit_or_implied_by_echo() -> None:
    explicit = chat_plan(prompt_logprobs=4)
    assert (explicit.sampling.prompt_logprobs, explicit.prompt_logprobs_param) == (
        4,
        "prompt_logprobs",
    )
    implied = chat_plan(echo=True, logprobs=True, top_logprobs=2)
    assert (implied.sampling.prompt_logprobs, implied.prompt_logprobs_param) == (2, None)
    assert chat_plan(echo=True).sampling.prompt_logprobs == 0
    assert chat_plan(echo=True, stream=True).sampling.prompt_logprobs is None
    assert chat_plan().sampling.prompt_logprobs is None


def test_prompt_ids_outside_the_vocabulary_are_rejected() -> None:
    req = oad.decode_completion_request(b'{"prompt":[5, 999999]}')
    with pytest.raises(ClientError, match="outside the vocabulary") as info:
        prepare_completion(req, MODEL, request_id="c")
    assert info.value.param == "prompt"


def test_empty_prompt_is_rejected() -> None:
    req = oad.decode_completion_request(b'{"prompt":""}')
    with pytest.raises(ClientError, match="empty"):
        prepare_completion(req, MODEL, request_id="c")


def test_generate_maps_sglang_sampling_params() -> None:
    req = oad.decode_generate_request(
        b'{"input_ids":[5,6],"stream":true,"sampling_params":{"max_new_tokens":4,'
        b'"stop":["x"],"no_stop_trim":true,"n":2,"sampling_seed":9,"ignore_eos":true}}'
    )
    plan = prepare_generate(req, MODEL, request_id="g")
    assert plan.endpoint is Endpoint.GENERATE
    assert plan.prompt_ids == (5, 6)
    assert plan.sampling.max_tokens == 4
    assert plan.sampling.seed == 9
    assert plan.n == 2
    assert plan.stream
    assert plan.stop_spec.strings == ("x",)
    assert plan.stop_spec.no_stop_trim
    assert plan.stop_spec.token_ids == ()  # ignore_eos


def test_developer_renders_as_system_for_a_template_without_that_role() -> None:
    """vLLM's rendering: the demo ChatML template knows no developer role."""
    plan = chat_plan(messages=[{"role": "developer", "content": "be brief"}])
    text = DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nbe brief<|im_end|>")
    assert "developer" not in text


def test_assistant_tool_call_turn_with_null_content_renders_as_empty() -> None:
    plan = chat_plan(
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "user", "content": "go on"},
        ]
    )
    text = DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)
    assert "<|im_start|>assistant\n<|im_end|>" in text


def test_reasoning_effort_reaches_the_template_unless_the_client_set_it() -> None:
    template = ChatTemplate(
        "{{ reasoning_effort | default('unset') }}", special_tokens={"eos_token": "</s>"}
    )
    model = msgspec.structs.replace(MODEL, chat_template=template)
    high = chat({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"}, model)
    assert DEMO.tokenizer.decode(high.prompt_ids, skip_special_tokens=False) == "high"
    kept = chat(
        {
            "messages": [{"role": "user", "content": "x"}],
            "reasoning_effort": "high",
            "chat_template_kwargs": {"reasoning_effort": "low"},
        },
        model,
    )
    assert DEMO.tokenizer.decode(kept.prompt_ids, skip_special_tokens=False) == "low"


def test_truncate_prompt_tokens_keeps_the_last_tokens() -> None:
    req = oad.decode_completion_request(b'{"prompt":[5,6,7,8],"truncate_prompt_tokens":2}')
    assert prepare_completion(req, MODEL, request_id="c").prompt_ids == (7, 8)
    too_many = oad.decode_completion_request(b'{"prompt":[5,6],"truncate_prompt_tokens":5000}')
    with pytest.raises(ClientError) as info:
        prepare_completion(too_many, MODEL, request_id="c")
    assert info.value.param == "truncate_prompt_tokens"


def test_integral_float_max_tokens_is_accepted_as_vllm_does() -> None:
    req = oad.decode_completion_request(b'{"prompt":"hi","max_tokens":16.0}')
    assert prepare_completion(req, MODEL, request_id="c").sampling.max_tokens == 16


def test_logit_bias_ids_outside_the_vocabulary_are_400s() -> None:
    plan = chat_plan(logit_bias={"5": 100, "6": -100.0})
    assert plan.sampling.logit_bias == ((5, 100.0), (6, -100.0))
    with pytest.raises(ClientError) as info:
        chat_plan(logit_bias={str(MODEL.vocab_size): 1})
    assert info.value.param == "logit_bias"


def test_the_structured_output_constraint_lands_on_sampling() -> None:
    plan = chat_plan(
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": {"type": "object"}},
        }
    )
    assert plan.sampling.constraint == StructuredConstraint(
        kind=ConstraintKind.JSON_SCHEMA,
        param="response_format.json_schema.schema",
        text='{"type":"object"}',
    )
