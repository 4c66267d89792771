"""`smg-trio serve` and `smg-trio demo` as a user runs them: configuration problems exit 2
before anything starts, the server answers and stops on a signal, the scripted demo succeeds,
and Ctrl-C stops the interactive demo within 2 s leaving no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from harness.ports import free_port
from smg_trio.cli import main
from smg_trio.model.folder import demo_model_path

TEST_TIMEOUT_S: Final = 30.0
CTRL_C_BOUND_S: Final = 2.0
MODEL: Final = str(demo_model_path())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param(["--worker", "zmq://127.0.0.1:27937"], "names no runtime", id="no-runtime"),
        pytest.param(["--worker", "foo+zmq://127.0.0.1:27937"], "foo", id="unknown-runtime"),
        pytest.param(["--worker", "sglang+zmq://127.0.0.1:27937"], "sglang", id="no-adapter"),
        pytest.param(["--worker", "vllm+zmq://127.0.0.1"], "HOST:PORT", id="no-port"),
        pytest.param([], "at least one --worker", id="no-worker"),
        pytest.param(["--worker", "mlx+zmq://127.0.0.1:8200"], "mlx", id="no-zmq-adapter"),
        pytest.param(
            ["--worker", "vllm+zmq://127.0.0.1:27937", "--certfile", "/nonexistent.pem"],
            "both a certificate and a key",
            id="tls-half",
        ),
    ],
)
def test_bad_configuration_exits_2_naming_the_problem(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--model-path", MODEL, "--port", "0", *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("smg-trio: ")
    assert message in error


@pytest.mark.parametrize("command", [[], ["serve"], ["demo"]])
def test_help_prints_every_option(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help strings with `%`: a bare one (`90%`) made `serve --help` crash."""
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_missing_model_and_busy_port_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = f"vllm+zmq://127.0.0.1:{free_port()}"
    assert main(["serve", "--worker", worker]) == 2
    assert "--model-path" in capsys.readouterr().err
    assert main(["serve", "--model-path", str(tmp_path / "nope"), "--worker", worker]) == 2
    assert "not a directory" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--model-path", MODEL, "--worker", worker, "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
        busy_worker = f"vllm+zmq://127.0.0.1:{port}"
        assert main(["serve", "--model-path", MODEL, "--worker", busy_worker, "--port", "0"]) == 2
        assert f"cannot bind ZMQ socket to tcp://127.0.0.1:{port}" in capsys.readouterr().err


def test_config_file_with_flags_over_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'model_path = "{MODEL}"\nworkers = ["zmq://127.0.0.1:1"]\n')
    assert main(["serve", "--config", str(config)]) == 2
    assert "names no runtime" in capsys.readouterr().err
    # A --worker flag replaces the file's list; its problem is then the one named.
    assert main(["serve", "--config", str(config), "--worker", "trtllm+zmq://127.0.0.1:1"]) == 2
    assert "'trtllm' has no adapter for the zmq wire" in capsys.readouterr().err


async def read_until(stream: trio.abc.ReceiveStream, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
    seen = b""
    while (match := pattern.search(seen)) is None:
        data = await stream.receive_some(65536)
        assert data, f"the process ended before printing {pattern.pattern!r}: {seen!r}"
        seen += data
    return match


def serve_command(worker_port: int, *flags: str) -> list[str]:
    """`smg_trio serve` of the demo model on a port the kernel picks, one vLLM ZMQ worker."""
    worker = f"vllm+zmq://127.0.0.1:{worker_port}"
    serve = [sys.executable, "-m", "smg_trio", "serve", "--model-path", MODEL, "--port", "0"]
    return [*serve, "--worker", worker, *flags]


async def serving_port(process: trio.Process) -> int:
    """The HTTP port a `serve` subprocess (its stderr piped) says it is running on."""
    assert process.stderr is not None
    running = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")
    return int((await read_until(process.stderr, running)).group(1))


def children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry))
    return children


# A real-time bound (SIGTERM to exit within CTRL_C_BOUND_S): run alone (docs/architecture.md
# §8.1). In the parallel phase at load 25 the process's start alone took 28 of the 30 s.
@pytest.mark.serial
async def test_serve_answers_and_stops_on_sigterm() -> None:
    process = await trio.lowlevel.open_process(serve_command(free_port()), stderr=-1)
    try:
        with trio.fail_after(TEST_TIMEOUT_S):
            port = await serving_port(process)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                assert (await client.get("/health")).status_code == 503  # no engine dialled
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(CTRL_C_BOUND_S):
                assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()


async def test_demo_once_serves_the_example_requests() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        result = await trio.run_process(
            [sys.executable, "-m", "smg_trio", "demo", "--once", "--port", "0"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    assert "curl -N --http2-prior-knowledge http://127.0.0.1:" in out
    assert "-m smg_trio.client ws://127.0.0.1:" in out
    assert "--stop STOP\n" in out  # the WebSocket example stops like the curl one
    assert "finish_reason: stop" in out
    assert '"tokens_after_abort": 0' in out
    assert out.rstrip().endswith("demo OK")
    # A clean run says nothing alarming on the way out: the engine stops after the gateway
    # (which would log it dead), and a drain with nothing to wait for is no warning.
    logged = result.stderr.decode()
    assert "ERROR" not in logged, logged
    assert "WARNING" not in logged, logged


@pytest.mark.serial
async def test_demo_stops_within_2s_on_ctrl_c_leaving_no_process() -> None:
    command = [sys.executable, "-m", "smg_trio", "demo", "--port", "0"]
    process = await trio.lowlevel.open_process(command, stdout=-1)
    children: list[int] = []
    try:
        with trio.fail_after(TEST_TIMEOUT_S):
            assert process.stdout is not None
            await read_until(process.stdout, re.compile(rb"Serving until Ctrl-C"))
            children = children_of(process.pid)
            assert children, "the engine child process is running"
            start = trio.current_time()
            process.send_signal(signal.SIGINT)
            with trio.fail_after(CTRL_C_BOUND_S):
                assert await process.wait() == 0
            assert trio.current_time() - start < CTRL_C_BOUND_S
        left = [child for child in children if process_exists(child)]
        assert not left, f"engine processes left behind: {left}"
    finally:
        process.kill()
        await process.wait()
        for child in children:
            if process_exists(child):
                os.kill(child, signal.SIGKILL)


def process_exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


async def test_serve_with_json_logs_writes_one_json_object_per_line() -> None:
    """docs/observability.md §2: every line of `--log-format json` parses, and the request's
    line carries the id the client sent (no engine here: the request is a 503)."""
    command = serve_command(free_port(), "--log-format", "json")
    process = await trio.lowlevel.open_process(command, stderr=-1)
    try:
        with trio.fail_after(TEST_TIMEOUT_S):
            port = await serving_port(process)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                answer = await client.post(
                    "/v1/completions",
                    json={"prompt": "hi"},
                    headers={"x-request-id": "cli-json-1"},
                )
            assert answer.status_code == 503
            process.send_signal(signal.SIGTERM)
            rest = b""
            assert process.stderr is not None
            while data := await process.stderr.receive_some(65536):
                rest += data
            assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()
    lines = [json.loads(line) for line in rest.decode().splitlines() if line.strip()]
    requests = [line for line in lines if line["logger"] == "smg_trio.requests"]
    assert [line["request_id"] for line in requests] == ["cli-json-1"]
    assert requests[0]["status"] == 503
    assert requests[0]["error_code"] == "backend_unavailable"
    assert any(line["message"].startswith("shutting down") for line in lines)
