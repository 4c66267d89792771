"""The committed generated code in smg_trio/wire/_proto matches what protos/ generates.

A fresh install never runs protoc, so a .proto edit without `make protos` would ship stale
messages; this makes `make test` catch it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "smg_trio" / "wire" / "_proto"


def run_check(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_committed_generated_code_is_fresh() -> None:
    done = run_check()
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout


def test_check_names_every_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "_proto"
    shutil.copytree(GENERATED, stale, ignore=shutil.ignore_patterns("__pycache__"))
    edited = stale / "vllm_engine_pb2.pyi"
    edited.write_text(edited.read_text().replace("max_tokens", "max_tokenz", 1))
    (stale / "mlx_engine_grpc.py").unlink()
    (stale / "leftover_pb2.py").write_text("")

    done = run_check("--output", str(stale))

    assert done.returncode == 1
    assert "run `make protos`" in done.stderr
    assert "vllm_engine_pb2.pyi: differs" in done.stderr
    assert "mlx_engine_grpc.py: generated but not committed" in done.stderr
    assert "leftover_pb2.py: committed but no longer generated" in done.stderr
