"""The per-row batch: each row its own KV cache, attention over each row's own length."""
