"""The reference engine's one worker, for vLLM's `collective_rpc` utility call (docs/
vllm-frontend.md §10).

vLLM's EngineCore answers `collective_rpc(method, timeout, args, kwargs)` with the list of what
each of its workers returned for `method(*args, **kwargs)`; `--worker-extension-cls
module.Class` mixes that class into its worker class, so a deployment adds methods the RPC can
call. The reference engine has one worker of its own (no model weights to inspect, so no
methods of its own) with the extension mixed in the same way; a method it lacks fails as
vLLM's does: "Method 'name' is not implemented." (the utility call's failure message then says
"Call to collective_rpc method failed: ..."). `timeout` is accepted for the shape only: the
one worker runs in the engine's own loop, with nothing to wait for.
"""

from __future__ import annotations

import importlib
from typing import Any


class ReferenceWorker:
    """The reference engine's worker: what an extension class is mixed into."""


def load_worker(extension: str | None) -> object:
    """The engine's worker, with `extension` (a dotted `module.Class`) mixed in, as vLLM's
    `--worker-extension-cls` does; ValueError naming it when it cannot be loaded."""
    if extension is None:
        return ReferenceWorker()
    module_name, _, class_name = extension.rpartition(".")
    if not module_name:
        raise ValueError(f"{extension!r}: not a dotted module.Class path")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{extension!r}: {exc}") from exc
    if not isinstance(cls, type):
        raise ValueError(f"{extension!r} is not a class")
    mixed = type("ReferenceWorker", (cls, ReferenceWorker), {})
    return mixed()


def collective_rpc(worker: object, args: tuple[Any, ...]) -> list[Any]:
    """The EngineCore's `collective_rpc(method, timeout, args, kwargs)` over the one worker."""
    if len(args) != 4:
        raise TypeError(f"collective_rpc takes 4 arguments, {len(args)} given")
    method, _timeout, call_args, call_kwargs = args
    if not isinstance(method, str):
        raise TypeError("only a method name can be called (no pickled callables)")
    try:
        function = getattr(worker, method)
    except AttributeError:
        raise NotImplementedError(f"Method {method!r} is not implemented.") from None
    return [function(*(call_args or ()), **(call_kwargs or {}))]
