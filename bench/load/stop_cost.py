"""I/O. Scenario (c): what a router-side stop costs the engine. The counted reference engine
(`bench.load.counted_engine`) replays a known text at a realistic step time behind a gateway; every
request asks for a stop string the engine cannot see (several tokens long, so it stays a
router-side string), which the text reaches after `stop_at` tokens. The engine's own tally,
once every request ended there, gives the tokens it generated after the stop:
`tokens - stop_at` per request; one engine step is one token per request.

A gateway that aborts the engine request when the stop matches wastes at most the step in
flight; one that drains the request to its end wastes up to `max_tokens - stop_at` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import trio

from bench.load.runner import Progress, run_load
from bench.load.scenarios import open_transport
from bench.load.stats import StopCost
from bench.load.targets import Target, reference_engine, smg_target, smg_trio_target
from bench.load.workload import (
    FixedConcurrency,
    LengthRange,
    Workload,
    first_stop_position,
    request_specs,
)
from smg_trio.model.folder import load_model_dir

STOP: Final = "HALT NOW"
REPLAY_TEXT: Final = (
    "Tokens stream from the engine through the router to the client, which asked to stop at "
    "the words " + STOP + " and never sees what follows." + " Filler words follow." * 40
)
STEP_MS: Final = 20.0
MAX_TOKENS: Final = 128
SETTLE_S: Final = MAX_TOKENS * STEP_MS / 1000 + 5.0  # a draining gateway runs to max_tokens


def read_counts(counts_file: Path) -> dict[str, dict[str, Any]]:
    requests: dict[str, dict[str, Any]] = json.loads(counts_file.read_text("utf-8"))["requests"]
    return requests


async def _settled(counts_file: Path, known: set[str], expected: int) -> dict[str, Any]:
    """The tally of the `expected` new engine requests, once each has ended."""
    with trio.fail_after(SETTLE_S):
        while True:
            fresh = {k: v for k, v in read_counts(counts_file).items() if k not in known}
            if len(fresh) >= expected and all(v["end"] is not None for v in fresh.values()):
                return fresh
            await trio.sleep(0.05)


async def measure_stop_cost(
    target: Target,
    counts_file: Path,
    stop_at: int,
    words: Sequence[str],
    *,
    streams: int,
    rounds: int,
) -> StopCost:
    tokens: list[int] = []
    ends: list[str] = []
    stopped = 0
    for round_index in range(rounds):
        workload = Workload(
            FixedConcurrency(streams),
            streams,
            LengthRange(16, 16),
            LengthRange(MAX_TOKENS, MAX_TOKENS),
            time_cap_s=SETTLE_S,
            stops=(STOP,),
            seed=round_index,
        )
        known = set(read_counts(counts_file))
        specs = request_specs(workload, words)
        async with open_transport(target, "h2c", specs, workload, 1) as transport:
            _, records = await run_load(
                transport, specs, workload, target=target.name, scenario="stop cost"
            )
        stopped += sum(r.finish == "stop" and r.error is None for r in records)
        fresh = await _settled(counts_file, known, streams)
        tokens += [entry["tokens"] for entry in fresh.values()]
        ends += [entry["end"] for entry in fresh.values()]
    return StopCost(
        target=target.name,
        streams=streams,
        requests=streams * rounds,
        stopped=stopped,
        stop_at=stop_at,
        max_tokens=MAX_TOKENS,
        step_ms=STEP_MS,
        engine_tokens=tuple(tokens),
        ends=tuple(ends),
    )


async def stop_costs(
    model_path: Path,
    smg_bin: Path | None,
    words: Sequence[str],
    log_dir: Path,
    progress: Progress | None,
    *,
    stream_counts: Sequence[int] = (1, 16),
    rounds_at_one_stream: int = 8,
) -> list[StopCost]:
    """Scenario (c) behind smg-trio and (with `smg_bin`) behind smg."""
    tokenizer = load_model_dir(model_path).tokenizer
    replay_ids = tokenizer.encode(REPLAY_TEXT, add_special_tokens=False)
    if len(tokenizer.encode(STOP, add_special_tokens=False)) < 2:
        raise ValueError(f"{STOP!r} is one token for this model: the engine would stop on it")
    stop_at = first_stop_position(tokenizer, replay_ids, [STOP])
    if stop_at is None or stop_at >= MAX_TOKENS:
        raise ValueError(f"the replayed text does not reach {STOP!r} within {MAX_TOKENS} tokens")
    replay_file = log_dir / "stop-cost-replay.txt"
    replay_file.write_text(REPLAY_TEXT, encoding="utf-8")
    results = []
    gateways = ["smg-trio"] + (["smg"] if smg_bin is not None else [])
    for gateway in gateways:
        counts_file = log_dir / f"stop-cost-counts-{gateway}.json"
        engine = reference_engine(
            model_path, STEP_MS, replay_file=replay_file, counts_file=counts_file
        )
        if gateway == "smg" and smg_bin is not None:
            context = smg_target(smg_bin, model_path, engine, log_dir)
        else:
            context = smg_trio_target(model_path, engine, log_dir)
        async with context as target:
            for streams in stream_counts:
                rounds = rounds_at_one_stream if streams == 1 else 1
                if progress is not None:
                    progress.note(f"stop cost: {gateway}, {streams} stream(s) x {rounds}")
                results.append(
                    await measure_stop_cost(
                        target, counts_file, stop_at, words, streams=streams, rounds=rounds
                    )
                )
    return results
