"""Run with vLLM's Python (never the gateway's): decode an ADD's frames with vLLM's own
MsgpackDecoder into its EngineCoreRequest and print what it holds, as JSON, for
tests/wire/test_vllm_mm_features_real.py (docs/images.md §5).

    /opt/venvs/vllm/bin/python scripts/vllm_decode_add.py FRAMES_DIR

FRAMES_DIR holds 0.bin (the request payload), 1.bin, 2.bin ... (its extra frames).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.serial_utils import MsgpackDecoder

    folder = Path(sys.argv[1])
    frames = [(folder / f"{i}.bin").read_bytes() for i in range(len(list(folder.glob("*.bin"))))]
    request = MsgpackDecoder(EngineCoreRequest).decode(frames)
    out = []
    for feature in request.mm_features or []:
        item = feature.data
        fields = {}
        for name, elem in (item or {}).items():
            tensor = elem.data
            fields[name] = {
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "shape": list(tensor.shape),
                "sum": float(tensor.double().sum()),
                "field": type(elem.field).__name__,
                "keep_on_cpu": elem.field.keep_on_cpu,
            }
        position = feature.mm_position
        mask = position.is_embed
        out.append(
            {
                "identifier": feature.identifier,
                "modality": feature.modality,
                "offset": position.offset,
                "length": position.length,
                "embeds": None if mask is None else int(mask.sum()),
                "has_data": item is not None,
                "fields": fields,
            }
        )
    print(
        json.dumps(
            {
                "request_id": request.request_id,
                "prompt": len(request.prompt_token_ids or []),
                "features": out,
            }
        )
    )


if __name__ == "__main__":
    main()
