"""What both the parent and `--in-process` serve with: Hypercorn under anyio, the front door,
error responses, request bodies, shutdown on signals, and the machine-readable ready record."""
