"""A model's tasks from vLLM's `--runner`/`--convert` (docs/pooling.md §4): on the command line
for the first model, in `[[models]]` tables for the others; a bad pair is a ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg_trio.cli import build_parser
from smg_trio.errors import ConfigError
from smg_trio.neutral.pooling import Task, model_tasks
from smg_trio.serving.config import config_from_mapping, read_config_file
from smg_trio.serving.options import config_from_args


def test_runner_and_convert_name_the_tasks() -> None:
    assert model_tasks("generate", None) == {Task.GENERATE}
    assert model_tasks("pooling", None) == {Task.EMBED}
    assert model_tasks("pooling", "embed") == {Task.EMBED}
    assert model_tasks("pooling", "classify") == {Task.CLASSIFY}
    for runner, convert in (("draft", None), ("generate", "embed"), ("pooling", "reward")):
        with pytest.raises(ConfigError):
            model_tasks(runner, convert)


def test_the_flags_and_the_toml_tables(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            *("serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"),
            *("--runner", "pooling", "--convert", "classify"),
        ]
    )
    config = config_from_args(args)
    assert config.model_specs[0].tasks == {Task.CLASSIFY}
    path = tmp_path / "gw.toml"
    path.write_text(
        'workers = ["vllm+zmq://h:1", "vllm+zmq://h:2?model=embed"]\n'
        '[[models]]\nmodel_path = "chat"\n'
        '[[models]]\nmodel_path = "e"\nserved_model_names = ["embed"]\nrunner = "pooling"\n',
        encoding="utf-8",
    )
    config = config_from_mapping(read_config_file(path), source=str(path), base=tmp_path)
    assert [spec.tasks for spec in config.model_specs] == [{Task.GENERATE}, {Task.EMBED}]
    path.write_text(
        path.read_text(encoding="utf-8").replace('runner = "pooling"', 'convert = "embed"'),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="model 'embed': convert 'embed' needs runner"):
        config_from_mapping(read_config_file(path), source=str(path), base=tmp_path)
