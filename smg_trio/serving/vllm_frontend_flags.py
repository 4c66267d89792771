"""Pure. Every key `vllm serve`'s front-end hook may put in `--args-json`, by kind
(docs/vllm-frontend.md §2 is this module as a table): the front-end flags we honour and what
each becomes, `vllm serve`'s own, the engine's, and the front-end flags we refuse (any key in
none of the sets is refused too: serving/vllm_frontend_args.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final


def _flag_set(names: str) -> frozenset[str]:
    return frozenset(names.split())


GATEWAY_LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")

FRONTEND_FLAGS: Final[Mapping[str, str]] = {
    "model": "the model folder (a hub id is found in the local Hugging Face cache, as vLLM does)",
    "model_tag": "the same, as given on the command line (wins over `model`)",
    "tokenizer": "accepted when it names the model's own folder (we read the tokenizer there)",
    "revision": "the cached snapshot of a hub id (refs/REVISION)",
    "tokenizer_revision": "accepted when equal to `revision`",
    "served_model_name": "served_model_names (the names clients may send; the first leads)",
    "api_key": "api_key (OpenAI's 401 without it); several keys: refused",
    "ssl_certfile": "certfile: TLS on the inherited socket (ALPN h2, http/1.1)",
    "ssl_keyfile": "keyfile",
    "enable_log_requests": "log_requests (prompt and completion text in the request log line)",
    "enable_log_outputs": "log_requests (the completion text is in the same line)",
    "log_level": "the gateway's log level",
    "uvicorn_log_level": "the HTTP server's log level (logger smg_trio.http)",
    "tool_call_parser": "tool_call_parser (vLLM's parser names)",
    "reasoning_parser": "reasoning_parser (vLLM's parser names)",
    "enable_auto_tool_choice": "accepted: `tool_choice: auto` is always parsed with the tool parser",
    "stream_interval": "stream_interval",
    "shutdown_timeout": "drain_timeout_s: on SIGTERM running requests may finish this long",
    "sse_keep_alive_interval": "keepalive_s (0, vLLM's default: ours, 15 s, stays)",
    "disable_uvicorn_access_log": "accepted: we write no access log",
    "disable_access_log_for_endpoints": "accepted: we write no access log",
    "disable_fastapi_docs": "accepted: we serve no /docs",
    "enable_request_id_headers": "accepted: every response carries x-request-id",
    "download_dir": "where a hub id's snapshot is looked up (instead of the Hugging Face cache)",
    "hf_token": "accepted: the engine downloads; we only read the local cache",
    "generation_config": "`vllm` only (we apply no sampling defaults from the model's files)",
    "tokenizer_mode": "`auto` or `hf` only (the model's tokenizer.json)",
    "runner": "runner: `generate` (or `auto`) serves generation; `pooling` serves the pooling "
    "paths (docs/pooling.md), its pooler named by `--convert` or, absent, `embed` for a "
    "`...ForCausalLM` architecture as vLLM converts it (other architectures: refused)",
    "convert": "convert: `embed` or `classify` (with `--runner pooling` or `auto`); `none` only "
    "with a generate runner",
    "engine_ready_timeout_secs": "how long we wait for the engines' ready messages",
    "http_timeout_keep_alive": "idle_timeout_s: an idle keep-alive connection closes after it",
    "max_model_len": "max_model_len: the context length prompts and max_tokens are checked against "
    "and /tokenize reports (the engines were started with it; their ready messages say it too)",
    "enable_tokenizer_info_endpoint": "tokenizer_info_endpoint: GET /tokenizer_info, as vLLM's",
    "chat_template": "the model's chat template: a file (chat_template), else the template "
    "itself (chat_template_text), as vLLM tells them apart; a name of one of vLLM's bundled "
    "templates is refused",
    "root_path": "root_path: a path starting with the prefix is served without it, any other "
    "as it is, as vLLM's",
    "allowed_origins": "cors.allowed_origins: cross-origin access (none: off, vLLM's default)",
    "allowed_methods": "cors.allowed_methods",
    "allowed_headers": "cors.allowed_headers",
    "allow_credentials": "cors.allow_credentials",
    "limit_mm_per_prompt": 'limit_mm_per_prompt: `{"image": N}` (other modalities refused)',
    "allowed_media_domains": "allowed_media_domains: the only hosts image URLs are fetched from",
    "allowed_local_media_path": "allowed_local_media_path: file:// image URLs under this folder",
    "enable_scale_out": "scale_out: POST /inference/v1/abort_requests aborts running requests "
    "by id; the render and derender paths answer 501 (not implemented); "
    "/inference/v1/generate is served with or without it (docs/vllm-frontend.md §9)",
    "mm_device_do_normalize": "mm_device_do_normalize: the engines' setting, so Qwen-VL pixels "
    "go as they take them (raw uint8 when on, vLLM's default; normalised float32 when off)",
    "response_role": "response_role: the chat reply's role after a generation prompt (the "
    "role chunk of a stream, a full answer's message)",
    "return_tokens_as_token_ids": "return_tokens_as_token_ids: logprob tokens as `token_id:N` "
    "in chat and completions, top logprobs too (a request's own field wins)",
    "enable_prompt_tokens_details": "enable_prompt_tokens_details: usage.prompt_tokens_details "
    "on every chat and completions answer, 0 cached tokens included, as vLLM's",
    "max_log_len": "max_log_len: with --enable-log-requests, the characters of the body and of "
    "each completion text in the request log line",
    "chat_template_content_format": "chat_template_content_format: a message's content as a "
    "string or OpenAI's list of parts; `auto` reads the template as vLLM does",
    "otlp_traces_endpoint": "otlp_traces_endpoint: the request traces exported there over "
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (grpc, vLLM's default, or http/protobuf), as vLLM's",
    "default_chat_template_kwargs": "default_chat_template_kwargs: chat template variables for "
    "every request, under its own chat_template_kwargs",
    "exclude_tools_when_tool_choice_none": "exclude_tools_when_tool_choice_none: with "
    "`tool_choice: none` the template is not shown the tools",
    "trust_request_chat_template": "trust_request_chat_template: a request's own chat_template "
    "is rendered (without the flag: vLLM's 400)",
    "enable_force_include_usage": "enable_force_include_usage: every stream carries usage, on "
    "each chunk and at its end, as vLLM's",
}

SERVE_FLAGS: Final = _flag_set(
    """
