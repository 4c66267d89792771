"""I/O. hypercorn's protocol wrapper for one connection, switching to our HTTP/2 protocol
(`frontends.http.h2_protocol.GuardedH2Protocol`): HTTP/1.1 first, then h2 by ALPN, prior knowledge or
Upgrade (docs/http.md)."""

from __future__ import annotations

from hypercorn.events import Event, RawData
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol

from smg_trio.frontends.http.h2_protocol import GuardedH2Protocol
from smg_trio.frontends.http.h11_seam import SeamH11Protocol


class ProtocolSwitch:
    """hypercorn's ProtocolWrapper, but the HTTP/2 it switches to is `GuardedH2Protocol`:
    HTTP/1.1 first, then h2 by ALPN, prior knowledge (`PRI *`) or `Upgrade: h2c`."""

    def __init__(self, args: tuple[object, ...], *, h2: bool) -> None:
        self._args = args  # what hypercorn's protocols take: app, config, context, ... send
        self.protocol: H11Protocol | GuardedH2Protocol = (
            GuardedH2Protocol(*args) if h2 else SeamH11Protocol(*args)  # type: ignore[arg-type]
        )

    async def initiate(self) -> None:
        await self.protocol.initiate()

    async def handle(self, event: Event) -> None:
        try:
            await self.protocol.handle(event)
        except H2ProtocolAssumedError as prior_knowledge:
            self.protocol = GuardedH2Protocol(*self._args)
            await self.protocol.initiate()
            if prior_knowledge.data:
                await self.protocol.handle(RawData(data=prior_knowledge.data))
        except H2CProtocolRequiredError as upgrade:
            self.protocol = GuardedH2Protocol(*self._args)
            await self.protocol.initiate(upgrade.headers, upgrade.settings)
            if upgrade.data:
                await self.protocol.handle(RawData(data=upgrade.data))
