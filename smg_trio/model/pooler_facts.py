"""I/O. What a model folder says of its pooler (docs/pooling.md §4), read once at startup from
its `config.json`: the embedding size (`hidden_size`), Matryoshka support
(`matryoshka_dimensions` or `is_matryoshka`, as vLLM reads them) and the class labels
(`id2label`, by class index; transformers' `LABEL_0`, `LABEL_1` when absent). The tasks come
from the model's `runner`/`convert` (serving/model_specs.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smg_trio.model.folder import read_json_object
from smg_trio.neutral.pooling import ModelPooler, Task


def load_model_pooler(folder: Path, tasks: frozenset[Task]) -> ModelPooler:
    config = read_json_object(folder / "config.json") or {}
    return model_pooler(config, tasks)


def model_pooler(config: dict[str, Any], tasks: frozenset[Task]) -> ModelPooler:
    """Pure: the pooler `config` (a config.json's object) describes."""
    hidden = config.get("hidden_size")
    dimensions = config.get("matryoshka_dimensions")
    listed = (
        tuple(d for d in dimensions if isinstance(d, int) and not isinstance(d, bool))
        if isinstance(dimensions, list) and dimensions
        else None
    )
    return ModelPooler(
        tasks=tasks,
        hidden_size=hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else None,
        matryoshka=listed is not None or config.get("is_matryoshka") is True,
        matryoshka_dimensions=listed,
        labels=_labels(config.get("id2label")),
    )


def _labels(id2label: Any) -> tuple[str, ...]:
    if not isinstance(id2label, dict) or not id2label:
        return ("LABEL_0", "LABEL_1")
    by_index: dict[int, str] = {}
    for key, label in id2label.items():
        try:
            by_index[int(key)] = str(label)
        except (TypeError, ValueError):
            continue
    return tuple(by_index.get(i, f"LABEL_{i}") for i in range(max(by_index, default=-1) + 1))
