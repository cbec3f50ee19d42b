"""The request schemas, without a server: the large-body shape check agrees with the models."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from mlxhost.wire import openai as schemas
from mlxhost.wire import parsing


def _inner(annotation: object) -> list[object]:
    """Every type an annotation names, through Annotated, unions and lists."""
    found = [annotation]
    for arg in typing.get_args(annotation):
        found += _inner(arg)
    return found


def test_the_shape_check_knows_every_nested_object_and_list_field() -> None:
    nested, lists = {}, set()
    pending: list[type[BaseModel]] = [schemas.ChatCompletionRequest, schemas.CompletionRequest]
    while pending:
        model = pending.pop()
        for name, field in model.model_fields.items():
            types = _inner(field.annotation)
            objects = [t for t in types if isinstance(t, type) and issubclass(t, BaseModel)]
            # One object type is checked key by key; a tagged union of several (response_format)
            # is checked as bulk, and pydantic tells which member it meant.
            if len(objects) == 1:
                nested[(model, name)] = objects[0]
                pending.append(objects[0])
            if any(typing.get_origin(t) is list for t in types):
                lists.add(name)
    ours = {key: value for key, value in parsing._NESTED.items() if key[0].__module__ == schemas.__name__}
    assert nested == ours
    assert lists <= parsing._LISTS
