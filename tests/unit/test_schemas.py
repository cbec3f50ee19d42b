"""The request schemas, without a server: the large-body shape check agrees with the models."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from mlxhost.wire import openai as schemas


def _inner(annotation: object) -> list[object]:
    """Every type an annotation names, through Annotated, unions and lists."""
    found = [annotation]
    for arg in typing.get_args(annotation):
        found += _inner(arg)
    return found


def test_the_shape_check_knows_every_nested_object_and_list_field() -> None:
    nested, lists = {}, set()
    for model in (schemas.ChatCompletionRequest, schemas.CompletionRequest, schemas.ChatMessage):
        for name, field in model.model_fields.items():
            types = _inner(field.annotation)
            objects = [t for t in types if isinstance(t, type) and issubclass(t, BaseModel)]
            if objects:
                nested[(model, name)] = objects[0]
            if any(typing.get_origin(t) is list for t in types):
                lists.add(name)
    assert nested == schemas._NESTED
    assert lists == schemas._LISTS
