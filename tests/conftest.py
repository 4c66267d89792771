"""What every test shares (docs/architecture.md §8.1).

The `serial` marker: `make unit` runs the tests not marked `serial` on several pytest-xdist
workers, then the `serial` ones alone, and it finds those by looking for `mark.serial` in the
test files. A serial test marked from anywhere else (a helper module, a conftest) would never
run there, so it is a collection error.

Hypothesis profiles: `ci` (hypothesis's own, loaded when CI is set: derandomized, no deadline,
no example database) and `dev` otherwise: hypothesis's defaults without the 200 ms deadline per
example, which measures how loaded the machine is (several workers, other users), not the
property. HYPOTHESIS_PROFILE picks one by name."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

SERIAL_SPELLING = "mark.serial"


@functools.cache
def _spells_serial(path: Path) -> bool:
    return SERIAL_SPELLING in path.read_text(encoding="utf-8")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("serial") is not None and not _spells_serial(item.path):
            raise pytest.UsageError(
                f"{item.nodeid} is marked serial from outside its file: write "
                f"`pytest.{SERIAL_SPELLING}` in {item.path.name} (docs/architecture.md §8.1)"
            )
