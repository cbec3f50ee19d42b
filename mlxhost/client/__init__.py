"""Clients of a running host's admin API: `mlxhost status`, `mlxhost jobs`, and what the console reads."""
