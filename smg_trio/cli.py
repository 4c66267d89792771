"""I/O. The `smg-trio` command line: one subcommand per component."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from smg_trio.engines.cli import add_engine_commands
from smg_trio.errors import ConfigError
from smg_trio.model import demo_model_path


def _run_demo(args: argparse.Namespace) -> int:
    from smg_trio.demo import main_demo  # imports the backend stack only when needed

    return main_demo(args.model_path)


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run OpenAI requests through the gateway against the embedded reference engine",
    )
    demo.add_argument(
        "--model-path",
        type=Path,
        default=demo_model_path(),
        help="model folder (tokenizer + configs); default: the shipped demo model",
    )
    demo.set_defaults(command=_run_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="smg-trio", description=__doc__)
    subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    add_demo_command(subparsers)
    add_engine_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.command(args)
    except ConfigError as exc:
        print(f"smg-trio: {exc.message}", file=sys.stderr)
        return 2
    return code
