"""Pure. The model a worker was declared for (docs/fleet.md §4), checked against what its
engine says of its own model: an engine that shows another model is refused (never routed to,
one error log line naming both), not trusted to serve the wrong model's requests. Only a
gateway serving several models checks (serving/worker_lifetimes.py): with one, the engines
are trusted as they always were, a folder and an engine naming one model differently (a local
copy of a hub model) being common.

What an engine says differs by wire:
- gRPC (GetModelInfo): its served model name or model id, and its context length. The name
  matches when it, or its last path component, is one of the model's served names, its
  folder's path or its folder's name (`meta-llama/Llama-3.1-8B` matches a folder named
  `Llama-3.1-8B`; case aside); an engine reporting no name is not judged on it.
- ZMQ (vLLM's registration, TokenSpeed's): no model name at all, only `max_model_len` (after
  KV-cache fitting). An engine whose context is longer than the folder's own context length
  (before any `max_model_len` of ours) loaded another model: vLLM never exceeds the length a
  model derives without an override (`VLLM_ALLOW_LONG_MAX_MODEL_LEN`). Two models with the
  same context length cannot be told apart on this wire.
"""

from __future__ import annotations

import msgspec


class DeclaredModel(msgspec.Struct, frozen=True, kw_only=True):
    key: str  # the model's first served name
    names: tuple[str, ...]
    path: str  # its folder
    context_length: int | None  # the folder's own (config.json), None: unknown

    def refusal(self, *, max_model_len: int | None, name: str = "") -> str | None:
        """Why an engine reporting `max_model_len` and `name` serves another model, or None."""
        if name and not self._names_it(name):
            return (
                f"the engine serves model {name!r}, but its worker was declared for model "
                f"{self.key!r} ({self.path})"
            )
        limit = self.context_length
        if max_model_len is not None and limit is not None and max_model_len > limit:
            return (
                f"the engine's context length is {max_model_len}, more than model {self.key!r} "
                f"allows ({limit}, {self.path}): it loaded another model"
            )
        return None

    def _names_it(self, name: str) -> bool:
        stem = name.rstrip("/").rsplit("/", 1)[-1]
        folder = self.path.rstrip("/").rsplit("/", 1)[-1]
        known = {known.casefold() for known in (*self.names, self.path, folder)}
        return name.casefold() in known or stem.casefold() in known
