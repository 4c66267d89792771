"""I/O. `python -m smg_trio` is the `smg-trio` command."""

import sys

from smg_trio.cli import main

sys.exit(main())
