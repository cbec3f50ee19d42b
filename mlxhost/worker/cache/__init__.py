"""The prompt cache: KV state of earlier prompts, kept in memory (`memory`) and on disk (`disk`,
its files' format in `files`, the directory's bound across models in `directory`)."""
