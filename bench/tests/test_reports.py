"""The figures a bench report prints are the ones its runs measured: the pairing of first-token
times round by round, `vllm bench serve`'s summary and its medians and ratios, and the floor
comparison's split of a token's CPU between the gateway, hypercorn and trio."""

from __future__ import annotations

import pytest

from bench.floors.floor_compare import cpu_table, shares
from bench.load.stats import Percentiles, ProcessUsage, RunSummary
from bench.load.stream_bar import BarRun, parse_median_ttft, round_order
from bench.load.stream_bar import report as bar_report
from bench.load.stream_profile import ASSEMBLER, GC, SOCKET, TRIO, split
from bench.load.stream_profile import report as profile_report
from bench.load.vllm_serve_compare import RunResult, parse_bench_output
from bench.load.vllm_serve_compare import report as serve_report
from bench.ttft.paired import report as paired_report

SUMMARY = """\
============ Serving Benchmark Result ============
Successful requests:                     256
Maximum request concurrency:             64
Benchmark duration (s):                  9.36
Output token throughput (tok/s):         3501.26
"""


def test_each_target_is_paired_with_the_first_round_by_round() -> None:
    lines = paired_report({"a": [1.0, 5.0, 2.0], "b": [2.0, 5.5, 2.2]})
    assert lines[2].startswith("| a | 2.000 |")
    assert lines[2].endswith("| — |")
    assert lines[3].startswith("| b | 2.200 |")
    assert lines[3].endswith("| +0.500 |")  # b - a per round: 1.0, 0.5, 0.2; median 0.5


def test_pairing_is_by_round_not_by_median() -> None:
    # Same medians (3.0), but b is 1 ms slower in every round: the pairing sees it.
    lines = paired_report({"a": [1.0, 3.0, 9.0], "b": [2.0, 4.0, 3.0]})
    assert lines[3].endswith("| +1.000 |")


def test_the_serve_summary_gives_throughput_and_completed_requests() -> None:
    assert parse_bench_output(SUMMARY) == (3501.26, 256)


def test_a_serve_run_without_a_summary_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="no summary"):
        parse_bench_output("Traceback (most recent call last): ...")


