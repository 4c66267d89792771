"""Pure. The models this gateway serves (docs/fleet.md §4): one `ServedModel` per model folder,
each under its served names (`--served-model-name`, `[[models]]`, `--model NAME=DIR`).
`/v1/models` answers a vLLM-shaped card per name, each with its own model's folder and
`max_model_len`; a request may name any of them, or none (vLLM takes the first model then), and
any other name is vLLM's 404 (`ModelNotFound`).

`for_body` picks a request's model once, before it is prepared: with one model, that model
(preparation checks the name, as it always did, at no extra cost); with several, the body's
`model` is read first (a JSON decode that skips every other value; a body whose `model` cannot
be read goes to the first model, whose preparation reports the body's error). A tenant limited
to some models (`models` in `--api-keys`) gets OpenAI's 404 for any other, and a `/v1/models`
of its own models.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from smg_trio.observability.request_ids import new_request_id
from smg_trio.request.endpoints import ModelNotFound
from smg_trio.request.served_model import ServedModel
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.wire.openai_responses import JSON_ENCODER, ModelCard, ModelList, ModelPermission


class _Named(msgspec.Struct):
    model: str | None = None


_NAMED_DECODER = msgspec.json.Decoder(_Named)


class ServedModels:
    def __init__(self, models: Sequence[ServedModel], *, created: int) -> None:
        if not models:
            raise ValueError("a gateway serves at least one model")
        self.models = tuple(models)
        self._by_name = {name: model for model in self.models for name in model.names}
        if len(self._by_name) != sum(len(model.names) for model in self.models):
            raise ValueError("a served name is given to two models")
        self._created = created

    @property
    def first(self) -> ServedModel:
        return self.models[0]

    def body(self, tenant: Tenant | None = None) -> bytes:
        """/v1/models: one card per served name, each with its own model's folder and limit;
        only the models `tenant` may use (docs/fleet.md §4)."""
        cards = tuple(
            ModelCard(
                id=name,
                created=self._created,
                root=str(model.folder.path),
                max_model_len=model.prompt_model.context_length,
                permission=(
                    ModelPermission(id=f"modelperm-{new_request_id()}", created=self._created),
                ),
            )
            for model in self.models
            if tenant is None or tenant.may_use(model.names)
            for name in model.names
        )
        return JSON_ENCODER.encode(ModelList(data=cards))

    def pick(self, model: str | None) -> ServedModel:
        """The model a request names (None: the first); the 404 for any other name."""
        if model is None:
            return self.first
        found = self._by_name.get(model)
        if found is None:
            raise ModelNotFound(model)
        return found

    def for_body(self, body: bytes, tenant: Tenant | None = None) -> ServedModel:
        """The model a request body names (see the module doc), if `tenant` may use it: else
        OpenAI's 404 for a model the key cannot use."""
        restricted = tenant is not None and tenant.models is not None
        if len(self.models) == 1 and not restricted:
            return self.first
        named = _named(body)
        served = self.first if named is None else self.pick(named)
        if tenant is not None and not tenant.may_use(served.names):
            raise ModelNotFound(named or served.key, no_access=True)
        return served


def _named(body: bytes) -> str | None:
    """The body's `model`; None when it names none or cannot be read (its preparation says
    what is wrong with it)."""
    try:
        return _NAMED_DECODER.decode(body).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
