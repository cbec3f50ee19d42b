"""What the constrained streams of `bench.constrained` carry, by the model's tool-call family, and
the check that the server really constrains them.

The family is the one mlx-lm infers from the model (`model_family`): for the demo model, the variant
--family built.

- json_tools, or a model whose template has no tool calls: `response_format` json_schema
  ENDLESS_SCHEMA, one JSON string of at least 100,000 characters.
- any other family: a forced call in that family's own syntax: `tools` holding ENDLESS_TOOL, whose
  one parameter is such a string, and a `tool_choice` naming it. The grammar masks every step (the
  family's call markers, the name, the parameter's element, then its text), as any forced call's
  does, and the string cannot close before 100,000 characters.

Either way the constrained streams run exactly as long as the free ones (which run to max_tokens:
the prompt was chosen for that, see `bench.raw`). An output that could end would end those streams
early, and the mixed run would then decode fewer rows per step than the free one: the totals would
no longer compare.

Some families cannot force that string: where the value is raw text kept from holding the
family's closing tags (qwen3_coder and the other XML families), llguidance runs out of fuel
checking a text of a few thousand characters or more against those tags, and the grammar is
refused (a 400). For those the call's string is split (`fit_request`): the tool has K string
parameters text_1..text_K, all required, each of at least L characters, the longest L of
PART_LENGTHS that the family's grammar takes (compiled first in this process, with the worker's
compiler on the model's tokenizer). K * L is at least max_tokens times the longest vocabulary
entry, so the call cannot end before max_tokens either: each token adds at most that many
characters. Every step is still masked the same way (the parameters' elements, then their text);
the settings record the tool as sent.

A forced call's tools change its prompt: the chat template lists the tool (a system turn, some
hundreds of tokens in the demo's templates) before the bench's prompt. So where calls are forced,
every free stream carries the same `tools` with `tool_choice` "none" (`free_fields`): the same
prompt, the output free and not read for calls. Otherwise the runs would compare prompt lengths,
not grammars: a batch decodes its rows padded to its longest prompt, and on the tiny model 4
streams with the listing and 4 without run at about 0.6 of 8 without, unconstrained.

`check` sends, before any timed run, what proves the server constrains: under ENDLESS_SCHEMA, a
text that opens the string and never closes it; for a forced call, a streamed request whose deltas
are that one call (named, no text) cut at max_tokens, then a whole call to a tool whose string is
short, which must come back in `tool_calls` as mlx-lm's parser for the family reads it; and a free
request with the listing, which must still run to max_tokens (the prompt was chosen without it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import httpx

from bench.streams import CHAT_PATH, chat_body, sse_chunks
from mlxhost.worker.engine.grammar import GrammarError, GrammarSpec, ToolSpec
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.tokenizer import longest_token

DEFAULT_FAMILY: Final = "json_tools"
CHECK_MAX_TOKENS = 16  # the ENDLESS_SCHEMA check's and the warm-up batch's, or max_tokens if lower
# A forced call's checks: enough tokens for the family's markers, the name and the parameter's
# element (about 50 tokens in the demo's byte-level vocabulary), and in the whole call's, its end.
CALL_CHECK_MAX_TOKENS = 128
SHORT_TEXT_CHARS = 8  # the whole call's string: at most this long, so that the call ends

ENDLESS_CHARS: Final = 100_000
ENDLESS_SCHEMA: Final = {"type": "string", "minLength": ENDLESS_CHARS}
PART_LENGTHS: Final = (2_000, 1_000, 500)  # a split string's parts, longest first (module docstring)
ENDLESS_FORMAT: Final = {
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "endless_string", "schema": ENDLESS_SCHEMA},
    }
}
ENDLESS_TOOL_NAME: Final = "write_text"


def text_tool(texts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """ENDLESS_TOOL_NAME in OpenAI's function form, its parameters `texts` (name to schema), all
    required."""
    return {
        "type": "function",
        "function": {
            "name": ENDLESS_TOOL_NAME,
            "description": "Write a text.",
            "parameters": {
                "type": "object",
                "properties": texts,
                "required": list(texts),
                "additionalProperties": False,
            },
        },
    }


def forced_call(tool: dict[str, Any]) -> dict[str, Any]:
    """The body fields that force a call to `tool`."""
    return {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": ENDLESS_TOOL_NAME}}}


ENDLESS_TOOL: Final = text_tool({"text": ENDLESS_SCHEMA})
ENDLESS_CALL: Final = forced_call(ENDLESS_TOOL)


class NotConstrained(Exception):
    """The server refused the constrained request, or answered as if it were not constrained."""


def model_family(tokenizer: Any) -> str | None:
    """The tool-call family mlx-lm gave a loaded tokenizer (its parser module's name, as
    mlxhost's tokenizer reads it), or None for a template with no tool calls."""
    parser = getattr(tokenizer, "tool_parser", None)
    if parser is None:
        return None
    named = (getattr(tokenizer, "init_kwargs", None) or {}).get("tool_parser_type")
    return str(named or str(getattr(parser, "__module__", "")).rsplit(".", 1)[-1])


@dataclass(frozen=True)
class ConstrainedRequest:
    """The fields a constrained stream adds to its body, and what they are."""

    family: str | None  # the model's tool-call family (None: no tool calls)
    fields: dict[str, Any]  # ENDLESS_FORMAT, or ENDLESS_CALL

    @property
    def forces_call(self) -> bool:
        return "tool_choice" in self.fields

    @property
    def free_fields(self) -> dict[str, Any] | None:
        """What a free stream adds to its body: the same tools, not to be called (a forced call)."""
        return {"tools": self.fields["tools"], "tool_choice": "none"} if self.forces_call else None

    def describe(self) -> str:
        if self.forces_call:
            texts = self.fields["tools"][0]["function"]["parameters"]["properties"]
            schemas = {json.dumps(schema) for schema in texts.values()}
            what = f"one parameter {schemas.pop()}" if len(texts) == 1 else f"{len(texts)} parameters"
            if len(texts) > 1:
                what += f", each {' or '.join(sorted(schemas))}, all required"
            return (
                f"a forced call in {self.family} syntax (tool_choice {ENDLESS_TOOL_NAME}, {what}: "
                "it cannot end before max_tokens; every free stream lists the same tool, tool_choice "
                '"none")'
            )
        schema = json.dumps(self.fields["response_format"]["json_schema"]["schema"])
        return f"response_format json_schema {schema}, which never lets its string close"

    async def check(self, client: httpx.AsyncClient, prompt: str, max_tokens: int) -> None:
        """Raises NotConstrained unless the server constrains this request (module docstring)."""
        if self.forces_call:
            await check_endless_call(client, prompt, self.fields)
            await check_whole_call(client, prompt)
            await check_free_with_tools(client, prompt, max_tokens, self.free_fields or {})
        else:
            await check_endless_string(client, prompt, min(max_tokens, CHECK_MAX_TOKENS))


def constrained_request(family: str | None) -> ConstrainedRequest:
    """What the constrained streams of a model of `family` carry, before `fit_request`."""
    if family is None or family == DEFAULT_FAMILY:
        return ConstrainedRequest(family, dict(ENDLESS_FORMAT))
    return ConstrainedRequest(family, dict(ENDLESS_CALL))


def endless_tools(needed_chars: int) -> list[dict[str, Any]]:
    """ENDLESS_TOOL, then the split tools of PART_LENGTHS whose parts add up to `needed_chars`."""
    tools = [ENDLESS_TOOL]
    for length in PART_LENGTHS:
        parts = -(-needed_chars // length)
        schema = {"type": "string", "minLength": length}
        tools.append(text_tool({f"text_{i + 1}": dict(schema) for i in range(parts)}))
    return tools


async def fit_request(
    request: ConstrainedRequest, tokenizer: Any, vocab: int, max_tokens: int
) -> ConstrainedRequest:
    """`request` with the first of `endless_tools` the family's grammar takes (a response_format
    as it is). Raises NotConstrained if none does."""
    if not request.forces_call or request.family is None:
        return request
    bound = longest_token(tokenizer)  # characters a token can add at most (None: unknown)
    needed = ENDLESS_CHARS if bound is None else min(ENDLESS_CHARS, max_tokens * bound)
    grammars = Grammars(tokenizer, vocab)
    refused: list[str] = []
    for tool in endless_tools(needed):
        function = tool["function"]
        spec = GrammarSpec(
            kind="tool_calls",
            param="tools",
            tools=(ToolSpec(function["name"], function["parameters"]),),
            parallel=False,  # a named tool_choice is one call
            format=request.family,
        )
        try:
            await grammars.compile(spec)
        except GrammarError as exc:
            refused.append(f"{len(function['parameters']['properties'])} part(s): {exc.message}")
            continue
        return ConstrainedRequest(request.family, forced_call(tool))
    raise NotConstrained(f"no endless call can be forced in {request.family}: {'; '.join(refused)}")


async def check_endless_string(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> None:
    """One request under ENDLESS_SCHEMA: its text must open the string and never close it."""
    body = {**chat_body(prompt, max_tokens, stream=False), **ENDLESS_FORMAT}
    response = await client.post(CHAT_PATH, json=body)
    if response.status_code != 200:
        raise NotConstrained(f"HTTP {response.status_code}: {response.text[:500]}")
    choice = response.json()["choices"][0]
    content = choice["message"].get("content") or ""
    if not content.startswith('"') or choice["finish_reason"] != "length":
        raise NotConstrained(
            f"the output does not follow the schema: {content[:80]!r}, finish_reason "
            f"{choice['finish_reason']!r}"
        )


async def check_endless_call(client: httpx.AsyncClient, prompt: str, fields: dict[str, Any]) -> None:
    """The endless call (`fields`) streamed, as the timed streams are: its deltas must be one call
    to ENDLESS_TOOL_NAME (the family's output parser read the name in the family's syntax), no
    text, cut at max_tokens."""
    body = {**chat_body(prompt, CALL_CHECK_MAX_TOKENS, stream=True), **fields}
    names: list[str] = []
    text, finish = "", None
    async with client.stream("POST", CHAT_PATH, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise NotConstrained(f"HTTP {response.status_code}: {response.text[:500]}")
        async for _, chunk in sse_chunks(response):
            for choice in (chunk or {}).get("choices", []):
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                names += [
                    c["function"]["name"] for c in delta.get("tool_calls") or [] if c["function"].get("name")
                ]
                finish = choice.get("finish_reason") or finish
    if names != [ENDLESS_TOOL_NAME] or text or finish != "length":
        raise NotConstrained(
            f"the streamed output is not one endless call: calls named {names}, text {text[:80]!r}, "
            f"finish_reason {finish!r}"
        )


async def check_whole_call(client: httpx.AsyncClient, prompt: str) -> None:
    """A call forced to a tool whose string is at most SHORT_TEXT_CHARS long: it ends, and must
    come back as that call, its arguments as mlx-lm's parser for the family reads them."""
    short = forced_call(text_tool({"text": {"type": "string", "maxLength": SHORT_TEXT_CHARS}}))
    body = {**chat_body(prompt, CALL_CHECK_MAX_TOKENS, stream=False), **short}
    response = await client.post(CHAT_PATH, json=body)
    if response.status_code != 200:
        raise NotConstrained(f"HTTP {response.status_code}: {response.text[:500]}")
    choice = response.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    arguments: Any = None
    if len(calls) == 1 and calls[0]["function"]["name"] == ENDLESS_TOOL_NAME:
        arguments = json.loads(calls[0]["function"]["arguments"])
    text = arguments.get("text") if isinstance(arguments, dict) else None
    if not (isinstance(text, str) and len(text) <= SHORT_TEXT_CHARS and list(arguments) == ["text"]):
        raise NotConstrained(
            f"the whole call does not read back: tool_calls {calls!r}, content "
            f"{(choice['message'].get('content') or '')[:80]!r}, finish_reason {choice['finish_reason']!r}"
        )


async def check_free_with_tools(
    client: httpx.AsyncClient, prompt: str, max_tokens: int, fields: dict[str, Any]
) -> None:
    """A free stream's request (`fields`: the tools, tool_choice "none"): it must run to
    max_tokens as the free streams without the listing do, or the runs would not compare."""
    body = {**chat_body(prompt, max_tokens, stream=False), **fields}
    response = await client.post(CHAT_PATH, json=body)
    if response.status_code != 200:
        raise NotConstrained(f"HTTP {response.status_code}: {response.text[:500]}")
    choice = response.json()["choices"][0]
    if choice["finish_reason"] != "length":
        raise NotConstrained(
            f"with the tools listed, the free reply ends before max_tokens (finish_reason "
            f"{choice['finish_reason']!r}): the free streams would not run as long as the constrained"
        )
