"""`python -m bench http_limits --quick` still runs every check against `smg-trio serve` and the
counted reference engine (the full-size run is bench/RESULTS.md "HTTP limits"), and its table
shows the behaviour docs/http.md promises."""

from __future__ import annotations

import ast
import re
from typing import Final

import pytest

from tests.bench.bench_command import command_output, table_rows

TIMEOUT_S: Final = 90.0


def figures(text: str, check: str) -> dict[str, str]:
    [row] = table_rows(text, check)
    return dict(part.split(": ", 1) for part in row[1].split("; "))


@pytest.mark.serial
async def test_the_http_limit_checks_run_and_show_the_behaviour() -> None:
    text = await command_output(
        "http_limits", "--quick", "--no-write", "--rapid-reset-s", "0.3", timeout_s=TIMEOUT_S
    )
    closing = figures(text, "HTTP/1.1 Connection: close")
    assert closing["failures"] == "0"
    close_max = re.search(r"max ([\d.]+) ms", closing["close after response end"])
    assert close_max is not None
    assert float(close_max.group(1)) < 100
    idle = figures(text, "HTTP/1.1 keep-alive")
    assert idle["closed by the keep-alive timer"] == idle["connections"]
    dribbling = figures(text, "500 body dribblers")
    assert ast.literal_eval(dribbling["answers"]) == {"408": int(dribbling["dribblers"])}
    assert dribbling["still open at the deadline"] == "0"
    at_cap = figures(text, "control requests at the connection cap")
    assert ast.literal_eval(at_cap["answers"]) == {"503": int(at_cap["control requests"])}
    storm = figures(text, "2,000 WebSocket opens")
    assert ast.literal_eval(storm["outcomes"]) == {"served": int(storm["WebSocket opens"])}
    streams = figures(text, "h2c: 1,000 concurrent")
    assert (streams["ok"], streams["errors"]) == (streams["streams"], "{}")
    many = figures(text, "h2c: 5,000 chats")
    assert (many["ok"], many["errors"]) == (many["requests"], "{}")
    resets = figures(text, "h2c rapid reset")
    assert set(ast.literal_eval(resets["how connections ended"])) == {"GOAWAY ENHANCE_YOUR_CALM"}
    assert "<!-- bench: http_limits -->\n## HTTP limits\n" in text
