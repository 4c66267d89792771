"""The engine launch helper builds command lines our own engine CLI reads back as meant."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from smg_trio.cli import build_parser
from smg_trio.engines.cli import engine_parser
from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand


def parsed(command: EngineCommand) -> dict[str, object]:
    """What the launched entry point reads, which is what `smg-trio engine ...` reads too."""
    argv = command.argv()
    assert argv[:4] == [sys.executable, "-m", "smg_trio.engines", command.kind]
    launched = vars(engine_parser(command.kind).parse_args(argv[3:]))
    through_the_cli = vars(build_parser().parse_args(["engine", *argv[3:]]))
    assert through_the_cli.pop("subcommand") == "engine"
    assert launched == through_the_cli
    return launched


def test_a_zmq_engine_gets_every_option_it_was_given(tmp_path: Path) -> None:
    replay = tmp_path / "replay.txt"
    args = parsed(
        EngineCommand(
            "vllm-zmq",
            handshake="tcp://127.0.0.1:5555",
            engine_index=1,
            model_path=tmp_path,
            step_ms=2.5,
            max_batch=8,
            replay_file=replay,
        )
    )
    assert args["wire"] == "vllm-zmq"
    assert args["handshake"] == "tcp://127.0.0.1:5555"
    assert args["engine_index"] == 1
    assert args["model_path"] == str(tmp_path)
    assert args["step_ms"] == 2.5
    assert args["max_batch"] == 8
    assert (args["mode"], args["replay_file"]) == ("replay", str(replay))  # replay implies it
    assert args["log_level"] == "WARNING"  # launched engines are quiet by default


def test_a_grpc_engine_listens_where_told_and_extra_flags_come_last() -> None:
    command = EngineCommand(
        "sglang-grpc",
        host="127.0.0.1",
        port=0,
        mode=Mode.ECHO,
        log_level=None,
        extra=("--eos-probability", "0", "--mode", "random"),
    )
    args = parsed(command)
    assert (args["host"], args["port"]) == ("127.0.0.1", 0)
    assert args["eos_probability"] == 0.0
    assert args["mode"] == "random"  # the extra flag wins
    assert args["log_level"] == "INFO"  # the engine's own default
    assert "--handshake" not in command.flags()


@pytest.mark.parametrize(
    "command",
    [
        lambda: EngineCommand("vllm-zmq"),
        lambda: EngineCommand("vllm-grpc", handshake="tcp://127.0.0.1:1"),
        lambda: EngineCommand("vllm-zmq", handshake="tcp://127.0.0.1:1", port=0),
        lambda: EngineCommand(
            "vllm-zmq", handshake="tcp://127.0.0.1:1", data_addresses=("ipc:///a", "ipc:///b")
        ),
        lambda: EngineCommand("vllm-grpc", mode=Mode.ECHO, replay_file=Path("r.txt")),
    ],
)
def test_options_that_do_not_go_together_are_refused(
    command: Callable[[], EngineCommand],
) -> None:
    with pytest.raises(ValueError, match=r"goes with|are for"):
        command()
