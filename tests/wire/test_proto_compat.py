"""Our protos/ are wire-compatible with the engines' own: same schema, same bytes both ways.

The reference is the descriptors shipped in the PyPI package `smg-grpc-proto==0.4.28`, the
package the engines' servicers are generated from. Its modules register the same full names as
ours in protobuf's default descriptor pool, so importing both in one process would clash (and its
gencode 6.x warns under our protobuf 7 runtime). Instead a subprocess imports ONLY theirs and
writes their `FileDescriptorProto`s (dependencies first) as one serialized `FileDescriptorSet`.
Here we compare those protos with ours field by field, and build their message classes from a
separate `DescriptorPool`, so the round trips below run their classes and ours side by side.

Compared for every message (nested ones and map entries included), enum and service of the six
files: field number, name, label, type, referenced type name, oneof membership, proto3
`optional`; enum values; reserved numbers; RPC names, request/response types and streaming flags;
file package and imports. Round trips: each representative message is written once in text
format, parsed by both schemas, and must serialize to the same bytes and decode identically
across the two.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, text_format

from smg_trio.wire._proto import (
    common_pb2,
    mlx_engine_pb2,
    sglang_scheduler_pb2,
    tokenspeed_scheduler_pb2,
    trtllm_service_pb2,
    vllm_engine_pb2,
)

OURS: dict[str, ModuleType] = {
    module.DESCRIPTOR.name: module
    for module in (
        common_pb2,
        vllm_engine_pb2,
        sglang_scheduler_pb2,
        tokenspeed_scheduler_pb2,
        mlx_engine_pb2,
        trtllm_service_pb2,
    )
}

DUMP_THEIRS = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("ignore")  # their 6.x gencode warns under a 7.x runtime
    from google.protobuf import descriptor_pb2
    from smg_grpc_proto.generated import (
        common_pb2, mlx_engine_pb2, sglang_scheduler_pb2, tokenspeed_scheduler_pb2,
        trtllm_service_pb2, vllm_engine_pb2,
    )
    files = descriptor_pb2.FileDescriptorSet()
    seen = set()
    def add(descriptor):
        if descriptor.name in seen:
            return
        for dependency in descriptor.dependencies:
            add(dependency)
        seen.add(descriptor.name)
        descriptor.CopyToProto(files.file.add())
    for module in (common_pb2, mlx_engine_pb2, sglang_scheduler_pb2, tokenspeed_scheduler_pb2,
                   trtllm_service_pb2, vllm_engine_pb2):
        add(module.DESCRIPTOR)
    sys.stdout.buffer.write(files.SerializeToString())
    """
)


