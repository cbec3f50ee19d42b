"""route(model, task): which configured model serves a request, the one place that decides it.

A request names a model (an id, an exact alias, or a name one of the patterns takes) or none; it
is for one task (generate, embed, rerank). The named model must serve the task. A request that
names none, or a name the host does not know and gives the default for, goes to the first model
that serves its task, so that /v1/embeddings answers beside a chat model without naming one.
"""

from __future__ import annotations

from typing import Protocol

from mlxhost.catalog.sources import model_kind
from mlxhost.catalog.spec import ModelSpec

__all__ = ["Names", "TaskRefused", "route"]


class Names(Protocol):
    """The host's names for its models (the pool): `resolve` raises for a name it will not take."""

    @property
    def specs(self) -> tuple[ModelSpec, ...]: ...

    def resolve(self, name: object) -> ModelSpec: ...

    def resolve_exact(self, name: str) -> ModelSpec | None: ...


class TaskRefused(Exception):
    """The named model does not serve the request's task."""

    def __init__(self, model: str, task: str, tasks: tuple[str, ...]) -> None:
        super().__init__(f"the model '{model}' does not serve {task}")
        self.model = model
        self.task = task
        self.tasks = tasks


def route(names: Names, model: object, task: str) -> ModelSpec:
    """The model a request for `task` naming `model` goes to; TaskRefused, or what `resolve` raises."""
    spec = names.resolve(model)
    tasks = model_kind(spec).tasks
    if task in tasks:
        return spec
    named = isinstance(model, str) and (names.resolve_exact(model) is not None or spec.matches(model))
    if not named:
        serving = next((s for s in names.specs if task in model_kind(s).tasks), None)
        if serving is not None:
            return serving
    raise TaskRefused(spec.id, task, tasks)
