"""Managed jobs, the parent's side: the store, the runner, each job's process, its log's tail.
Their HTTP routes are `mlxhost.host.routes.jobs`.

The job process itself (which imports MLX) is `mlxhost.job`; the shapes all sides share are
`mlxhost.wire.admin.jobs` and `mlxhost.wire.admin.job_requests`.
"""