@pytest.fixture(scope="module")
def their_files() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    done = subprocess.run(
        [sys.executable, "-c", DUMP_THEIRS], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, "cannot load smg-grpc-proto: " + done.stderr.decode()
    files = descriptor_pb2.FileDescriptorSet.FromString(done.stdout)
    return {file.name: file for file in files.file}  # in dependency order


@pytest.fixture(scope="module")
def their_pool(
    their_files: dict[str, descriptor_pb2.FileDescriptorProto],
) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for file in their_files.values():
        pool.Add(file)
    return pool


def our_file(name: str) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    OURS[name].DESCRIPTOR.CopyToProto(proto)
    return proto


# ---- schema -----------------------------------------------------------------------------

FieldFacts = tuple[str, int, int, str, str | None, bool]


def walk_messages(
    prefix: str, messages: Iterable[descriptor_pb2.DescriptorProto]
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for proto in messages:
        name = f"{prefix}.{proto.name}"
        yield name, proto
        yield from walk_messages(name, proto.nested_type)


def message_facts(proto: descriptor_pb2.DescriptorProto) -> dict[str, object]:
    fields: dict[int, FieldFacts] = {}
    for field in proto.field:
        oneof = proto.oneof_decl[field.oneof_index].name if field.HasField("oneof_index") else None
        fields[field.number] = (
            field.name,
            field.label,
            field.type,
            field.type_name,
            oneof,
            field.proto3_optional,
        )
    return {
        "fields": fields,
        "map_entry": proto.options.map_entry,
        "reserved": sorted((r.start, r.end) for r in proto.reserved_range),
        "enums": {enum.name: enum_facts(enum) for enum in proto.enum_type},
    }


def enum_facts(proto: descriptor_pb2.EnumDescriptorProto) -> dict[str, int]:
    return {value.name: value.number for value in proto.value}


def schema(file: descriptor_pb2.FileDescriptorProto) -> dict[str, object]:
    """Everything about a file that decides its wire format and its RPC paths."""
    return {
        "package": file.package,
        "syntax": file.syntax,
        "imports": list(file.dependency),
        "enums": {enum.name: enum_facts(enum) for enum in file.enum_type},
        "messages": {
            name: message_facts(proto)
            for name, proto in walk_messages(file.package, file.message_type)
        },
        "services": {
            service.name: {
                method.name: (
                    method.input_type,
                    method.output_type,
                    method.client_streaming,
                    method.server_streaming,
                )
                for method in service.method
            }
            for service in file.service
        },
    }


@pytest.mark.parametrize("file_name", sorted(OURS))
def test_schema_matches_the_engines(
    file_name: str, their_files: dict[str, descriptor_pb2.FileDescriptorProto]
) -> None:
    ours, theirs = schema(our_file(file_name)), schema(their_files[file_name])
    for part in ("package", "syntax", "imports", "enums", "services"):
        assert ours[part] == theirs[part], f"{file_name} {part}"
    our_messages = ours["messages"]
    their_messages = theirs["messages"]
    assert isinstance(our_messages, dict)
    assert isinstance(their_messages, dict)
    assert sorted(our_messages) == sorted(their_messages), f"{file_name} message names"
    for name, facts in their_messages.items():
        assert our_messages[name] == facts, name


def test_every_engine_service_is_covered(
    their_files: dict[str, descriptor_pb2.FileDescriptorProto],
) -> None:
    services = {
        f"{file.package}.{service.name}"
        for name, file in their_files.items()
        if name in OURS
        for service in file.service
    }
    assert services == {
        "vllm.grpc.engine.VllmEngine",
        "sglang.grpc.scheduler.SglangScheduler",
        "tokenspeed.grpc.scheduler.TokenSpeedScheduler",
        "mlx.grpc.engine.MlxEngine",
        "trtllm.TrtllmService",
    }


def test_a_changed_field_number_is_caught(
    their_files: dict[str, descriptor_pb2.FileDescriptorProto],
) -> None:
    """The comparison is sharp: one renumbered field makes the schemas differ."""
    tampered = our_file("mlx_engine.proto")
    sampling = next(m for m in tampered.message_type if m.name == "SamplingParams")
    next(f for f in sampling.field if f.name == "repetition_penalty").number = 8
    assert schema(tampered) != schema(their_files["mlx_engine.proto"])


# ---- round trips ------------------------------------------------------------------------

SAMPLES: list[tuple[str, str, str]] = [
    # (file, message, text format) — representative messages of every engine.
    ("common.proto", "smg.grpc.common.GetTokenizerChunk", 'data: "PK\\003\\004" sha256: "ab12"'),
    (
        "common.proto",
        "smg.grpc.common.KvEventBatch",
        "sequence_number: 9 timestamp: 12.5 dp_rank: 0 "
        "events { event_id: 1 stored { blocks { block_hash: -7 token_ids: [1, 2] block_size: 16 "
        'extra_keys { text: "salt" } } parent_block_hash: 3 tier: KV_CACHE_TIER_HOST } } '
        "events { event_id: 2 removed { block_hashes: [-7] locality: KV_CACHE_LOCALITY_LOCAL } } "
        "load { running_requests: 3 waiting_uncached_tokens: 0 memory { kv_cache_gb: 1.5 } }",
    ),
    (
        "vllm_engine.proto",
        "vllm.grpc.engine.GenerateRequest",
        'request_id: "req-1" tokenized { original_text: "Hi" input_ids: [15, 27, 3] } '
        "sampling_params { temperature: 0.5 top_p: 0.9 top_k: 40 repetition_penalty: 1.1 "
        'max_tokens: 64 min_tokens: 1 stop: ["\\n\\n", "END"] stop_token_ids: [2] '
        "skip_special_tokens: true n: 1 logprobs: 2 seed: 7 include_stop_str_in_output: true "
        'logit_bias { key: 5 value: -1.5 } json_schema: "{}" } stream: true data_parallel_rank: 1',
    ),
    (
        "vllm_engine.proto",
        "vllm.grpc.engine.GenerateResponse",
        "chunk { token_ids: [7, 8] prompt_tokens: 3 completion_tokens: 2 "
        "output_logprobs { token_logprobs: [-0.5, -1.25] token_ids: [7, 8] "
        "top_logprobs { values: [-0.5] token_ids: [7] } } index: 1 }",
    ),
    (
        "vllm_engine.proto",
        "vllm.grpc.engine.GenerateResponse",
        'complete { output_ids: [9] finish_reason: "stop" prompt_tokens: 3 completion_tokens: 1 '
        'cached_tokens: 2 matched_stop_str: "END" spec_accepted_tokens: 4 }',
    ),
    ("vllm_engine.proto", "vllm.grpc.engine.AbortRequest", 'request_ids: ["a", "b"]'),
    ("vllm_engine.proto", "vllm.grpc.engine.HealthCheckResponse", 'healthy: true message: "ok"'),
    (
        "vllm_engine.proto",
        "vllm.grpc.engine.GetModelInfoResponse",
        'model_path: "/m" is_generation: true max_context_length: 4096 vocab_size: 32000 '
        'served_model_name: "tiny" eos_token_ids: [2, 32000] bos_token_id: 1',
    ),
    (
        "sglang_scheduler.proto",
        "sglang.grpc.scheduler.GenerateRequest",
        'request_id: "s-1" tokenized { input_ids: [1, 2] } sampling_params { temperature: 0.7 '
        "top_p: 1 top_k: -1 max_new_tokens: 16 stop_token_ids: [13] skip_special_tokens: true "
        'no_stop_trim: true logit_bias { key: "42" value: 2 } regex: "a+" } '
        "return_logprob: true top_logprobs_num: 2 stream: true timestamp { seconds: 1700000000 }",
    ),
    (
        "sglang_scheduler.proto",
        "sglang.grpc.scheduler.GenerateResponse",
        'request_id: "s-1" chunk { token_ids: [5] prompt_tokens: 2 completion_tokens: 1 '
        "hidden_states: [0.25] reasoning_tokens: 1 }",
    ),
    (
        "sglang_scheduler.proto",
        "sglang.grpc.scheduler.GenerateResponse",
        'request_id: "s-1" complete { output_ids: [5, 13] finish_reason: "stop" '
        "prompt_tokens: 2 completion_tokens: 2 matched_token_id: 13 index: 0 }",
    ),
    (
        "sglang_scheduler.proto",
        "sglang.grpc.scheduler.AbortRequest",
        'request_id: "s-1" reason: "x"',
    ),
    (
        "sglang_scheduler.proto",
        "sglang.grpc.scheduler.GetModelInfoResponse",
        'model_path: "/m" max_context_length: 8192 eos_token_ids: [2] '
        'default_sampling_params_json: "{}"',
    ),
    (
        "tokenspeed_scheduler.proto",
        "tokenspeed.grpc.scheduler.GenerateRequest",
        'request_id: "t-1" tokenized { input_ids: [4, 5] original_text: "yo" } '
        "sampling_params { temperature: 0 top_k: 1 max_new_tokens: 8 min_new_tokens: 1 "
        'stop: ["STOP"] stop_token_ids: [2] skip_special_tokens: true sampling_seed: 11 } '
        "stream: true logprob_start_len: 0",
    ),
    (
        "tokenspeed_scheduler.proto",
        "tokenspeed.grpc.scheduler.GenerateResponse",
        'request_id: "t-1" chunk { token_ids: [6] prompt_tokens: 2 completion_tokens: 1 '
        'weight_version: "v1" }',
    ),
    (
        "tokenspeed_scheduler.proto",
        "tokenspeed.grpc.scheduler.GenerateResponse",
        'request_id: "t-1" complete { output_ids: [6, 7] finish_reason: "length" '
        "prompt_tokens: 2 completion_tokens: 2 index: 0 }",
    ),
    (
        "tokenspeed_scheduler.proto",
        "tokenspeed.grpc.scheduler.HealthCheckResponse",
        'healthy: false message: "dead"',
    ),
    (
        "mlx_engine.proto",
        "mlx.grpc.engine.GenerateRequest",
        'request_id: "m-1" tokenized { input_ids: [1] } sampling_params { temperature: 1 '
        "top_p: 0.95 top_k: 0 repetition_penalty: 1.05 max_tokens: 10 stop_token_ids: [2, 3] "
        "logit_bias { key: 9 value: -100 } seed: 3 } stream: true",
    ),
    (
        "mlx_engine.proto",
        "mlx.grpc.engine.GenerateResponse",
        "chunk { token_ids: [8] prompt_tokens: 1 completion_tokens: 1 }",
    ),
    (
        "mlx_engine.proto",
        "mlx.grpc.engine.GenerateResponse",
        'complete { output_ids: [8, 2] finish_reason: "stop" matched_stop_token_id: 2 }',
    ),
    ("mlx_engine.proto", "mlx.grpc.engine.AbortRequest", 'request_ids: ["m-1"]'),
    (
        "trtllm_service.proto",
        "trtllm.GenerateRequest",
        'request_id: "g-1" tokenized { input_token_ids: [1, 2, 3] } '
        "sampling_config { beam_width: 1 num_return_sequences: 1 top_k: 20 temperature: 0.8 "
        "seed: 5 } output_config { logprobs: 1 } max_tokens: 16 streaming: true "
        'stop: ["</s>"] include_stop_token_in_output: true '
        'guided_decoding { guide_type: GUIDE_TYPE_JSON_SCHEMA guide: "{}" }',
    ),
    (
        "trtllm_service.proto",
        "trtllm.GenerateResponse",
        'request_id: "g-1" chunk { token_ids: [4] sequence_index: 0 prompt_tokens: 3 '
        "completion_tokens: 1 logprobs { token_id: 4 logprob: -0.5 "
        "top_logprobs { token_id: 4 logprob: -0.5 } } }",
    ),
    (
        "trtllm_service.proto",
        "trtllm.GenerateResponse",
        'request_id: "g-1" complete { output_token_ids: [4, 5] finish_reason: "stop" '
        "matched_token_id: 5 prompt_tokens: 3 completion_tokens: 2 }",
    ),
    ("trtllm_service.proto", "trtllm.HealthCheckResponse", 'status: "OK"'),
    ("trtllm_service.proto", "trtllm.AbortRequest", 'request_id: "g-1"'),
]


def our_class(file_name: str, full_name: str) -> type[message.Message]:
    descriptor = OURS[file_name].DESCRIPTOR.pool.FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(descriptor)


@pytest.mark.parametrize(
    ("file_name", "full_name", "text"), SAMPLES, ids=[f"{s[1]}:{i}" for i, s in enumerate(SAMPLES)]
)
def test_round_trip_with_the_engines_classes(
    file_name: str, full_name: str, text: str, their_pool: descriptor_pool.DescriptorPool
) -> None:
    ours = text_format.Parse(text, our_class(file_name, full_name)())
    theirs = text_format.Parse(
        text, message_factory.GetMessageClass(their_pool.FindMessageTypeByName(full_name))()
    )
    our_bytes = ours.SerializeToString(deterministic=True)
    their_bytes = theirs.SerializeToString(deterministic=True)
    assert our_bytes == their_bytes

    decoded_by_them = type(theirs).FromString(our_bytes)
    decoded_by_us = type(ours).FromString(their_bytes)
    # text_format skips unknown fields: a field one side does not know would show up here.
    assert text_format.MessageToString(decoded_by_them) == text_format.MessageToString(ours)
    assert text_format.MessageToString(decoded_by_us) == text_format.MessageToString(theirs)
    assert decoded_by_us == ours
