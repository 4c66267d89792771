"""Images as vLLM gRPC `media_refs` (wire/vllm_media_refs.py, docs/images.md §5.1), and the
reference engine's reading of them (engines/grpc_vllm_media_refs.py, as smg-grpc-servicer
0.14.0's `--mm-processor inprocess` reads them).

- A Qwen2-VL multi-image, multi-turn prompt (our chat path: ids equal to the HF processor's,
  tests/model/test_qwen2_vl_golden.py) folds each image's span back to its one anchor; the refs
  are the images' `data:` URIs in prompt order; the reference engine expands the folded prompt
  back to exactly our ids.
- Tensors instead: a worker that takes no `data`, an image without its source (processed with
  `mm_processor_kwargs`), an anchor that also occurs in the text.
- The reference engine refuses what the servicer refuses, in its words.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
from pathlib import Path
from typing import Final

import msgspec
import pytest

from smg_trio.core.prepare import chat_prompt
from smg_trio.engines.cli import load_served_model
from smg_trio.engines.grpc_policy import Rejected, ServedModel
from smg_trio.engines.grpc_vllm_media_refs import expanded_by_refs
from smg_trio.model.folder import load_model_dir
from smg_trio.model.qwen2_vl_images import Qwen2VLImages
from smg_trio.model.vision import load_vision
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.data_uri import canonical_data_uri, data_uri_of
from smg_trio.wire.grpc_messages import build_vllm_generate
from smg_trio.wire.vllm_media_refs import folded_prompt, media_ref_schemes, refs_fit
from tests.model.qwen2_vl_folder import qwen_folder
from tests.model.vision_goldens import multi_turn_chat, picture

pytestmark = pytest.mark.timeout(60)

NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMES: Final = media_ref_schemes("http,https,data")
IMAGES: Final = [
    picture(30, 20, "RGB", 1),
    picture(640, 480, "RGB", 2),
    picture(97, 333, "RGBA", 3),
    picture(123, 457, "RGB", 6),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen_folder(tmp_path_factory.mktemp("refs"), "qwen2_vl")


def _prompt(folder: Path) -> tuple[tuple[int, ...], tuple[MediaFeature, ...]]:
    vision = load_vision(folder, folder.name)
    assert isinstance(vision, Qwen2VLImages)
    processed = [
        msgspec.structs.replace(vision.process(data, "image"), source=data_uri_of(data))
        for data in IMAGES
    ]
    model = load_model_dir(folder).prompt_model()
    ids, features = chat_prompt(multi_turn_chat(), model, now=NOW, images=processed)
    return tuple(ids), tuple(features)


def _built(
    ids: tuple[int, ...], features: tuple[MediaFeature, ...], schemes: frozenset[str] = SCHEMES
) -> vllm.GenerateRequest:
    request = EngineRequest(
        request_id="r",
        choice_index=0,
        prompt_ids=ids,
        sampling=SamplingParams(max_tokens=2),
        media=features,
    )
    return build_vllm_generate(request, "r-0", media_ref_schemes=schemes)


def _served(folder: Path) -> ServedModel:
    return dataclasses.replace(load_served_model(folder), mm_processor=True)


def test_qwen_images_fold_to_anchors_and_the_worker_expands_them_back(folder: Path) -> None:
    ids, features = _prompt(folder)
    message = _built(ids, features)
    assert message.HasField("media_refs")
    assert not message.HasField("mm_inputs")
    folded = list(message.tokenized.input_ids)
    anchor = features[0].anchor
    assert len(anchor) == 1
    assert folded.count(anchor[0]) == len(IMAGES)
    assert len(folded) == len(ids) - sum(f.length - 1 for f in features)
    assert folded == folded_prompt(features, ids)
    refs = message.media_refs.items
    assert [r.modality for r in refs] == [common.IMAGE] * len(IMAGES)
    assert [base64.b64decode(r.url.partition(",")[2]) for r in refs] == IMAGES
    assert all(r.url.startswith("data:image/png;base64,") for r in refs)
    assert expanded_by_refs(message, folded, _served(folder)) == ids


def test_tensors_go_when_refs_do_not_fit(folder: Path) -> None:
    ids, features = _prompt(folder)
    assert not refs_fit(features, ids, frozenset({"http", "https"}))
    assert not refs_fit(features, ids, frozenset())
    unsourced = (msgspec.structs.replace(features[0], source=""), *features[1:])
    assert not refs_fit(unsourced, ids, SCHEMES)
    anchor = features[0].anchor[0]
    in_text = (*ids[: features[0].offset], anchor, *ids[features[0].offset :])
    moved = tuple(
        msgspec.structs.replace(f, offset=f.offset + 1) for f in features
    )  # the same images after an anchor id the text itself holds
    assert not refs_fit(moved, in_text, SCHEMES)
    assert refs_fit(features, ids, SCHEMES)


@pytest.mark.parametrize(
    ("corrupt", "problem"),
    [
        (
            lambda r: r.media_refs.items.add(modality=common.IMAGE, url="https://x/a.png"),
            "not fetched by this reference",
        ),
        (
            lambda r: r.media_refs.items.add(modality=common.IMAGE, url="file:///a.png"),
            "url scheme 'file' is not accepted",
        ),
        (lambda r: r.media_refs.items.add(modality=common.IMAGE, url=""), "empty url"),
        (lambda r: r.media_refs.items[0].__setattr__("modality", common.VIDEO), "images only"),
        (lambda r: r.media_refs.items.pop(), "placeholder validation failed"),
        (lambda r: r.media_refs.items[0].__setattr__("url", "data:image/png,abc"), "base64"),
        (lambda r: r.mm_inputs.mm_hashes.append("x"), "cannot be combined"),
    ],
)
def test_the_reference_engine_refuses_as_the_servicer_does(
    folder: Path, corrupt: object, problem: str
) -> None:
    ids, features = _prompt(folder)
    message = _built(ids, features)
    corrupt(message)  # type: ignore[operator]
    with pytest.raises(Rejected, match=problem):
        expanded_by_refs(message, list(message.tokenized.input_ids), _served(folder))


def test_a_worker_without_its_processor_refuses_refs(folder: Path) -> None:
    ids, features = _prompt(folder)
    message = _built(ids, features)
    with pytest.raises(Rejected, match="--mm-processor"):
        expanded_by_refs(message, list(message.tokenized.input_ids), load_served_model(folder))


def test_data_uris_as_vllms_fetcher_reads_them() -> None:
    assert data_uri_of(IMAGES[0]).startswith("data:image/png;base64,")
    assert data_uri_of(b"\xff\xd8\xff\xe0rest").startswith("data:image/jpeg;base64,")
    assert data_uri_of(b"RIFF\0\0\0\0WEBPVP8 ").startswith("data:image/webp;base64,")
    assert data_uri_of(b"?").startswith("data:application/octet-stream;base64,")
    assert canonical_data_uri("data:image/png;base64,QQ==") == "data:image/png;base64,QQ=="
    assert canonical_data_uri("data:Image/PNG;base64;x=1,QQ==") == "data:image/png;base64,QQ=="
