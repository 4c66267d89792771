"""I/O. Where a load run's full results go: `bench/results/` (gitignored) gets the JSON, the
Markdown and one PNG per scenario (output tokens/s, TTFT and ITL percentiles vs stream count,
one line per target). Its sections of bench/RESULTS.md: bench/reports/results_page.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bench.load.report import RunReport, to_json
from bench.load.stats import RunSummary

BENCH_DIR: Final = Path(__file__).resolve().parent.parent
RESULTS_DIR: Final = BENCH_DIR / "results"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def plot_scenario(runs: Sequence[RunSummary], scenario: str, path: Path) -> None:
    """Three panels against stream count: output tokens/s; TTFT p50 (solid) and p99 (dashed);
    ITL p50 and p99. One colour per target."""
    # Imported here: matplotlib costs ~0.5 s of CPU to import, paid by every pytest worker's
    # collection of the bench smoke tests, which never plot (docs/architecture.md §8.1).
    import matplotlib

    matplotlib.use("Agg")  # files only; no display
    import matplotlib.pyplot as plt

    figure, (rate, ttft, itl) = plt.subplots(1, 3, figsize=(16, 4.8))
    targets = dict.fromkeys(r.target for r in runs if r.scenario == scenario)
    for index, target in enumerate(targets):
        rows = sorted(
            (r for r in runs if r.scenario == scenario and r.target == target and r.streams),
            key=lambda r: r.streams or 0,
        )
        streams = [r.streams for r in rows]
        colour = f"C{index}"
        rate.plot(streams, [r.tokens_per_s for r in rows], "o-", color=colour, label=target)
        for axis, attribute in ((ttft, "ttft"), (itl, "itl")):
            p50 = [getattr(r, attribute).p50_ms for r in rows]
            p99 = [getattr(r, attribute).p99_ms for r in rows]
            axis.plot(streams, p50, "o-", color=colour, label=f"{target} p50")
            axis.plot(streams, p99, "x--", color=colour, label=f"{target} p99")
    for axis, title, unit in (
        (rate, "output tokens/s", "tokens/s"),
        (ttft, "time to first token", "ms"),
        (itl, "inter-token latency", "ms"),
    ):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent streams")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    ttft.set_yscale("log")
    itl.set_yscale("symlog", linthresh=1.0)  # 0 ms gaps happen: chunks read in one burst
    itl.set_ylim(bottom=0)
    rate.legend(fontsize="small")
    itl.legend(fontsize="x-small", ncol=2)
    figure.suptitle(scenario)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def write_results(report: RunReport, markdown: str, out_dir: Path = RESULTS_DIR) -> list[Path]:
    """JSON, Markdown and plots under `out_dir`, each also as `load-latest.*`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = report.started.replace(":", "").replace("-", "")[:15]
    written = []
    data = json.dumps(to_json(report), indent=1)
    for name in (f"load-{stamp}", "load-latest"):
        (out_dir / f"{name}.json").write_text(data, encoding="utf-8")
        (out_dir / f"{name}.md").write_text(markdown, encoding="utf-8")
        written += [out_dir / f"{name}.json", out_dir / f"{name}.md"]
    for scenario in dict.fromkeys(r.scenario for r in report.runs):
        path = out_dir / f"load-{slug(scenario)}.png"
        plot_scenario(report.runs, scenario, path)
        written.append(path)
    return written
