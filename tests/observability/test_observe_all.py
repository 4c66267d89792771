"""`observe_all` leaves a histogram exactly as one `observe` per value would (buckets and count;
the sum to float rounding), so the bulk path can stand in for prometheus-client's own."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from smg_trio.observability.metrics import INTER_TOKEN_BUCKETS, observe_all


def samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in histogram.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


@given(
    st.lists(
        st.one_of(
            st.floats(0.0, 20.0, allow_nan=False),
            st.sampled_from(INTER_TOKEN_BUCKETS),  # exactly on a bound: `le` is inclusive
        ),
        max_size=60,
    )
)
def test_observe_all_equals_one_observe_per_value(values: list[float]) -> None:
    registry = CollectorRegistry()
    one_by_one = Histogram("a", "a", ("w",), buckets=INTER_TOKEN_BUCKETS, registry=registry)
    in_bulk = Histogram("b", "b", ("w",), buckets=INTER_TOKEN_BUCKETS, registry=registry)
    child = one_by_one.labels("x")
    for value in values:
        child.observe(value)
    observe_all(in_bulk.labels("x"), values)
    expected = {
        (name.replace("a_", "b_", 1), le): v for (name, le), v in samples(one_by_one).items()
    }
    got = samples(in_bulk)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if key[0] == "b_sum":
            assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9)
        else:
            assert got[key] == value, key
