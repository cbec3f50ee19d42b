"""The parent process: the public HTTP front, admission, sessions, and one supervised worker per
model. It never imports MLX (`tests/unit/test_import_rules.py` holds it to that).

Its floors, each standing only on the ones below it:

- `events`: the event hub every floor reports to.
- `workers/`: one model's processes: a process from spawn to exit and its shape (one process or a
  group of ranks), launch, liveness, the restart budget, standbys, the pause lease, the requests a
  worker holds, the supervisor, the pool of models, and the HTTP client for a worker's socket.
- `serving/`: one request's way through: admission, the execution coordinator, sessions, the relay
  and its client's side (`downstream`).
- `jobs/`: managed jobs: the store and the records over it, the runner and one job's execution,
  recovery of a previous host's jobs, each job's process and its log's tail.
- `state`: what the routes share.
- `routes/`: the admin API, the job routes, the metrics.
- `app`, `serve`: the composition root, which builds the Starlette app and runs the parent.
"""
