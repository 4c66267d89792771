"""The one seam to hypercorn, h2 and h11 (frontends/http/hypercorn_seam.py): every internal it relies
on is still there with the signature it calls (a version bump fails here, not in production);
a moved one is named; nothing outside the seam touches those libraries' internals; every
library the package imports is declared; the HTTP and WebSocket tests run on our server."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path
from typing import Final

import h2.config
import h2.connection
import h11
import pytest
from hypercorn.protocol.h2 import StreamBuffer
from hypercorn.trio.worker_context import EventWrapper

from smg_trio.frontends.http import h11_seam, hypercorn_seam
from smg_trio.frontends.http.hypercorn_seam import (
    INTERNALS,
    Internal,
    RefusingH2Connection,
    missing_internals,
)

ROOT: Final = Path(__file__).resolve().parents[3]
PACKAGE: Final = ROOT / "smg_trio"
SEAM: Final = (
    PACKAGE / "frontends" / "http" / "hypercorn_seam.py",
    PACKAGE / "frontends" / "http" / "h11_seam.py",  # its HTTP/1.1 half
)
LIBRARIES: Final = ("hypercorn", "h2", "h11", "wsproto", "priority", "hpack", "hyperframe")
INSTANCE_INTERNALS: Final = ("_closed_streams", "_complete", "_cstate", "_request_method")
"""Underscored instance attributes the seam reads (checked on live objects below)."""


def test_every_internal_the_seam_relies_on_is_there() -> None:
    assert missing_internals() == []
    # Instance attributes, on live objects of the installed versions.
    connection = RefusingH2Connection(config=h2.config.H2Configuration(client_side=False))
    assert isinstance(connection._closed_streams, dict)
    assert isinstance(connection.highest_inbound_stream_id, int)
    buffer = StreamBuffer(EventWrapper)
    assert buffer._complete is False
    assert isinstance(buffer.buffer, bytearray)
    served = h11.Connection(h11.SERVER)
    served.receive_data(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    served.next_event()
    assert served._cstate.keep_alive is True
    assert served._request_method == b"GET"


def test_a_changed_signature_or_a_removed_internal_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hypercorn.protocol.h2 import H2Protocol

    monkeypatch.delattr(H2Protocol, "_flush")
    monkeypatch.setattr(h2.connection, "_decode_headers", lambda block: block)
    problems = missing_internals()
    assert "hypercorn.protocol.h2.H2Protocol._flush is gone" in problems
    assert any(p.startswith("h2.connection._decode_headers takes ('block',)") for p in problems)
    assert len(problems) == 2


def test_an_internal_that_is_not_a_function_any_more_is_named() -> None:
    problem = Internal("h2.connection", "H2Connection.DEFAULT_MAX_INBOUND_FRAME_SIZE", ("x",))
    assert problem.problem() is not None


def _internal_names() -> set[str]:
    names = {internal.path.rsplit(".", 1)[-1] for internal in INTERNALS}
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_nothing_outside_the_seam_touches_the_libraries_internals() -> None:
    libraries = "|".join(LIBRARIES)
    anywhere = [
        re.compile(r"super\(\)\._[a-z]"),
        re.compile(rf"\b(?:{libraries})(?:\.\w+)*\._[a-z]\w*"),
        re.compile(r"__self__"),
        re.compile(r"\bos\.write\("),
    ]
    # The internals' own names, where one of the libraries is imported (elsewhere a `_flush`
    # is our own).
    names = "|".join(sorted(_internal_names() | set(INSTANCE_INTERNALS)))
    importing = re.compile(rf"^(?:import|from) (?:{libraries})\b", re.MULTILINE)
    by_name = re.compile(rf"(?:\.|def )(?:{names})\b")
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in SEAM or "_proto" in path.parts:
            continue
        text = path.read_text()
        patterns = [*anywhere, by_name] if importing.search(text) else anywhere
        found.extend(
            f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for number, line in enumerate(text.splitlines(), 1)
            if any(pattern.search(line) for pattern in patterns)
        )
    assert found == []


def _imported_top_levels() -> set[str]:
    modules: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"smg_trio"}


def _declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    return {
        re.split(r"[<>=!\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements
    }


def test_every_library_the_package_imports_is_declared() -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = {name.replace("_", "-") for name in _declared_distributions()}
    undeclared = {
        module: distributions.get(module, [module])
        for module in _imported_top_levels()
        if not any(d.lower().replace("_", "-") in declared for d in distributions.get(module, []))
    }
    assert undeclared == {}


def test_the_http_and_websocket_tests_run_on_our_server() -> None:
    # hypercorn's own `serve` (its TCPServer and task group) is not the production server:
    # every test that serves HTTP goes through frontends/http/server.serve_http.
    stock = re.compile(r"hypercorn\.trio import serve\b|hypercorn\.trio\.serve\b")
    tests = ROOT / "tests"
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted(tests.rglob("*.py"))
        if path != Path(__file__).resolve() and stock.search(path.read_text())
    ]
    assert offenders == []


def test_the_seam_module_is_where_it_says() -> None:
    assert hypercorn_seam.__file__ is not None
    assert h11_seam.__file__ is not None
    assert (Path(hypercorn_seam.__file__).resolve(), Path(h11_seam.__file__).resolve()) == SEAM