def test_the_serve_report_gives_medians_and_ratios_per_gateway() -> None:
    lines = serve_report(
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


def test_a_serve_run_that_completed_nothing_is_counted() -> None:
    lines = serve_report([RunResult("smg-trio", 0.0, 0, 0.0)])
    assert lines[-1] == "runs that completed nothing: 1"


def _summary(target: str, streams: int, cpu_s: float, tokens: int = 10_000) -> RunSummary:
    none = Percentiles(None, None, None)
    return RunSummary(
        target=target,
        scenario="floor",
        load=f"c={streams}",
        streams=streams,
        sent=10,
        completed=10,
        errors=0,
        cancelled=0,
        wall_s=1.0,
        output_tokens=tokens,
        tokens_per_s=float(tokens),
        ttft=none,
        itl=none,
        e2e=none,
        server=ProcessUsage(cpu_s=cpu_s, peak_rss_mb=30.0),
        client_cpu_s=0.1,
    )


def test_a_token_splits_into_gateway_http_library_and_trio_floor() -> None:
    runs = [
        _summary("smg-trio http1", 1, 9.0),
        _summary("smg-trio http1", 64, 1.8),
        _summary("smg-trio h2c", 64, 2.2),
        _summary("hypercorn floor http1", 64, 1.3),
        _summary("hypercorn floor h2c", 64, 1.8),
        _summary("raw trio floor http1", 64, 0.5),
    ]
    assert shares(runs) == [
        "- http1, 64 streams: smg-trio 180 µs = its own work 50 µs + hypercorn 80 µs (vs raw "
        "HTTP/1.1 on trio) + trio, sockets and wake-ups 50 µs",
        "- h2c, 64 streams: smg-trio 220 µs = its own work 40 µs + hypercorn 130 µs (vs raw "
        "HTTP/1.1 on trio) + trio, sockets and wake-ups 50 µs",
    ]
    table = cpu_table(runs)
    assert "| smg-trio h2c | c=64 | 10,000 | 2.20 | 220 | 1.22x |" in table
    assert "| smg-trio http1 | c=1 | 10,000 | 9.00 | 900 | — |" in table  # no floor at c=1


def test_without_the_raw_floor_the_split_stops_at_hypercorn() -> None:
    runs = [_summary("smg-trio h2c", 8, 2.0), _summary("hypercorn floor h2c", 8, 1.5)]
    assert shares(runs) == [
        "- h2c, 8 streams: smg-trio 200 µs = its own work 50 µs + hypercorn and below 150 µs"
    ]


def _bar(gateway: str, tok_s: float, cpu: float, ttft: float) -> BarRun:
    return BarRun(gateway, tok_s, 256, cpu, ttft)


def test_the_bar_gives_each_round_its_ratios_and_the_medians_of_the_rounds() -> None:
    lines = bar_report(
        [
            {"smg-trio": _bar("smg-trio", 3000, 40, 90), "smg": _bar("smg", 3000, 20, 60)},
            {"smg": _bar("smg", 2000, 25, 80), "smg-trio": _bar("smg-trio", 2200, 30, 80)},
            {"smg-trio": _bar("smg-trio", 1000, 50, 100), "smg": _bar("smg", 2000, 25, 50)},
        ]
    )
    assert lines[2] == "| 1 | 3,000 | 40.0 | 90.0 | 3,000 | 20.0 | 60.0 | 1.000 | 2.000 | 1.500 |"
    # Medians per column (2,200 / 40 / 90 against 2,000 / 25 / 60), their ratios beside them.
    assert lines[5] == (
        "| median | 2,200 | 40.0 | 90.0 | 2,000 | 25.0 | 60.0 | 1.100 | 1.600 | 1.500 |"
    )
    # The summary is the median of the rounds' ratios (1.0, 1.1, 0.5 -> 1.0), not of medians.
    assert lines[-1] == (
        "smg-trio / smg, median of the rounds' ratios: output tok/s 1.000x, "
        "gateway CPU per 1k output tokens 2.00x, TTFT p50 1.50x"
    )


def test_the_bar_lists_the_runs_it_discarded_after_the_table() -> None:
    rounds = [{"smg-trio": _bar("smg-trio", 3000, 40, 90), "smg": _bar("smg", 3000, 20, 60)}]
    assert "discarded" not in "\n".join(bar_report(rounds))
    lines = bar_report(rounds, ["round 1: smg 823 tok/s, 117 completed (of 256)"])
    assert lines[-2].startswith("Runs discarded and run again")
    assert lines[-1] == "- round 1: smg 823 tok/s, 117 completed (of 256)"
    assert lines[3].startswith("| median |")  # the table is the kept runs' alone


def test_the_bar_alternates_which_gateway_runs_first() -> None:
    assert [round_order(i, ["a", "b"]) for i in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]


def test_the_bar_reads_the_median_ttft_of_vllm_bench_serve() -> None:
    assert parse_median_ttft(SUMMARY + "Median TTFT (ms):                        81.52\n") == 81.52
    with pytest.raises(ValueError, match="no median TTFT"):
        parse_median_ttft(SUMMARY)


ROOT = "unrolled_run (trio/_core/_run.py:2866)"
RAW = f"""\
thread (1): MainThread;{ROOT};ZmqBackend._read_outputs (smg_trio/backends/zmq_backend.py:279);\
EngineEventStream.flush_inline (smg_trio/backends/event_stream.py:150);\
ResponseAssembler.on_events (smg_trio/core/response_assembler.py:90) 6
thread (1): MainThread;{ROOT};ChunkWriter.hand_over (smg_trio/request/nursery.py:250);\
write_to_kernel_now (smg_trio/frontends/http/hypercorn_seam.py:200);0x7f00 (libc.so.6) 3
thread (1): MainThread;{ROOT};Socket.recv_multipart (zmq/sugar/socket.py:815);\
gc_collect_main (libpython3.11.so.1.0) 2
thread (1): MainThread;{ROOT};_PyEval_EvalFrameDefault (libpython3.11.so.1.0) 1
thread (2): smg-trio-log-writer;Condition.wait (threading.py:331) 4
thread (2): smg-trio-log-writer;Condition.wait (threading.py:331);0x7f01 (libc.so.6) 9
thread (1): MainThread;{ROOT};EpollIOManager.get_events (trio/_core/_io_epoll.py:245);\
0x7f02 (libc.so.6) 7
"""


def test_the_profile_puts_each_sample_in_the_bucket_of_its_deepest_known_frame() -> None:
    profile = split(RAW)
    # Blocked in a wait (a native leaf under epoll or a condition): not CPU, left out.
    assert (profile.main_samples, profile.other_samples, profile.waits) == (12, 4, 16)
    # The assembler's frame is deeper than the ZMQ reader's that ran it inline; a libc leaf
    # under the socket write is the system call; GC wherever it interrupts; trio's loop last.
    assert profile.buckets == {ASSEMBLER: 6, SOCKET: 3, GC: 2, TRIO: 1}
    assert profile.functions.most_common(1) == [
        ("ResponseAssembler.on_events (smg_trio/core/response_assembler.py)", 6)
    ]


def test_the_profile_report_turns_shares_into_microseconds_per_token() -> None:
    lines = profile_report(split(RAW), BarRun("smg-trio", 1000.0, 4, 32.0, 5.0))
    # 32 µs per token, the event-loop thread 12/16 of the samples, the assembler 6/12 of those.
    assert "| response assembler (detokenize, stops, render) | 6 | 50.0 % | 12.0 |" in lines