api_server_count config config_format data_parallel_address data_parallel_backend
data_parallel_external_lb data_parallel_hybrid_lb data_parallel_multi_port_external_lb
data_parallel_rank data_parallel_rpc_port data_parallel_size data_parallel_size_local
data_parallel_start_rank data_parallel_supervisor_port dp_supervisor_probe_failure_threshold
dp_supervisor_probe_interval_s dp_supervisor_probe_timeout_s fail_on_environ_validation host
master_addr master_port nnodes node_rank port uds
"""
)
"""`vllm serve`'s own: it bound the HTTP socket (host, port, uds) and the engines' listeners,
started the engines (data parallelism) and read its config file before running us."""

ENGINE_FLAGS: Final = _flag_set(
    """
additional_config all2all_backend allow_deprecated_quantization async_scheduling
attention_backend attention_config aux_output_config block_size code_revision
collect_detailed_traces compilation_config cp_kv_cache_interleave_size
cpu_distributed_timeout_seconds cpu_offload_gb cpu_offload_params cudagraph_capture_sizes
dbo_decode_token_threshold dbo_prefill_token_threshold dcp_comm_backend
dcp_kv_cache_interleave_size dcp_q_replicate decode_context_parallel_size default_mm_loras
device_ids diffusion_config disable_cascade_attn disable_chunked_mm_input
disable_custom_all_reduce disable_hybrid_kv_cache_manager disable_log_stats
disable_nccl_for_dp_synchronization disable_sliding_window distributed_executor_backend
distributed_timeout_seconds dp_sync_interval dtype ec_manager_config ec_transfer_config
elastic_ep_max_dp_size enable_batch_sharded_sampling enable_chunked_prefill
enable_cumem_allocator enable_dbo enable_elastic_ep enable_ep_weight_filter enable_eplb
enable_expert_parallel enable_fault_tolerance enable_flash_late_interaction
enable_flashinfer_autotune enable_hc_sp enable_layerwise_nvtx_tracing
enable_logging_iteration_details enable_lora enable_mamba_cache_stochastic_rounding
enable_mamba_shared_prefix_checkpoint enable_mixed_moe_lora_format enable_moe_shared_loras
enable_nccl_comm_suspend enable_prefix_caching enable_shm_tensor_arena enable_sleep_mode
enable_tower_connector_lora enable_trace_replay enforce_eager engram_config eplb_config
expert_placement_strategy fault_tolerance_config fully_sharded_loras gdn_prefill_backend
gpu_memory_utilization hf_config_path hf_overrides ignore_patterns ir_op_priority
jit_monitor_mode jit_monitor_verbose kda_decode_backend kda_prefill_backend kernel_config
kv_cache_dtype kv_cache_dtype_skip_layers kv_cache_memory_bytes kv_events_config
kv_offloading_backend kv_offloading_size kv_sharing_fast_prefill kv_transfer_config
language_model_only linear_backend load_format logits_processors logprobs_mode
long_prefill_token_threshold long_prefill_token_threshold_adaptive lora_dtype
lora_target_modules mamba_backend mamba_block_size mamba_cache_dtype mamba_cache_mode
mamba_cache_philox_rounds mamba_ssm_cache_dtype mamba_ssu_algorithm max_cpu_loras
max_cudagraph_capture_size max_logprobs max_lora_cls_labels max_lora_rank max_loras
max_num_active_seqs max_num_batched_tokens max_num_queued_reqs
max_num_queued_tokens max_num_scheduled_tokens max_num_seqs max_parallel_loading_workers
mm_encoder_attn_backend mm_encoder_attn_dtype
mm_encoder_fp8_scale_path mm_encoder_fp8_scale_save_margin mm_encoder_fp8_scale_save_path
mm_encoder_only mm_encoder_tp_mode mm_hasher_algorithm mm_ipc_gpu_memory_gb
mm_processor_cache_gb mm_processor_cache_type mm_processor_device
mm_shm_cache_max_object_size_mb mm_tensor_ipc model_class_overrides model_impl
model_loader_extra_config moe_backend num_gpu_blocks_override numa_bind numa_bind_cpus
numa_bind_nodes offload_backend offload_group_size offload_num_in_group offload_params
offload_prefetch_step optimization_level performance_mode pipeline_parallel_size
prefill_context_parallel_size prefill_schedule_interval prefix_cache_retention_interval
prefix_caching_hash_algo prefix_match_unit profiler_config pt_load_map_location quantization
quantization_config ray_workers_use_nsight reasoning_config replayssm_buffer_len
safetensors_load_strategy safetensors_prefetch_block_size safetensors_prefetch_num_threads
scheduler_cls scheduler_reserve_full_isl scheduling_policy seed skip_mm_profiling
sleep_mode_offload_cudagraph sleep_preserve_parameter_names sparse_indexer_topk_backend
spec_method spec_model spec_tokens specialize_active_lora speculative_config
structured_outputs_config swa_bounded_replay tensor_parallel_size trust_remote_code
ubatch_size use_fp64_gumbel use_replayssm use_tqdm_on_load video_pruning_method
video_pruning_rate watermark watermark_config weight_transfer_config worker_cls
worker_extension_cls
"""
)
"""The EngineCore's: the front end has nothing to do with them (ignored by design)."""

