"""A gateway serving several model folders at once (docs/fleet.md §4), each behind its own
reference vLLM ZMQ engines started with that folder, each model's engines replaying a text of
its own (so an answer's text says which model's engine wrote it). Everything on loopback;
every engine is killed by its process on the way out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from harness.served_gateway import ServedGateway, served_gateway
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.routing.vocabulary import Worker
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.model_specs import ModelSpec
from smg_trio.serving.worker_specs import WorkerSpec
from tests.e2e.live_server import engine_command, engine_log

HARMONY_MODEL: Final = Path(__file__).resolve().parents[1] / "harmony_model"
# The harmony test folder has no chat template: this one is given to it by the config.
PLAIN_TEMPLATE: Final = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant<|message|>{% endif %}"
)


@dataclass(frozen=True)
class ServedFolder:
    """One model of the gateway: its served names, folder, engines and their replay text."""

    names: tuple[str, ...]
    folder: Path
    workers: int
    replay_text: str | None  # None: the engines in random mode (each token from its context)
    chat_template: Path | None = None
    max_model_len: int | None = None
    engine_folder: Path | None = None  # the folder its engines load (default: `folder`)
    runner: str = "generate"  # vLLM's --runner / --convert (docs/pooling.md §4)
    convert: str | None = None

    @property
    def engines_load(self) -> Path:
        return self.folder if self.engine_folder is None else self.engine_folder


@dataclass
class ModelsServer:
    served: ServedGateway
    models: Sequence[ServedFolder]
    engines: dict[str, list[trio.Process]] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.served.serving.port}"

    def workers_of(self, name: str) -> list[Worker]:
        return [w for w in self.served.serving.gateway.pool.workers if w.model == name]

    def requests_by_model(self) -> dict[str, int]:
        """Requests the pool routed to each model's workers."""
        counts: dict[str, int] = {}
        for row in self.served.serving.gateway.pool.snapshot():
            counts[row.model] = counts.get(row.model, 0) + row.requests
        return counts


def models_config(tmp_path: Path, models: Sequence[ServedFolder], **settings: Any) -> GatewayConfig:
    """The first of `models` as the gateway's own model, the others as `models`; every
    worker on a ZMQ port the kernel picks, naming its model (the first's need not)."""
    first, *further = models
    workers = tuple(
        WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0", model=None if index == 0 else m.names[0])
        for index, m in enumerate(models)
        for _ in range(m.workers)
    )
    return GatewayConfig(
        model_path=first.folder,
        served_model_names=first.names,
        chat_template=first.chat_template,
        max_model_len=first.max_model_len,
        runner=first.runner,
        convert=first.convert,
        workers=workers,
        port=0,
        request_timeout_s=30.0,
        response_store=f"sqlite:///{tmp_path / 'responses.sqlite3'}",
        models=tuple(
            ModelSpec(
                model_path=m.folder,
                served_model_names=m.names,
                chat_template=m.chat_template,
                max_model_len=m.max_model_len,
                runner=m.runner,
                convert=m.convert,
            )
            for m in further
        ),
        **settings,
    )


def two_models(
    tmp_path: Path, *, demo_workers: int = 1, harmony_workers: int = 1
) -> list[ServedFolder]:
    """The demo model and the harmony test folder (another tokenizer, a template from a file
    and a lower context bound)."""
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN_TEMPLATE, encoding="utf-8")
    return [
        ServedFolder(
            ("demo", "demo-alias"), demo_model_path(), demo_workers, "Demo engine says hi."
        ),
        ServedFolder(
            ("harmony",),
            HARMONY_MODEL,
            harmony_workers,
            "Harmony engine answers.",
            chat_template=template,
            max_model_len=1024,
        ),
    ]


@asynccontextmanager
async def models_server(
    tmp_path: Path, models: Sequence[ServedFolder], **settings: Any
) -> AsyncIterator[ModelsServer]:
    config = models_config(tmp_path, models, **settings)
    with engine_log(tmp_path / "engines.log") as log:
        async with served_gateway(config, log) as served:
            server = ModelsServer(served, models)
            addresses = iter(served.serving.worker_addresses)
            for model in models:
                replay = None
                if model.replay_text is not None:
                    replay = tmp_path / f"replay-{model.names[0]}.txt"
                    replay.write_text(model.replay_text, encoding="utf-8")
                for _ in range(model.workers):
                    argv = [
                        *engine_command(next(addresses), replay, 2.0),
                        "--model-path",
                        str(model.engines_load),
                    ]
                    process = await served.start_engine(argv)
                    server.engines.setdefault(model.names[0], []).append(process)
            # A model whose engines load another folder is never ready: not waited for.
            proper = {m.names[0] for m in models if m.engines_load == m.folder}
            pool = served.serving.gateway.pool
            await served.wait_ready(w for w in pool.workers if w.model in proper)
            yield server
