"""The parent process: the public HTTP front, admission, sessions, and one supervised worker per
model. It never imports MLX (`tests/unit/test_import_rules.py` holds it to that).

Its floors, each standing only on the ones below it:

- `events`: the event hub every floor reports to.
- `workers/`: one model's processes: spawn, launch, liveness, restarts, standby, the pause lease,
  the supervisor, the pool of models, and the HTTP client for a worker's socket.
- `serving/`: one request's way through: admission, the execution coordinator, sessions, the relay.
- `jobs/`: managed jobs: the store, the runner, each job's process and its log's tail.
- `state`: what the routes share.
- `routes/`: the admin API, the job routes, the metrics.
- `app`, `serve`: the composition root, which builds the Starlette app and runs the parent.
"""
