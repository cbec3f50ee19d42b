"""mlxhost: serve local MLX language models over the OpenAI API, one supervised worker per model.

`host/` is the parent, `worker/` the model process, `wire/` the contracts between them and their
clients, `runtime/` the serving both share, `client/` the admin API's clients; `cli` is the command.
"""
