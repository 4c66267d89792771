"""Mid-stream migration's pure decisions (core/continuation.py, docs/resilience.md §9)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.continuation import continued, migration_refusal
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind, SamplingParams, StructuredConstraint
from tests.core.mock_tokenizers import WordMockTokenizer

TARGET = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ)


def plan(n: int = 1, **sampling: object) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.COMPLETION,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=msgspec.convert({"max_tokens": 10, **sampling}, SamplingParams),
        n=n,
        stop_spec=StopSpec(strings=("end",)),
    )


def finalized(p: GeneratePlan) -> Finalized:
    return finalize(p, TARGET, WordMockTokenizer())


def test_a_choice_goes_on_from_its_prompt_and_tokens_asking_for_the_rest() -> None:
    p = plan(min_tokens=5, prompt_logprobs=1, seed=3, stop=["end"], temperature=0.7)
    [request] = continued(finalized(p), [(7, 8)]).requests
    assert request.prompt_ids == (1, 2, 3, 7, 8)
    assert request.sampling.max_tokens == 8
    assert request.sampling.min_tokens == 3
    assert request.sampling.prompt_logprobs is None  # they came with the first token
    # Everything else as the first worker was asked.
    original = finalized(p).requests[0].sampling
    assert (
        msgspec.structs.replace(request.sampling, max_tokens=10, min_tokens=5, prompt_logprobs=1)
        == original
    )


def test_a_choice_without_tokens_is_sent_as_it_was() -> None:
    p = plan(prompt_logprobs=1)
    assert continued(finalized(p), [()]).requests == finalized(p).requests


def test_only_unfinished_choices_go_on_each_from_its_own_tokens() -> None:
    p = plan(n=3, seed=5, temperature=1.0)
    out = continued(finalized(p), [(4,), None, (6, 6)])
    assert [r.choice_index for r in out.requests] == [0, 2]
    assert [r.prompt_ids[3:] for r in out.requests] == [(4,), (6, 6)]
    assert [r.sampling.seed for r in out.requests] == [5, 7]  # each choice keeps its seed
    assert out.at_length == ()


def test_a_choice_with_all_its_tokens_finishes_at_length_without_an_engine() -> None:
    out = continued(finalized(plan()), [tuple(range(10))])
    assert out.requests == ()
    assert out.at_length == (0,)


@given(received=st.integers(0, 9), max_tokens=st.integers(10, 20), min_tokens=st.integers(0, 10))
def test_what_is_asked_adds_up_to_the_original(
    received: int, max_tokens: int, min_tokens: int
) -> None:
    p = plan(max_tokens=max_tokens, min_tokens=min_tokens)
    [request] = continued(finalized(p), [tuple(range(100, 100 + received))]).requests
    assert request.sampling.max_tokens == max_tokens - received
    assert request.sampling.min_tokens == max(0, min_tokens - received)
    assert len(request.prompt_ids) == 3 + received


def test_an_unbounded_request_stays_unbounded() -> None:
    p = msgspec.structs.replace(
        plan(), sampling=msgspec.structs.replace(plan().sampling, max_tokens=None)
    )
    [request] = continued(finalized(p), [(9,)]).requests
    assert request.sampling.max_tokens is None


@pytest.mark.parametrize(
    ("sampling", "why"),
    [
        (
            {"constraint": StructuredConstraint(kind=ConstraintKind.REGEX, param="x", text="a+")},
            "grammar",
        ),
        ({"presence_penalty": 0.5}, "penalties"),
        ({"frequency_penalty": -0.1}, "penalties"),
        ({"bad_words": ("x",)}, "bad words"),
    ],
)
def test_what_cannot_go_on_exactly_is_refused(sampling: dict[str, object], why: str) -> None:
    p = plan()
    p = msgspec.structs.replace(p, sampling=msgspec.structs.replace(p.sampling, **sampling))
    refusal = migration_refusal(p)
    assert refusal is not None
    assert why in refusal


def test_what_goes_on_exactly_is_not_refused() -> None:
    assert migration_refusal(plan(repetition_penalty=1.2, seed=1, logprobs=2, n=2)) is None
    assert migration_refusal(msgspec.structs.replace(plan(), echo_only=True)) is not None


def test_an_image_request_goes_on_with_its_images() -> None:
    """Migration continues an image request exactly (docs/images.md §5): its features travel
    with the continuation (the new worker's engine holds none of them, so they go with data),
    and their spans, inside the original prompt, still point at the same ids."""
    feature = MediaFeature(
        identifier="d" * 64,
        offset=1,
        length=2,
        is_embed=None,
        fields=(
            MediaField(
                name="pixel_values",
                tensor=Tensor("float32", (1, 2), bytes(8)),
                kind=FieldKind.FLAT,
            ),
        ),
    )
    p = msgspec.structs.replace(plan(), media=(feature,), media_params=("messages[0]",))
    assert migration_refusal(p) is None
    [request] = continued(finalized(p), [(7, 8)]).requests
    assert request.media == (feature,)
    assert request.prompt_ids[1:3] == p.prompt_ids[1:3]
