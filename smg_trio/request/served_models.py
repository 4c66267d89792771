"""Pure. The models this gateway serves: its one model folder under every served name
(`--served-model-name`, repeatable; the folder's own name without one). `/v1/models` answers
their vLLM-shaped cards; a request may name any of them, or none (vLLM takes the first then),
and any other name is vLLM's 404 (`ModelNotFound`).
"""

from __future__ import annotations

from pathlib import Path

from smg_trio.observability.request_ids import new_request_id
from smg_trio.request.endpoints import ModelNotFound
from smg_trio.wire.openai_responses import JSON_ENCODER, ModelCard, ModelList, ModelPermission


class ServedModels:
    def __init__(
        self, names: tuple[str, ...], path: Path, context_length: int | None, *, created: int
    ) -> None:
        self.names = names
        self._path = path
        self._context_length = context_length
        self._created = created

    def body(self) -> bytes:
        """/v1/models: one card per served name, all for the one model folder."""
        cards = tuple(
            ModelCard(
                id=name,
                created=self._created,
                root=str(self._path),
                max_model_len=self._context_length,
                permission=(
                    ModelPermission(id=f"modelperm-{new_request_id()}", created=self._created),
                ),
            )
            for name in self.names
        )
        return JSON_ENCODER.encode(ModelList(data=cards))

    def check(self, model: str | None) -> None:
        """A request may name any served model, or none."""
        if model is not None and model not in self.names:
            raise ModelNotFound(model)
