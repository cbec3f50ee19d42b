"""The parent's side of the model workers: a process from spawn to exit, its launch and liveness,
the restart budget, warm standbys, the pause lease, the supervisor that keeps one model served, the
pool of all models, and the HTTP client for a worker's private socket."""
