"""The front door: who may call the host at all, checked before any route runs.

(being written; see CACHE_SCOPE_HEADER below for the contract with the worker)
"""

from __future__ import annotations

__all__ = ["CACHE_SCOPE_HEADER"]

# Set by the front door on every request it lets through, replacing any a client sent: an opaque
# name of the caller (a hash of its API key; empty when the host has no keys). The worker keeps
# prompt-cache entries apart by it, so no caller can observe another's cached prefix.
CACHE_SCOPE_HEADER = "x-mlxhost-cache-scope"
