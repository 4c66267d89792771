"""A worker extension for the reference engine's `--worker-extension-cls` (vLLM's flag), the
methods vLLM's own `/collective_rpc` test calls: a plain value, nothing, and its arguments
back (tests/e2e/test_vllm_control_routes.py)."""

from __future__ import annotations

from typing import Any

MODEL_NAME = "served-by-the-reference-engine"


class EchoExtension:
    def get_model_name(self) -> str:
        return MODEL_NAME

    def return_none(self, *args: Any, **kwargs: Any) -> None:
        return None

    def echo_args_kwargs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"args": list(args), "kwargs": kwargs, "total_items": len(args) + len(kwargs)}

    def count_flags(self, flag: str) -> bool:
        """A value JSON would keep but vLLM's answer shows as its Python str()."""
        return flag == "on"
