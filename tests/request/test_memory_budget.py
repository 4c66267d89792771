"""memory_budget: reservations add up, a request past the limit is a 429 with a retry hint, and
one request alone is always admitted (docs/limits.md §4)."""

from __future__ import annotations

import pytest

from smg_trio.request.memory_budget import (
    BYTES_PER_PROMPT_TOKEN,
    MemoryBudget,
    MemoryBudgetExceeded,
    default_budget_bytes,
    memory_budget,
    prompt_bytes,
)


def test_reservations_add_up_and_are_given_back() -> None:
    budget = MemoryBudget(1000)
    with budget.reserve(300) as first:
        first.grow(100)
        with budget.reserve(500) as second:
            assert budget.in_flight_bytes == 900
            with pytest.raises(MemoryBudgetExceeded) as info:
                second.grow(101)
            assert info.value.status == 429
            assert info.value.code == "memory_budget_exceeded"
            assert info.value.retry_after_s == 1
            assert budget.in_flight_bytes == 900  # a refused growth takes nothing
        assert budget.in_flight_bytes == 400
    assert budget.in_flight_bytes == 0


def test_a_request_alone_is_admitted_even_past_the_limit() -> None:
    budget = MemoryBudget(10)
    with budget.reserve(50) as alone:
        alone.grow(50)
        with pytest.raises(MemoryBudgetExceeded):
            budget.reserve(1)
    assert budget.in_flight_bytes == 0


def test_the_default_is_a_fraction_of_the_machine_and_the_flag_is_in_mib() -> None:
    assert default_budget_bytes() > 64 * 1024 * 1024
    assert memory_budget(3).limit_bytes == 3 * 1024 * 1024
    assert memory_budget(None).limit_bytes == default_budget_bytes()
    assert prompt_bytes([[1, 2], [3]]) == 3 * BYTES_PER_PROMPT_TOKEN
