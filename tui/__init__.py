"""The `mlxhost tui` operator console: a client of the host's public admin API only."""
