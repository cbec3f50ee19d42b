"""Why `mlxhost serve` could not start: each is reported as one line, and the exit status is 1."""

from __future__ import annotations

__all__ = ["ModelNotFound", "StartupError"]


class StartupError(Exception):
    """The host could not start: a port in use, an unreadable key file, a model that failed."""


class ModelNotFound(StartupError):
    """No model directory at the path given, and no copy in the local Hugging Face cache."""
