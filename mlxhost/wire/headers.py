"""The headers mlxhost adds between the front door, the parent and the worker."""

from __future__ import annotations

__all__ = ["CACHE_SCOPE_HEADER", "INTERNAL_PREFIX", "SESSION_HEADER"]

# Every header mlxhost uses between its own processes starts so; the front door drops any a
# client sent.
INTERNAL_PREFIX = "x-mlxhost-"

# The session a request is in the parent: set by the parent on the request to the worker (which
# tags its progress reports with it) and on the response to the client.
SESSION_HEADER = "x-mlxhost-session"

# Set by the front door on every request it lets through, replacing any a client sent: an opaque
# name of the caller (a hash of its API key; absent when the caller presented none). The worker
# keeps prompt-cache entries apart by it, so no caller can observe another's cached prefix.
CACHE_SCOPE_HEADER = "x-mlxhost-cache-scope"