REFUSED_FLAGS: Final = _flag_set(
    """
aggregate_engine_logging anthropic_disabled_thinking_effort
cohere_format cohere_is_reasoning_model cudagraph_metrics custom_histogram_buckets
enable_log_deltas enable_mfu_metrics
enable_mm_embeds enable_offline_docs enable_per_request_metrics enable_prompt_embeds
enable_return_routed_experts
enable_server_load_tracking enable_ssl_refresh
fingerprint_mode fingerprint_value grpc grpc_port h11_max_header_count
h11_max_incomplete_event_size headless interleave_mm_strings io_processor_plugin
kv_cache_metrics kv_cache_metrics_sample log_config_file log_error_stack logging_config
lora_modules media_io_kwargs middleware mm_processor_kwargs
override_generation_config per_request_spec_decode_metrics pooler_config
reasoning_parser_plugin renderer_num_workers return_sampling_mask
show_hidden_metrics_for_version skip_tokenizer_init ssl_ca_certs
ssl_cert_reqs ssl_ciphers tokens_only tool_parser_plugin tool_server tool_strict_level
trust_request_mm_kwargs
"""
)
"""Front-end flags we do not honour (yet): refused by name. Any key in none of the sets is
refused the same way; this set only documents the known ones (docs/vllm-frontend.md §2)."""

REFUSED_REASONS: Final[Mapping[str, str]] = {
    "tokens_only": "a server of /inference/v1/generate alone, with detokenization off, is not "
    "implemented (our /inference/v1/generate is served beside the rest)",
    "return_sampling_mask": "sampling masks in /inference/v1/generate are not implemented",
    "grpc": "the smg-trio front end serves no vLLM gRPC API",
    "grpc_port": "the smg-trio front end serves no vLLM gRPC API",
    "headless": "no front end runs with --headless",
}
"""Why some of the refused flags are refused (the docs table says it)."""
