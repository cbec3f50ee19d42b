"""Benchmark mlxhost against raw mlx-lm and mlx-lm's own server: same model, same prompt, greedy,
same max_tokens.

    python scripts/bench [--model DIR | --size tiny|bench] [--max-tokens N] [--repeats N]
                         [--concurrency 1,4,8,16] [--ttft-requests N] [--quick | --smoke]
                         [--json PATH] [--chart PATH] [--mlx-lm-server-backlog N]
                         [--jobs-only | --agent-only | --closed-loop-only | --recovery-only |
                          --peers [--install-vllm-mlx] | --batch-kv | --join-gap | --embeddings]

Four paths are measured in one run, their repeats interleaved, the order rotating from one repeat
to the next, so that a noisy machine slows all of them alike:

raw            mlx-lm in this process (`bench.raw`).
mlx_lm.server  the peer: `python -m mlx_lm server` from the installed mlx-lm (`bench.mlx_lm_server`).
in-process     `python -m mlxhost serve --in-process`: the serving core and the model in one
               process. Its prompt cache is on (its default), as mlx_lm.server's is.
isolated       `python -m mlxhost serve` (the default): a parent process that never imports MLX,
               proxying each request over a private Unix socket to a worker process that holds
               the model.

The measurements, one module each, in the order a run takes them (`bench.run`):
  throughput     decode, end-to-end and total tok/s at every concurrency, all four paths
  ttft           time to first token, one stream at a time, all four paths
  memory         RSS of every server's processes; target: the isolated parent <= 80 MB
  constrained    8 streams, 4 under a JSON schema, against 8 free; grammar compile times;
                 target >= 0.9
  cancel         a client leaving mid-stream to the worker's engine freed; target <= 1 step
  event_latency  admin events' arrival at a subscriber; target p95 <= 250 ms
  lagging        generation with an admin subscriber that never reads; target >= 0.98 x without
  recovery       kill -9 of the worker to the next 200; target <= the model's load time + 0.3 s
                 (the older one, <= worker_ready_s + 1 s, beside it); alone with --recovery-only
  overload       429 latency and the admitted streams' rate with a full queue
  jobs           a fine-tune as an mlxhost job against mlx_lm.lora run directly (iterations/s;
                 target >= 0.95), and serving before and after a job (target >= 0.95); alone
                 with --jobs-only
  closed_loop    raw BatchGenerator in this process and the isolated server over HTTP with every
                 finished row replaced at once (rows of 400 tokens), at each concurrency, tokens
                 only and detokenized; the client's and the servers' CPU; where raw steps go;
                 target isolated >= 0.8 x raw all at once (tokens only); alone with
                 --closed-loop-only
  agent          a tool-calling conversation re-sent whole every turn: TTFT per turn on raw
                 (cold), mlx_lm.server and mlxhost, then after a worker kill and after a host
                 restart on the same --state-dir; hit rates, bytes on disk; target mlxhost <= 0.3
                 x a cold prefill of the same length after the first turn; alone with
                 --agent-only (on the bench model by default)
  hub            the event hub alone, in this process

Modes of their own, each alone:
  peers          --peers: mlxhost, vllm-mlx (installed with --install-vllm-mlx into a venv of its
                 own; skipped with the reason where it cannot be) and mlx_lm.server at 1, 4, 8 and
                 16 streams, 5 rounds taking turns; targets mlxhost >= 1.3 x vllm-mlx and >= 2 x
                 mlx_lm.server (`bench.peers`, `bench.vllm_mlx`, `bench.peers_figures`)
  batch_kv       --batch-kv: mlx-lm's BatchGenerator against mlxhost's RowBatch in this process,
                 decode only: mixed lengths, KV bytes against the rows' own, kv_bits, staggered
                 insertion (`bench.batch_kv`, `bench.batch_kv_figures`); this imports the worker's
                 `mlxhost.worker.engine.rows`
  join_gap       --join-gap: a running stream's largest gap between tokens while a 4,000-token
                 prompt joins, at 1, 4 and 8 running streams, kv_layout padded against per_row;
                 target <= 0.15 s on the tiny model (`bench.join_gap`, `bench.join_gap_figures`)
  embeddings     --embeddings: POST /v1/embeddings on an isolated server against the raw forward of
                 the same embedding model in this process: short and mixed-length inputs in
                 requests of 1, 16 and 64, 1,000 code chunks, where a request's time goes; target
                 host >= 0.85 x raw at 64 (`bench.embeddings`, `bench.embeddings_figures`)
Targets on the table's figures (`bench.targets`): isolated >= 0.95 x raw at every concurrency;
isolated >= 1.15 x mlx_lm.server at c8; TTFT p50 isolated <= raw + 5 ms.

Shared pieces: `hosts` (the mlxhost servers, through `mlxhost.testing`), `streams` (load over
HTTP), `health` (what /health says), `processes` (psutil readings), `watcher` (an admin event
subscriber), `raw_http` (the overload run's minimal client), `runs` and `figures` (records and
arithmetic), `settings`; `plan` (the options), `report` (the text and the JSON, whose keys are
listed there), `chart` (the PNG), `cli` (main).

The bench talks to mlxhost only over HTTP and its admin API (and `mlxhost.client.admin`); it
imports `mlxhost.host.events` only to measure the hub alone, and of the worker only
`mlxhost.worker.engine.grammar` and `.grammar_compiler`, to time grammar compiles in this process
(`bench.constrained`), `mlxhost.worker.engine.rows` for --batch-kv, and for --embeddings the pass
queue, `hidden_body` and `vectors_body` (`bench.embeddings`).
"""
