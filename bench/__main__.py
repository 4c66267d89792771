"""I/O. `python -m bench NAME [args]`: run one command of the registry (bench/commands.py);
`python -m bench` alone, or with --help, lists them."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.commands import BY_NAME, command_list


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(command_list())
        return 0
    command = BY_NAME.get(argv[0])
    if command is None:
        print(f"python -m bench: no command {argv[0]!r}\n\n{command_list()}", file=sys.stderr)
        return 2
    return command.load()(argv[1:])


sys.exit(main(sys.argv[1:]))
