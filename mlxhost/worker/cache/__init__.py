"""The prompt cache: KV state of earlier prompts, kept in memory (`memory`) and on disk (`disk`, its
index in `disk_index`, its files' format in `files`, a model's folder in `folder`, the directory's
bound across models in `directory`)."""
