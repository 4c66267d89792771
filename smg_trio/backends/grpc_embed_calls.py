"""I/O. The gRPC backend's Embed calls (vLLM and SGLang, docs/wire.md §C.8): one unary call
per input, run on the process's asyncio bridge and awaited by the task that needs its vector.

- Before anything is sent: the request must be one Embed can carry (vLLM or SGLang, task
  embed, no `dimensions`, activation on: the model's defaults, docs/wire.md §C.8; else a 400
  naming the field), the engine must be ready (else `BackendUnavailable`) and the input
  must fit the engine (`ClientError`: empty, longer than its context, an id outside its
  vocabulary, as far as the engine told us its context and vocabulary). A pooled input may
  fill the whole context: nothing is generated after it.
- A caller cancelled while its call runs (its client left, its deadline passed, a sibling
  input failed) cancels the call, which grpclib answers with RST_STREAM, and then sends the
  Abort RPC naming it, shielded and bounded by `ABORT_GRACE_S`, unless the engine is dead.
- The silence watchdog watches Generate streams only: an engine that hangs with Embed calls in
  flight is taken out by its health checks, and the calls end at their callers' deadlines.
- A failed call is judged as a failed Generate call is: a lost connection is engine death,
  an unreachable or UNAVAILABLE engine is out until a health check passes, an answer we cannot
  read counts as a protocol error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from smg_trio.backends.asyncio_bridge import AsyncioBridge
from smg_trio.backends.grpc_readiness import EngineReadiness
from smg_trio.backends.grpc_services import EngineInfo, LoopClient
from smg_trio.backends.in_flight import ABORT_GRACE_S
from smg_trio.errors import BackendError, BackendUnavailable, ClientError
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.neutral.validation import checked_ids
from smg_trio.wire.grpc_embed import GrpcEmbedding, build_embed, embed_options_refusal

logger = logging.getLogger(__name__)


class EmbedCalls:
    """The Embed calls of one engine's gRPC backend."""

    def __init__(
        self,
        client: LoopClient,
        bridge: AsyncioBridge,
        readiness: EngineReadiness,
        on_failure: Callable[[BackendError], None],
    ) -> None:
        self._client = client
        self._bridge = bridge
        self._readiness = readiness
        self._on_failure = on_failure
        self.in_flight = 0
        """Embed calls sent and not yet answered, failed or cancelled."""

    async def pool(
        self, engine_request_id: str, request: PoolingRequest, info: EngineInfo | None
    ) -> PooledOutput:
        """One input's vector (module docstring for what raises and when)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        embed_options_refusal(self._client.service.runtime, request)
        answer = await self.embed(engine_request_id, request.prompt_ids, info)
        values = answer.values
        return PooledOutput(values=values, shape=(len(values),), prompt_tokens=answer.prompt_tokens)

    async def embed(
        self, engine_request_id: str, prompt_ids: Sequence[int], info: EngineInfo | None
    ) -> GrpcEmbedding:
        """The engine's vector for one input's ids (module docstring)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._readiness.ready:
            raise BackendUnavailable(
                f"the {self._client.service.runtime.value} engine at {self._client.address} is "
                f"not ready: {self._readiness.reason or 'no health check has passed yet'}"
            )
        message = build_embed(
            self._client.service.runtime, engine_request_id, pooled_input(prompt_ids, info)
        )
        self.in_flight += 1
        try:
            return await self._bridge.run(self._client.embed, message)
        except trio.Cancelled:
            await self._abort(engine_request_id)
            raise
        except trio.ClosedResourceError:
            raise BackendUnavailable("the gRPC backend shut down during the Embed call") from None
        except BackendError as exc:
            self._on_failure(exc)
            raise
        finally:
            self.in_flight -= 1

    async def _abort(self, engine_request_id: str) -> None:
        """The Abort RPC for a call we cancelled (its RST_STREAM is already out)."""
        if self._readiness.dead:
            return
        with trio.move_on_after(ABORT_GRACE_S, shield=True):
            try:
                await self._bridge.run(self._client.abort, [engine_request_id])
            except (BackendError, trio.ClosedResourceError) as exc:
                logger.warning("Abort of Embed %s failed: %s", engine_request_id, exc)


def pooled_input(prompt_ids: Sequence[int], info: EngineInfo | None) -> tuple[int, ...]:
    """An input the engine can pool: not empty, within its context and vocabulary when known."""
    vocab = None if info is None else info.vocab_size
    ids = checked_ids(prompt_ids, "input", vocab)
    if not ids:
        raise ClientError("an input must contain at least one token", param="input")
    limit = None if info is None else info.max_model_len
    if limit is not None and len(ids) > limit:
        message = f"the input has {len(ids)} tokens, more than the engine's context of {limit}"
        raise ClientError(message, param="input")
    return ids
