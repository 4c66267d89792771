"""I/O. Generate smg_trio/wire/_proto from protos/*.proto, or check that the committed copy is fresh.

    python scripts/gen_protos.py            # regenerate in place (`make protos`)
    python scripts/gen_protos.py --check    # exit 1 naming every stale file (`make protos-check`)
    python scripts/gen_protos.py --check --output DIR   # check another copy (used by the tests)

Runs grpcio-tools' protoc with three outputs: protobuf messages (`*_pb2.py`), mypy-protobuf
stubs (`*_pb2.pyi`) and grpclib stubs (`*_grpc.py`). The plugins `protoc-gen-grpclib_python` and
`protoc-gen-mypy` live next to the running interpreter, so that directory is put on PATH.

The .proto files keep the engines' file names (`common.proto`, `vllm_engine.proto`, ...) so that
our file descriptors match theirs, imports included. protoc then writes top-level imports
(`import common_pb2`), which cannot work inside a package: they are rewritten to relative ones.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
OUTPUT_DIR = ROOT / "smg_trio" / "wire" / "_proto"

INIT_TEXT = '''"""Generated from protos/ by `make protos` (scripts/gen_protos.py); never edit by hand.

`*_pb2` modules hold the protobuf messages (typed by their `.pyi` stubs), `*_grpc` modules the
grpclib client stubs and server bases. `make protos-check` fails when these files are stale.
"""
'''


def generate(into: Path) -> None:
    """Write the generated package (with its __init__.py) into the empty directory `into`."""
    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}")
    well_known = resources.files("grpc_tools") / "_proto"
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--proto_path={well_known}",
        f"--python_out={into}",
        f"--mypy_out={into}",
        f"--grpclib_python_out={into}",
        *(proto.name for proto in protos),
    ]
    # Run from protos/ so that every source path is relative and stable in the output.
    done = subprocess.run(command, cwd=PROTO_DIR, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"protoc failed ({done.returncode}):\n{done.stderr}")
    siblings = "|".join(re.escape(proto.stem + "_pb2") for proto in protos)
    top_level_import = re.compile(rf"^import ({siblings})\b", re.MULTILINE)
    for path in sorted(into.iterdir()):
        text = path.read_text()
        if path.name.endswith("_grpc.py") and "grpclib.const" not in text:
            path.unlink()  # a file without a service: grpclib writes only a header
            continue
        path.write_text(top_level_import.sub(r"from . import \1", text))
    (into / "__init__.py").write_text(INIT_TEXT)


def stale_files(committed: Path, fresh: Path) -> list[str]:
    """Names of files that differ, are missing or are extra in `committed`, with a diff each."""
    problems: list[str] = []
    names = {p.name for p in fresh.iterdir()} | {
        p.name for p in committed.glob("*") if p.is_file() and p.suffix in {".py", ".pyi"}
    }
    for name in sorted(names):
        old, new = committed / name, fresh / name
        if not new.exists():
            problems.append(f"{name}: committed but no longer generated")
        elif not old.exists():
            problems.append(f"{name}: generated but not committed")
        elif old.read_text() != new.read_text():
            diff = difflib.unified_diff(
                old.read_text().splitlines(),
                new.read_text().splitlines(),
                f"committed/{name}",
                f"fresh/{name}",
                lineterm="",
                n=1,
            )
            problems.append(f"{name}: differs\n" + "\n".join(list(diff)[:20]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR, help="the generated package")
    args = parser.parse_args(argv)
    output: Path = args.output.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch)
        generate(fresh)
        if args.check:
            problems = stale_files(output, fresh)
            if problems:
                print(f"{output} is stale; run `make protos` and commit:", file=sys.stderr)
                for problem in problems:
                    print(f"  {problem}", file=sys.stderr)
                return 1
            print(f"{output} is up to date with protos/")
            return 0
        if output.exists():
            shutil.rmtree(output)
        shutil.copytree(fresh, output)
        print(f"generated {output} from protos/")
        return 0


if __name__ == "__main__":
    sys.exit(main())
