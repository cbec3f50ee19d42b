"""The contracts between mlxhost's processes, as data: no I/O, no Starlette, no MLX.

`openai` and `chunks` are the HTTP API (requests, and responses whole and streamed); `errors` its
error bodies; `headers` the headers the parent and worker add; `launch` the worker's stdin/stdout
protocol; `admin` the admin API's snapshot and event records; `layout` the names a running host
leaves for others to find. Nothing here imports anything of mlxhost's outside this package.
"""
