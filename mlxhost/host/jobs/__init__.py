"""Managed jobs, the parent's side: the store and the records kept over it, the runner and each
job's turn under the lease, what a previous host left, each job's process, folder and log's tail,
and the model a job made. Their HTTP routes are `mlxhost.host.routes.jobs`.

The job process itself (which imports MLX) is `mlxhost.job`; the shapes all sides share are
`mlxhost.wire.admin.jobs` and `mlxhost.wire.admin.job_requests`.
"""
