"""I/O. The `smg-trio` command line: one subcommand per component."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from smg_trio.engines.cli import add_engine_commands
from smg_trio.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="smg-trio", description=__doc__)
    subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
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
