"""The models one gateway serves (docs/fleet.md §4): a `ModelSpec` per model folder, and how
the TOML file's `[[models]]` tables and `--model NAME=PATH` become them.

The gateway's own model fields (`model_path`, `served_model_names`, `tool_call_parser`,
`reasoning_parser`, `chat_template`, `max_model_len`) are the first model, as they always
were; `GatewayConfig.models` holds the further ones. With no top-level `model_path`, the
first `[[models]]` table (or `--model`) is the first model. Workers name their model with
`?model=NAME` (any of its served names); a worker naming none serves the first model; the
workers listed in a `[[models]]` table are that model's.

A model is keyed by its first served name (the folder's name when it has none); served names
are unique across models, and every model needs a worker at startup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from smg_trio.core.parsers.registry import check_parser_names
from smg_trio.errors import ConfigError
from smg_trio.neutral.pooling import Task, model_tasks
from smg_trio.routing.policies import POLICY_NAMES


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One served model: its folder and what is particular to it."""

    model_path: Path
    # The names clients may put in `model`; the first is its key. Empty: the folder's name.
    served_model_names: tuple[str, ...] = ()
    policy: str | None = None  # None: the gateway's `policy`
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    chat_template: Path | None = None  # a Jinja file in place of the folder's template
    chat_template_text: str | None = None  # or the template itself
    max_model_len: int | None = None  # at most the folder's context length
    # What it serves, as vLLM's `--runner` and `--convert` (docs/pooling.md §4).
    runner: str = "generate"
    convert: str | None = None

    @property
    def tasks(self) -> frozenset[Task]:
        return model_tasks(self.runner, self.convert)

    @property
    def names(self) -> tuple[str, ...]:
        return served_names(self.model_path, self.served_model_names)


def served_names(model_path: Path, names: tuple[str, ...]) -> tuple[str, ...]:
    """The served names, else the folder's own name (as `load_model_dir` names it)."""
    return names or (model_path.resolve().name,)


# The keys of a [[models]] table that the first model takes as the gateway's own fields.
FIRST_MODEL_KEYS: Final = (
    "model_path",
    "served_model_names",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "chat_template_text",
    "max_model_len",
    "runner",
    "convert",
)
TABLE_KEYS: Final = frozenset({*ModelSpec.__struct_fields__, "workers"})


def unfold_model_tables(
    data: Mapping[str, Any], source: str, base: Path
) -> tuple[dict[str, Any], list[tuple[str | None, list[str]]]]:
    """`data` with its `[[models]]` tables as GatewayConfig fields, and each table's workers
    with the model they serve (None: the first model)."""
    tables = data.get("models", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise ConfigError(f"{source}: `models` must be a list of tables ([[models]])")
    fields = {key: value for key, value in data.items() if key != "models"}
    further: list[dict[str, Any]] = []
    workers: list[tuple[str | None, list[str]]] = []
    for number, raw in enumerate(tables, start=1):
        table = dict(raw)
        where = f"{source}: [[models]] #{number}"
        unknown = sorted(set(table) - TABLE_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; known: {sorted(TABLE_KEYS)}")
        if not isinstance(table.get("model_path"), str | Path):
            raise ConfigError(f"{where}: model_path (the model folder) is required")
        for key in ("model_path", "chat_template"):
            if isinstance(table.get(key), str):
                table[key] = base / table[key]
        listed = table.pop("workers", [])
        if not isinstance(listed, list) or not all(isinstance(w, str) for w in listed):
            raise ConfigError(f"{where}: `workers` must be a list of RUNTIME+WIRE://HOST:PORT")
        if number == 1 and "model_path" not in data:
            for key in FIRST_MODEL_KEYS:
                if key in table and key in data:
                    raise ConfigError(f"{where}: {key} is given twice (here and at the top)")
                if key in table:
                    fields[key] = table[key]
            if "policy" in table:
                names = served_names(
                    table["model_path"], tuple(table.get("served_model_names", ()))
                )
                policies = dict(fields.get("model_policies", {}))
                policies.update(dict.fromkeys(names, table["policy"]))
                fields["model_policies"] = policies
            workers.append((None, listed))
            continue
        names = served_names(Path(table["model_path"]), tuple(table.get("served_model_names", ())))
        workers.append((names[0], listed))
        further.append(table)
    fields["models"] = further
    return fields, workers


def check_models(
    models: Sequence[ModelSpec],
    worker_models: Sequence[str | None],
    model_policies: Mapping[str, str],
) -> None:
    """The models together: names unique, each worker's model served, each model a worker;
    per model: its parsers, policy and limit (`models[0]` is the first model)."""
    owner: dict[str, int] = {}
    for index, model in enumerate(models):
        for name in model.names:
            if not name:
                raise ConfigError("a served model name must not be empty")
            if name in owner:
                raise ConfigError(
                    f"served model name {name!r} is given to two models "
                    f"({models[owner[name]].model_path} and {model.model_path})"
                )
            owner[name] = index
        check_parser_names(model.tool_call_parser, model.reasoning_parser)
        try:
            model.tasks  # noqa: B018 - runner and convert checked together
        except ConfigError as exc:
            raise ConfigError(f"model {model.names[0]!r}: {exc}") from None
        if model.policy is not None and model.policy not in POLICY_NAMES:
            raise ConfigError(
                f"model {model.names[0]!r}: unknown routing policy {model.policy!r}; "
                f"known: {', '.join(POLICY_NAMES)}"
            )
        if model.max_model_len is not None and model.max_model_len < 1:
            raise ConfigError(
                f"model {model.names[0]!r}: max_model_len must be at least 1, "
                f"got {model.max_model_len}"
            )
    unknown_models = sorted({m for m in worker_models if m is not None} - set(owner))
    if unknown_models:
        raise ConfigError(
            f"a worker names model {unknown_models[0]!r}, which is not served; served: "
            f"{', '.join(owner)}"
        )
    served = {0 if m is None else owner[m] for m in worker_models}
    for index, model in enumerate(models):
        if index not in served:
            raise ConfigError(
                f"model {model.names[0]!r} has no worker: add one with "
                f"?model={model.names[0]} (e.g. --worker 'vllm+zmq://127.0.0.1:PORT"
                f"?model={model.names[0]}')"
            )
    unknown = sorted(set(model_policies) - set(owner))
    if unknown:
        raise ConfigError(f"model_policies names models that are not served: {unknown}")
