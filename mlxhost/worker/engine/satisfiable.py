"""Whether a JSON schema admits any finite value, told before a model is asked to write one.

llguidance refuses a schema whose keywords contradict each other where they stand (a minimum over
its maximum, a required property that is `false`), but not one whose references require without
end: `{"$ref": "#"}`, two definitions that refer to each other, an object whose required property
is that object again. Constrained by such a schema a model either stops at once (`''`) or writes
`{"child": {"child": ...` until max_tokens; neither is an answer.

`why_unsatisfiable` decides it as a context-free grammar's emptiness is decided: a schema has a
value when the schemas its values must contain have values. Every schema starts as having none,
and the ones shown to have one are propagated up (each AND waits for all its parts, each OR for
one) until nothing changes, in time linear in the schema's size. Where the schema is unclear (a
reference it does not resolve, a keyword this check does not read) it is taken to have values:
the check never refuses a schema that has one; llguidance still refuses what it cannot enforce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

__all__ = ["why_unsatisfiable"]

_UNRESOLVED: Final = object()


def why_unsatisfiable(schema: Any) -> str | None:
    """Why no finite JSON value satisfies `schema`, or None when one may (see the module)."""
    circuit = _Circuit(schema)
    root = circuit.gate_of(schema)
    circuit.build()
    if circuit.holds(root):
        return None
    ref = circuit.culprit(root)
    if ref is None:
        return "no JSON value satisfies the schema"
    return (
        "no JSON value satisfies the schema: what it requires refers back to itself without end "
        f"(through '$ref': {ref!r})"
    )


class _Circuit:
    """AND/OR gates over a schema: a gate holds when the schema (or part) it stands for has a value.

    A gate holds once `pending` of its inputs have: all of them for an AND, one for an OR. An AND
    with no inputs holds from the start; an OR with none never does.
    """

    def __init__(self, schema: Any) -> None:
        self._root = schema
        # A "$id" below the root moves what "#" means beneath it: references are not followed.
        self._follow_refs = not _has_nested_ids(schema)
        self._pending: list[int] = []
        self._inputs: list[list[int]] = []
        self._outputs: list[list[int]] = []
        self._gates: dict[int, int] = {}  # id(schema object) -> its gate
        self._todo: list[tuple[Mapping[str, Any], int]] = []
        self._labels: dict[int, str] = {}  # a reference's target gate -> the reference
        self._anchors: dict[str, Any] | None = None  # "$anchor" name -> its schema, when first needed
        self._held: list[bool] = []
        self.true = self._gate(is_or=False)
        self.false = self._gate(is_or=True)

    def _gate(self, is_or: bool) -> int:
        self._pending.append(1 if is_or else 0)
        self._inputs.append([])
        self._outputs.append([])
        return len(self._pending) - 1

    def _wire(self, gate: int, input_: int, is_or: bool = False) -> None:
        self._inputs[gate].append(input_)
        self._outputs[input_].append(gate)
        if not is_or:
            self._pending[gate] += 1

    def _any_of(self, inputs: list[int]) -> int:
        gate = self._gate(is_or=True)
        for input_ in inputs:
            self._wire(gate, input_, is_or=True)
        return gate

    def gate_of(self, schema: Any) -> int:
        """The gate of a (sub)schema; its parts are wired in `build`, without recursion."""
        if schema is False:
            return self.false
        if not isinstance(schema, Mapping):
            return self.true  # `true`, or not a schema at all (llguidance says so)
        gate = self._gates.get(id(schema))
        if gate is None:
            gate = self._gates[id(schema)] = self._gate(is_or=False)
            self._todo.append((schema, gate))
        return gate

    def build(self) -> None:
        while self._todo:
            schema, gate = self._todo.pop()
            self._wire_schema(schema, gate)
        self._propagate()

    def _wire_schema(self, schema: Mapping[str, Any], gate: int) -> None:
        ref = schema.get("$ref")
        if isinstance(ref, str) and self._follow_refs:
            target = self._resolve(ref)
            if target is not _UNRESOLVED:
                input_ = self.gate_of(target)
                self._labels.setdefault(input_, ref)
                self._wire(gate, input_)
        for part in _list(schema.get("allOf")):
            self._wire(gate, self.gate_of(part))
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                self._wire(gate, self._any_of([self.gate_of(s) for s in schema[key]]))
        types = schema.get("type")
        if isinstance(types, str):
            types = [types]
        if isinstance(types, list) and types:  # untyped: a string will do, whatever the rest says
            options = []
            for kind in types:
                if kind == "object":
                    options.append(self._object(schema))
                elif kind == "array":
                    options.append(self._array(schema))
                else:
                    options.append(self.true)
            self._wire(gate, self._any_of(options))

    def _object(self, schema: Mapping[str, Any]) -> int:
        gate = self._gate(is_or=False)
        properties = _mapping(schema.get("properties"))
        others: int | None = None  # the gate of a property `properties` does not name
        for name in dict.fromkeys(n for n in _list(schema.get("required")) if isinstance(n, str)):
            if name in properties:
                self._wire(gate, self.gate_of(properties[name]))
                continue
            if others is None:
                patterns = _mapping(schema.get("patternProperties")).values()
                extra = schema.get("additionalProperties", True)
                others = self._any_of([self.gate_of(extra), *(self.gate_of(p) for p in patterns)])
            self._wire(gate, others)
        return gate

    def _array(self, schema: Mapping[str, Any]) -> int:
        gate = self._gate(is_or=False)
        least = schema.get("minItems", 0)
        least = least if isinstance(least, int) and not isinstance(least, bool) else 0
        items = schema.get("items", True)
        prefix = schema.get("prefixItems")
        if isinstance(items, list):  # draft 4's tuples
            prefix, items = items, schema.get("additionalItems", True)
        prefix = _list(prefix)
        for part in prefix[:least]:
            self._wire(gate, self.gate_of(part))
        if least > len(prefix):
            self._wire(gate, self.gate_of(items))
        if "contains" in schema and schema.get("minContains", 1) != 0:
            self._wire(gate, self.gate_of(schema["contains"]))
        return gate

    def _resolve(self, ref: str) -> Any:
        """The schema a local reference ("#", "#/$defs/a", "#anchor") points to; _UNRESOLVED for
        others (another document: llguidance resolves or refuses it)."""
        if ref == "#":
            return self._root
        if not ref.startswith("#"):
            return _UNRESOLVED
        if not ref.startswith("#/"):
            if self._anchors is None:
                self._anchors = _anchors(self._root)
            return self._anchors.get(ref[1:], _UNRESOLVED)
        node = self._root
        for token in ref[2:].split("/"):
            token = unquote(token).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return _UNRESOLVED
        return node

    def _propagate(self) -> None:
        self._held = [False] * len(self._pending)
        ready = [g for g, pending in enumerate(self._pending) if pending == 0]
        pending = list(self._pending)
        while ready:
            gate = ready.pop()
            if self._held[gate]:
                continue
            self._held[gate] = True
            for output in self._outputs[gate]:
                pending[output] -= 1
                if pending[output] == 0:
                    ready.append(output)

    def holds(self, gate: int) -> bool:
        return self._held[gate]

    def culprit(self, root: int) -> str | None:
        """The first reference, depth first from `root`, into a schema that has no value."""
        seen, stack = {root}, [root]
        while stack:
            gate = stack.pop()
            for input_ in reversed(self._inputs[gate]):
                if self._held[input_] or input_ in seen:
                    continue
                if input_ in self._labels:
                    return self._labels[input_]
                seen.add(input_)
                stack.append(input_)
        return self._labels.get(root)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _anchors(schema: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("$anchor"), str):
                found.setdefault(node["$anchor"], node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _has_nested_ids(schema: Any) -> bool:
    stack = [v for k, v in schema.items() if k != "$id"] if isinstance(schema, Mapping) else []
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if "$id" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
