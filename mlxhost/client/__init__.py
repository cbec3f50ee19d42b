"""Clients of a running host's admin API: `mlxhost status`, and what the console reads."""
