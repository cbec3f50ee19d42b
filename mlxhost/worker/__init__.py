"""The worker process: one model loaded with MLX, served over a private Unix socket to the parent.
The only package that imports MLX or mlx-lm.

Its floors, each standing only on the ones below it:

- `cache/`: the prompt cache: reused KV state in memory, and its files on disk.
- `engine/`: the model and its generation thread: batching, sampling, grammars, ranks, tokens to text.
- `api/`: the three dialects (Chat Completions and Completions, Messages, Responses) on one
  request pipeline, and their answers.
- `app`, `serve`, `pause`, `in_process`, `__main__`: the composition root.
"""
