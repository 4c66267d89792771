"""The pure reading of a refused WebSocket frame's type and id (`salvaged_envelope`): what a
malformed frame is answered under (README.md "WebSocket protocol")."""

from __future__ import annotations

import pytest

from smg_trio.frontends.websocket_frames import Envelope, salvaged_envelope


@pytest.mark.parametrize(
    ("text", "envelope"),
    [
        ('{"type":"request","id":"f1","path":"/x","body":{"a":[1,', Envelope("request", "f1")),
        ('{"type":"request","id":12,"body":', Envelope("request", 12)),
        ('{"type":"request","id":12', Envelope("request", None)),  # cut inside the number
        ('{"type":"request","id":"f', Envelope("request", None)),  # cut inside the string
        ('{"b":{"id":3},"type":"id","id":"x\\"y" junk', Envelope("id", 'x"y')),  # top level only
        ('{"type":"cancel","id":"q" junk', Envelope("cancel", "q")),
        ('{"type":5,"id":-4,', Envelope(None, -4)),
        ('{"id":"' + "a" * 300 + '",', Envelope(None, None)),  # longer than an id may be
        ('{"id":true,', Envelope(None, None)),
        ('[{"id":1}', Envelope(None, None)),  # not an object
        ('{"x":1}{"id":2}', Envelope(None, None)),  # the object ended first
        ("junk", Envelope(None, None)),
    ],
)
def test_a_malformed_frame_yields_its_top_level_type_and_id(text: str, envelope: Envelope) -> None:
    assert salvaged_envelope(text) == envelope
