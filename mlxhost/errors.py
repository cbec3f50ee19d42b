"""Why `mlxhost serve` could not start: each is reported as one line, and the exit status is 1."""

from __future__ import annotations

__all__ = ["ModelNotFound", "NotDownloaded", "StartupError"]


class StartupError(Exception):
    """The host could not start: a port in use, an unreadable key file, a model that failed."""


class ModelNotFound(StartupError):
    """No model directory at the path given, and no copy in the local Hugging Face cache."""


class NotDownloaded(ModelNotFound):
    """A Hugging Face repo id that is not in the local cache: a host that may pull, pulls it."""

    def __init__(self, repo: str, message: str) -> None:
        super().__init__(message)
        self.repo = repo
