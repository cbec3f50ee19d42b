"""The bench's results as typed records, and the one JSON layout --json writes (`to_json`).

Every record is a frozen dataclass (`record.Record`) written as its fields, in order, then the
derived figures and old names its class lists in DERIVED. Figures that cannot be had are NaN and
written as null. A whole run writes `BenchDocument`; a --*-only run `PartDocument`.

BenchDocument (document.py), top-level keys in order:
  machine, versions, model          Machine, Versions, Model (the prompt and its reply_probe)
  settings                          RunSettings: max_tokens, repeats, concurrency, temperature,
                                    max_batch, prefill_batch, server_options.{in_process,isolated,
                                    mlx_lm_server,overload}, ttft_requests, ttft_max_tokens
  results.<path>.cN                 path: raw, mlx_lm_server, in_process, isolated. c1: SingleStream
                                    (decode_tok_s, ttft_ms_p50/p95, ttft_samples, e2e_tok_s,
                                    total_tok_s, tokens, runs, ttft_requests_ms); cN: Batched
                                    (total_tok_s, ttft_ms_p50/p95, tokens, runs, and for raw alone
                                    tokens_only_total_tok_s)
  ratios                            Ratios: isolated_vs_raw, isolated_vs_mlx_lm_server,
                                    in_process_vs_raw, in_process_vs_mlx_lm_server,
                                    mlx_lm_server_vs_raw, isolated_vs_in_process, each by cN (c1 =
                                    decode, cN = total tok/s) with c1_e2e and ttft_p50; and
                                    mlxhost_vs_raw, the old name of isolated_vs_raw
  ttft_ms                           TTFTFigures: p50 and p95 by path (and mlxhost, the old name of
                                    isolated), count by path, by_concurrency.<path>.cN.{p50,p95}
  mlx_lm_server                     Peer: command, options, listen_backlog, as_shipped, ready_s,
                                    cached_prompt_tokens
  stream_retries, cached_prompt_tokens   by HTTP path (counters)
  rss_mb                            Memory: parent, worker, in_process, mlx_lm_server, and the
                                    servers' own worker_reported, in_process_reported
  recovery_s, worker_ready_s        copies of recovery's medians
  recovery                          RecoverySummary: model_load_s (and where from), meets_target
                                    (recovery_s <= model load + slack_s), meets_ready_target
                                    (<= worker_ready_s + ready_slack_s), runs, startup (Startup)
  constrained_vs_free, grammar_compile_ms   copies of constrained.mixed_vs_free, .compile_ms
  constrained                       ConstrainedSummary: total_tok_s.{free,mixed}, tokens and TTFT by
                                    kind of stream, the worker's CPU, compile_ms.{setup,cold,other,
                                    hit,tool,tokenizer}, compiler_ms, settings (the model's
                                    family; what the constrained streams carried: response_format
                                    or forced_call), runs, compile_runs
  cancel_ms, cancel_steps           copies of cancel's {p50,max}
  cancel                            CancelSummary: steps_after_close, per-step time, outcomes, runs
  overload                          OverloadSummary: reject_ms.{p50,p99,max,count},
                                    admitted_vs_unloaded, admitted_tok_s, CPU, problems, runs
  targets                           Targets: SpeedTargets' keys, then each target's bound and
                                    verdict: parent_rss, recovery (recovery_ok, with its older name
                                    recovery_ok_vs_model_load, and recovery_ok_vs_worker_ready),
                                    constrained, cancel, reject, admitted, event_latency, hub,
                                    lagging, then JobsTargets, ClosedLoopTargets, AgentTargets
  server_engine_statistics          each mlxhost server's engine counters, as its /health has them
  prompt_tokens_served              by HTTP path
  chart                             the PNG's path, or null
  event_latency_ms                  EventLatency: p50, p95, max, count, by_type,
                                    publish_to_arrival_ms, worker_exited, samples
  events                            EventsSummary: hub_events_per_s, lagging_subscriber_ratio, tok/s
                                    and CPU with and without subscribers, lagging_received,
                                    hub_micro (HubFigures), runs
  jobs, finetune_vs_direct, serving_after_job_vs_before       JobsSummary.top_level()
  closed_loop, closed_loop_tok_s, closed_loop_isolated_vs_raw_tokens_only,
  closed_loop_isolated_vs_raw_closed_loop, closed_loop_client_cores  ClosedLoopSummary.top_level()
  agent, agent_ttft_vs_cold, agent_hit_rate, agent_disk_bytes  AgentSummary.top_level()

PartDocument: machine, versions, model, settings (PartSettings: max_tokens, repeats,
concurrency, temperature, max_batch, quick, only, jobs_only), then the part's keys: --jobs-only,
--closed-loop-only and --agent-only their `top_level()` and `targets` (their targets alone);
--recovery-only recovery_s, worker_ready_s, recovery and targets (RecoveryTargets);
--group-only group (GroupFigures); --constrained-only constrained_vs_free, grammar_compile_ms,
constrained and targets (constrained_vs_free_min, constrained_ok), as a whole run writes them.

PullDocument (pull.py, --pull): machine, versions, model (the chat model the host serves),
settings (PartSettings), then pull (PullSummary: repo, throughput (PullThroughput: MB/s of
`mlxhost pull` and `hf download`, mlxhost_vs_hf, same_files), serving (ServingWhilePulling:
decode_tok_s_without/_with, with_vs_without, pull_mb_per_s_while_serving), skipped, runs,
windows), pull_vs_hf and serving_while_pulling (copies of its two ratios), and targets
(PullTargets: pull_vs_hf_min, pull_ok, serving_while_pulling_min, serving_while_pulling_ok).

Free-form parts stay dicts: keys that are data (concurrency levels "c1", process names, outcome
kinds, event types), and documents other programs wrote (a host's /health or session record, a
JSON schema as sent).
"""

from bench.results.document import BenchDocument, PartDocument, RecoveryTargets, Targets
from bench.results.record import Record, encode

__all__ = ["BenchDocument", "PartDocument", "Record", "RecoveryTargets", "Targets", "encode"]
