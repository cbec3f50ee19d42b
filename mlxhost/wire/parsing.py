"""How a request body becomes a request model: validated strictly, every problem a 400 that names
the field, and the field policy (fields.py) applied to what the model lacks.

Validation runs on the event loop, and pydantic builds an object per message or content part
(100,000 empty messages, a 3 MB body, take 0.2-0.4 s). So a large body is first parsed as plain
JSON (tens of milliseconds) and its lists are counted and its keys checked, and one that holds
more than any request can is refused before pydantic builds anything. Each dialect's module
(openai.py, responses.py, anthropic.py) teaches this one its models with `register_schema`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.fields import Skipped, known_field
from mlxhost.wire.inert import excerpt

__all__ = ["MAX_MESSAGES", "MAX_STOP", "SKIP_PASSES", "parse_body", "register_schema", "too_long"]

# Messages in one request, and content parts over all of them: more than a conversation has.
MAX_MESSAGES = 16_384
MAX_STOP = 4
SHAPE_CHECK_BYTES = 64 * 1024  # smaller bodies cost pydantic a few milliseconds at most
HEAD_BYTES = 512 * 1024  # room for MAX_MESSAGES of the smallest messages

T = TypeVar("T", bound=BaseModel)


# What `register_schema` taught: the field names (for an error's `param`), the objects a request
# is made of by the field that holds them, the fields that take a list, those that hold a JSON
# Schema, the maps whose keys name the entry an error is about, and each request model's dialect
# as the SDK field table names it (fields.py).
_FIELD_NAMES: set[str] = set()
_NESTED: dict[tuple[type[BaseModel], str], type[BaseModel]] = {}
_LISTS: set[str] = set()
BULK_ITEMS = 1024  # in an array or object where the schema has none: past this, refused unread
# A JSON Schema (a tool's parameters, a response format) is free-form, and a real agent's can be
# large: it gets a budget of its own.
SCHEMA_ITEMS = 16_384
_SCHEMAS: set[str] = set()
_KEYED: set[str] = set()
_DIALECTS: dict[type[BaseModel], str] = {}
# Lists whose items may be lists of token ids: as long as the model's context, not BULK_ITEMS.
_TOKEN_LISTS: set[str] = set()
# How many times, at most, a body is validated again without the fields it was refused for. The
# first pass takes them out where pydantic named them; a list stops at its first bad item, so a
# second pass may find more, and from then on a name is taken out wherever its holder is (one
# pass, whatever the body's length: a 4 MB body costs tenths of a second to validate, on the
# event loop every stream of the worker shares).
SKIP_PASSES = 3


def register_schema(
    models: Iterable[type[BaseModel]],
    nested: Mapping[tuple[type[BaseModel], str], type[BaseModel]] | None = None,
    lists: Iterable[str] = (),
    schemas: Iterable[str] = (),
    dialects: Mapping[type[BaseModel], str] | None = None,
    keyed: Iterable[str] = (),
    token_lists: Iterable[str] = (),
) -> None:
    """Teach `parse_body` a dialect's bodies: their field names (for the `param` of an error),
    which fields hold which objects, which take lists, which hold free-form JSON Schemas (with
    their larger budget), the dialect each request model is in, and the maps whose keys name
    the entry an error is about, and the lists whose items may be token-id lists. Called once,
    where those models are defined."""
    _DIALECTS.update(dialects or {})
    for model in models:
        _FIELD_NAMES.update(model.model_fields)
        _FIELD_NAMES.update(f.alias for f in model.model_fields.values() if f.alias)
    _NESTED.update(nested or {})
    _LISTS.update(lists)
    _SCHEMAS.update(schemas)
    _KEYED.update(keyed)
    _TOKEN_LISTS.update(token_lists)


def parse_body(model: type[T], body: bytes, context: int | None = None, skipped: Skipped | None = None) -> T:
    """Validate a JSON body, turning the first problem into a 400 that names the field.

    `context`: the model's context in tokens, which a prompt must be shorter than; each message,
    and each token id, is at least one token. `skipped` collects the fields left out.
    """
    dialect = _DIALECTS.get(model, "")
    skipped = skipped if skipped is not None else Skipped()
    if len(body) > SHAPE_CHECK_BYTES:
        _check_shape(model, body, context, dialect)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        error = exc
    # Only a body that carries a field the model lacks gets here again: the common case costs
    # one validation, as it did before the policy.
    data: Any = None
    for attempt in range(SKIP_PASSES):
        extra = _extra_fields(error, dialect)
        if extra is None:
            raise _invalid_request(error) from None
        if isinstance(extra, InvalidRequest):
            raise extra from None
        if data is None:
            data = from_json(body)
        for loc, parent in extra:
            if attempt == 0:
                _remove(data, loc)
            else:
                _remove_everywhere(data, parent, loc[-1])
            holder = _param(loc[:-1])
            skipped.add(f"{holder}.{loc[-1]}" if holder else str(loc[-1]))
        try:
            return model.model_validate_json(_dumps(data))
        except ValidationError as exc:
            error = exc
    raise _invalid_request(error) from None


def _extra_fields(
    exc: ValidationError, dialect: str
) -> list[tuple[tuple[Any, ...], str]] | InvalidRequest | None:
    """The places of the fields `exc` refused as unknown to the model when every one of them is
    known to an SDK (each with its parent field's name); the 400 for the first that no SDK
    knows; None when there were none."""
    found = []
    for error in exc.errors(include_url=False):
        if error["type"] != "extra_forbidden":
            continue
        loc = error["loc"]
        parent = _parent(loc)
        if not dialect or not isinstance(loc[-1], str) or not known_field(dialect, parent, loc[-1]):
            holder = _param(loc[:-1])
            name = excerpt(loc[-1])
            return _unsupported(f"{holder}.{name}" if holder else name)
        found.append((loc, parent))
    return found or None


def _parent(loc: tuple[Any, ...]) -> str:
    """The name of the field whose object holds the last key of `loc` ("" for the body)."""
    for part in reversed(loc[:-1]):
        if isinstance(part, str) and part in _FIELD_NAMES:
            return part
    return ""


def _remove(data: Any, loc: tuple[Any, ...]) -> None:
    """Delete the key at `loc` from the parsed body, stepping over union members' tags."""
    node = data
    for part in loc[:-1]:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
    if isinstance(node, dict):
        node.pop(loc[-1], None)


def _remove_everywhere(data: Any, parent: str, name: str) -> None:
    """Delete `name` from every object held by a field called `parent` (the body, for "")."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        holder, node = pending.pop()
        if isinstance(node, dict):
            if holder == parent:
                node.pop(name, None)
            pending.extend(node.items())
        elif isinstance(node, list):
            pending.extend((holder, item) for item in node)


def _dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def too_long(param: str, size: str, context: int) -> InvalidRequest:
    """A prompt that cannot fit, told before it is encoded: `size` says how we know."""
    return InvalidRequest(
        f"{param}: {size}, and the model's context is {context} tokens",
        param=param,
        code="context_length_exceeded",
    )


def _check_shape(model: type[BaseModel], body: bytes, context: int | None, dialect: str) -> None:
    """Refuse a body whose lists are longer, or whose objects have keys, no request can have."""
    # Its head first: a list too long or a key unknown there is so in the whole body, and a body
    # made to stall a server (100,000 tiny messages) shows it in its first few thousand items.
    # That costs milliseconds; the whole body, tens of them.
    if len(body) > HEAD_BYTES and isinstance(head := _parse(body[:HEAD_BYTES], partial=True), dict):
        _Shape(context, dialect, partial=True).check_object(model, head, "", "")
    if isinstance(data := _parse(body), dict):
        _Shape(context, dialect).check_object(model, data, "", "")


def _parse(body: bytes, partial: bool = False) -> object:
    # The collector would run over and over while a body of a million small arrays is built
    # (0.37 s instead of 0.075 s); nothing else can allocate meanwhile, the parser holds the GIL.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return from_json(body, allow_partial=partial)
    except ValueError:
        return None  # pydantic says what is wrong with it
    finally:
        if collecting:
            gc.enable()


class _Shape:
    def __init__(self, context: int | None, dialect: str, partial: bool = False) -> None:
        self.context = context
        self.dialect = dialect
        self.parts = MAX_MESSAGES  # content parts left, over all messages
        self.more = " or more" if partial else ""  # the head of a body has counts, not totals

    def check_object(self, model: type[BaseModel], data: dict[str, Any], path: str, parent: str) -> None:
        for key, value in data.items():
            param = f"{path}.{key}" if path else key
            if key not in model.model_fields:
                if not (self.dialect and known_field(self.dialect, parent, key)):
                    raise _unsupported(f"{path}.{excerpt(key)}" if path else excerpt(key))
                # Skipped (parse_body takes it out), but no larger than any value may be.
                if isinstance(value, (list, dict)):
                    _check_bulk(value, param, BULK_ITEMS)
                continue
            nested = _NESTED.get((model, key))
            if isinstance(value, list) and key in _LISTS:
                self.check_length(key, param, len(value))
                for i, item in enumerate(value):
                    if isinstance(item, dict) and nested is not None:
                        self.check_object(nested, item, f"{param}[{i}]", key)
                    elif isinstance(item, (list, dict)) and key not in _TOKEN_LISTS:
                        _check_bulk(item, f"{param}[{i}]", BULK_ITEMS)
            elif isinstance(value, dict) and nested is not None:
                self.check_object(nested, value, param, key)
            elif isinstance(value, (list, dict)):
                _check_bulk(value, param, SCHEMA_ITEMS if key in _SCHEMAS else BULK_ITEMS)

    def check_length(self, key: str, param: str, count: int) -> None:
        context, counted = self.context, f"{count}{self.more}"
        if key in ("messages", "prompt") and context is not None and count >= context:
            what = "messages" if key == "messages" else "token ids"
            raise too_long(param, f"{counted} {what} are at least {count} tokens", context)
        if key == "messages" and count > MAX_MESSAGES:
            raise InvalidRequest(f"{param}: {counted} messages, over the limit of {MAX_MESSAGES}", param=param)
        if key == "content":
            self.parts -= count
            if self.parts < 0:
                raise InvalidRequest(f"{param}: more than {MAX_MESSAGES} content parts in all", param=param)
        if key == "stop" and count > MAX_STOP:
            raise InvalidRequest(f"{param}: at most {MAX_STOP} stop sequences, not {counted}", param=param)


def _check_bulk(value: list[Any] | dict[str, Any], param: str, budget: int) -> None:
    """A JSON array or object where the schema has none: refused at once if large, however deep."""
    pending = [value]
    while pending:
        item = pending.pop()
        budget -= len(item) + 1
        if budget < 0:
            raise InvalidRequest(f"{param}: not a valid value (an array or object this large)", param=param)
        children = item.values() if isinstance(item, dict) else item
        pending.extend(c for c in children if isinstance(c, (list, dict)))


def _unsupported(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"unsupported parameter '{param}': mlxhost does not implement it",
        param=param,
        code="unsupported_parameter",
    )


def _invalid_request(exc: ValidationError) -> InvalidRequest:
    errors = exc.errors(include_url=False)
    # Of a union's per-member errors, the deepest one is about the member the client meant.
    first = max(
        (e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]), key=lambda e: len(e["loc"])
    )
    if first["type"] == "json_invalid":
        return InvalidRequest(f"the body is not valid JSON: {first['msg']}", code="invalid_json")
    if first["type"] == "model_type" and not first["loc"]:
        return InvalidRequest("the body must be a JSON object", code="invalid_json")
    param = _param(first["loc"])
    if first["type"] == "extra_forbidden":
        parent = _param(first["loc"][:-1])
        name = excerpt(first["loc"][-1])  # the client's own key: any length, any characters
        return _unsupported(f"{parent}.{name}" if parent else name)
    if first["type"] == "missing":
        return InvalidRequest(f"missing required parameter '{param}'", param=param, code="missing_parameter")
    # A union reports one error per member; say all of them for the same field.
    messages = list(
        dict.fromkeys(e["msg"].removeprefix("Value error, ") for e in errors if _param(e["loc"]) == param)
    )
    return InvalidRequest(f"{param}: {'; or '.join(messages)}", param=param)


def _param(loc: tuple[Any, ...]) -> str:
    """('messages', 0, 'str', 'content') -> 'messages[0].content', dropping union member tags."""
    out, last = "", None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif (part in _FIELD_NAMES and part != last) or last in _KEYED:
            # A tagged union's tag may be its field's name; a map's keys are the client's own.
            out += f".{excerpt(part)}" if out else part
        last = part
    return out
