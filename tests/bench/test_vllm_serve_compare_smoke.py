"""`python -m bench vllm_serve_compare` needs a real vLLM and smg (it runs outside `make test`):
here its parsing of `vllm bench serve`'s summary, its report and its argument bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import vllm_serve_compare
from bench.vllm_serve_compare import RunResult, parse_bench_output, report

SUMMARY = """\
============ Serving Benchmark Result ============
Successful requests:                     256
Maximum request concurrency:             64
Benchmark duration (s):                  9.36
Total input tokens:                      32768
Total generated tokens:                  32768
Request throughput (req/s):              27.35
Output token throughput (tok/s):         3501.26
Total Token throughput (tok/s):          7002.52
"""


def test_the_summary_gives_throughput_and_completed_requests() -> None:
    assert parse_bench_output(SUMMARY) == (3501.26, 256)


def test_a_run_without_a_summary_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="no summary"):
        parse_bench_output("Traceback (most recent call last): ...")


def test_the_report_gives_medians_and_ratios_per_gateway() -> None:
    lines = report(
        [
            RunResult("smg-trio", 3000.0, 256, 50.0),
            RunResult("smg", 4000.0, 256, 30.0),
            RunResult("smg", 2000.0, 256, 40.0),
            RunResult("smg-trio", 4000.0, 256, 60.0),
        ]
    )
    assert lines[2] == "| smg-trio | 3,000 / 4,000 | 3,500 | 50.0 / 60.0 | 55.0 |"
    assert lines[3] == "| smg | 4,000 / 2,000 | 3,000 | 30.0 / 40.0 | 35.0 |"
    assert lines[-1] == "smg-trio / smg: output tok/s 1.167x, CPU per 1k output tokens 1.57x"


@pytest.mark.parametrize(
    "extra", [["--rounds", "0"], ["--rounds", "11"], ["--num-prompts", "0"], []]
)
def test_out_of_bounds_arguments_and_a_missing_vllm_are_refused(
    extra: list[str], tmp_path: Path
) -> None:
    argv = ["--vllm-venv", str(tmp_path), "--real-model", str(tmp_path), "--smg-bin", "smg"]
    with pytest.raises(SystemExit):
        vllm_serve_compare.main(argv + extra)
