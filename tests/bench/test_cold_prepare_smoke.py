"""`python -m bench.cold_prepare` runs at a tiny size and times both works both ways."""

from __future__ import annotations

import pytest

from bench import cold_prepare


def test_both_works_are_timed_hot_and_after_a_gap() -> None:
    rows = cold_prepare.rows(calls=3, gap_ms=1.0)
    assert [name for name, _, _ in rows] == ["prepare_for_path", "tokenizer encode"]
    assert all(hot > 0 and cold > 0 for _, hot, cold in rows)


def test_out_of_bounds_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        cold_prepare.main(["--calls", "0"])
