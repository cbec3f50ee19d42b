"""The one request pipeline all three dialects share: a conversation in, a prompt and its rules out.

Chat Completions, Responses and Messages each translate their body into a `Conversation`
(template-ready messages, tools, the tool choice, an output format, the thinking switch) and
`prepare` turns it into what the engine runs: the prompt ids, the grammar that constrains the
output (if any), and how to read the output back (reasoning, answer, tool calls). Each dialect's
writer then turns that output into its own wire format.

Rules that hold whatever the dialect:
- Tools offered to a model whose chat template has no tool calling are refused (400), never
  silently dropped.
- A required or named tool choice is forced by a grammar where the model writes its calls as JSON
  between tags (Hermes/Qwen, mlx-lm's `json_tools`); a JSON response format always is. The
  grammar applies from the first token, so a prompt that would open a think block has it closed
  (the template's thinking switch) when the output is constrained.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.inert import excerpt
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.generation import ThinkingBudget
from mlxhost.worker.engine.grammar import GrammarError, GrammarSpec, ToolSpec, closed
from mlxhost.worker.engine.grammar_mask import Grammar
from mlxhost.worker.engine.output import OutputParser
from mlxhost.worker.engine.satisfiable import why_unsatisfiable

__all__ = [
    "EFFORT_BUDGETS",
    "Conversation",
    "OutputFormat",
    "Prepared",
    "Tool",
    "ToolChoice",
    "effort_budget",
    "merge_system_turns",
    "prepare",
]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None  # a JSON Schema of its arguments
    strict: bool = False  # OpenAI's strict mode: objects allow no properties they do not list
    param: str | None = None  # the request field of its parameters, for errors

    def template_form(self) -> dict[str, Any]:
        """As chat templates expect a tool: OpenAI's function form."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters) if self.parameters is not None else {"type": "object"}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["auto", "none", "required", "named"] = "auto"
    name: str | None = None  # the function, when named


@dataclass(frozen=True)
class OutputFormat:
    kind: Literal["json_object", "json_schema"]
    param: str  # the request field that asked for it, for errors
    schema: Mapping[str, Any] | None = None
    strict: bool = False  # as Tool.strict


@dataclass
class Conversation:
    """A request, dialect aside. `messages` are as chat templates take them (role, content,
    tool_calls with `function.arguments` an object, tool_call_id, reasoning_content)."""

    messages: list[dict[str, Any]]
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True
    output_format: OutputFormat | None = None
    thinking: bool | None = None  # None: as the template has it
    thinking_budget: int | None = None  # the most reasoning tokens; None: no bound
    template_args: dict[str, Any] = field(default_factory=dict)  # e.g. reasoning_effort
    # The request's field names, for errors.
    messages_param: str = "messages"
    tools_param: str = "tools"
    tool_choice_param: str = "tool_choice"


@dataclass(frozen=True)
class Prepared:
    prompt: list[int]
    grammar: Grammar | None
    tools: tuple[Tool, ...]
    read_calls: bool  # tool calls in the output are read as calls (not text)
    thinking: bool  # the output starts inside the model's reasoning
    thinking_budget: ThinkingBudget | None = None
    forced: bool = False  # a grammar holds the output to tool calls: none of it is text

    def parser(self, engine: Engine) -> OutputParser:
        """A reader of one choice's output."""
        tokenizer = engine.tokenizer
        parse = tokenizer.tool_parser if self.read_calls else None
        tools = [t.template_form() for t in self.tools]
        return OutputParser(
            tokenizer.markers,
            parse,
            tools,
            reasoning=self.thinking,
            fmt=tokenizer.tool_format,
            forced=self.forced,
        )


async def prepare(engine: Engine, conversation: Conversation) -> Prepared:
    """Render the prompt and compile its grammar; a 400 naming the field for what cannot be done."""
    tokenizer = engine.tokenizer
    tools, choice = conversation.tools, conversation.tool_choice
    if tools and not tokenizer.has_tool_calling and choice.mode != "none":
        raise InvalidRequest(
            f"{conversation.tools_param}: this model's chat template has no tool calling, so it cannot "
            "be offered tools",
            param=conversation.tools_param,
            code="tools_unsupported",
        )
    if choice.mode in ("required", "named") and not tools:
        raise InvalidRequest(
            f"{conversation.tool_choice_param}: a tool is required but no tools were given",
            param=conversation.tool_choice_param,
        )
    if choice.mode == "named" and choice.name not in {t.name for t in tools}:
        raise InvalidRequest(
            f"{conversation.tool_choice_param}: no tool is named '{excerpt(choice.name)}'",
            param=conversation.tool_choice_param,
        )
    if choice.mode in ("required", "named") and tools and tokenizer.tool_format is None:
        raise InvalidRequest(
            f"{conversation.tool_choice_param}: this model writes tool calls in a form "
            f"({tokenizer.tool_parser_type}) that a forced call cannot be enforced in; use 'auto'",
            param=conversation.tool_choice_param,
            code="tool_choice_unsupported",
        )
    spec = _grammar_spec(engine, conversation)
    if spec is None or spec.kind != "tool_calls":  # a forced call's grammar checks its tools itself
        _refuse_unsatisfiable_tools(tools)
    template_args = dict(conversation.template_args)
    if conversation.thinking is not None:
        template_args["enable_thinking"] = conversation.thinking
    # A tool_choice of "none" keeps the tools in the prompt, as OpenAI does; calls are not read.
    offered = tools if tokenizer.has_tool_calling else ()
    tools_form = [t.template_form() for t in offered] or None
    try:
        try:
            rendered = await tokenizer.render_chat(conversation.messages, tools_form, template_args)
        except Exception as exc:
            if not (type(exc).__module__.startswith("jinja2") and _system_later(conversation.messages)):
                raise
            # Most templates take a system turn only first: a later one (an agent's reminder)
            # joins the user turn before it instead.
            conversation.messages = merge_system_turns(conversation.messages)
            rendered = await tokenizer.render_chat(conversation.messages, tools_form, template_args)
        if spec is not None and rendered.thinking:
            # The grammar holds from the first token: no room for the think block this prompt
            # opens, so it is closed. Only then: a closed, empty block is not rendered again in
            # the history's assistant turn, and the next turn could not reuse this prompt's cache.
            args = {**template_args, "enable_thinking": False}
            rendered = await tokenizer.render_chat(conversation.messages, tools_form, args)
    except Exception as exc:
        # The template's own refusal (an unknown role, a turn order it does not allow) is the
        # request's fault, and says what is wrong in its message.
        if type(exc).__module__.startswith("jinja2"):
            raise InvalidRequest(
                f"{conversation.messages_param}: the model's chat template refused it: {excerpt(exc, 300)}",
                param=conversation.messages_param,
            ) from None
        raise
    grammar = None
    if spec is not None:
        try:
            grammar = await engine.grammars.compile(spec)
        except GrammarError as exc:
            raise InvalidRequest(
                f"{exc.param}: {exc.message}", param=exc.param, code="invalid_schema"
            ) from None
    budget = None
    if conversation.thinking_budget is not None and tokenizer.think_ids is not None and grammar is None:
        start, end = tokenizer.think_ids
        budget = ThinkingBudget(conversation.thinking_budget, start, end, rendered.thinking)
    return Prepared(
        prompt=rendered.ids,
        grammar=grammar,
        tools=tools,
        read_calls=bool(tools) and choice.mode != "none" and tokenizer.tool_parser is not None,
        thinking=rendered.thinking,
        thinking_budget=budget,
        forced=spec is not None and spec.kind == "tool_calls",
    )


# How many tokens of reasoning each effort allows (a request's own budget, where its dialect has
# one, wins): an agent asks "high" and expects an answer, not a model thinking until max_tokens.
EFFORT_BUDGETS: Mapping[str, int | None] = {
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": 32768,
    "max": None,
}


def effort_budget(effort: str | None) -> int | None:
    """The reasoning budget of an effort; None (no bound) for none given or "max"."""
    return None if effort is None else EFFORT_BUDGETS.get(effort)


def _refuse_unsatisfiable_tools(tools: Sequence[Tool]) -> None:
    """A tool no arguments satisfy is refused whether or not a call is forced: the model could
    only ever call it wrongly. Linear in the schemas, so cheap for an agent's twenty tools."""
    for tool in tools:
        if tool.parameters is not None and (why := why_unsatisfiable(tool.parameters)) is not None:
            param = tool.param or "tools"
            why = why.replace("the schema", "its parameters")
            raise InvalidRequest(
                f"{param}: tool '{excerpt(tool.name)}': {why}", param=param, code="invalid_schema"
            )


def _grammar_spec(engine: Engine, conversation: Conversation) -> GrammarSpec | None:
    tokenizer = engine.tokenizer
    choice = conversation.tool_choice
    if choice.mode in ("required", "named") and tokenizer.tool_parser_type is not None:
        tools = conversation.tools
        if choice.mode == "named":
            tools = tuple(t for t in tools if t.name == choice.name)
        return GrammarSpec(
            kind="tool_calls",
            param=conversation.tools_param,
            tools=tuple(
                ToolSpec(t.name, closed(t.parameters) if t.strict else t.parameters, t.param) for t in tools
            ),
            # A named function is one call, as OpenAI's and vLLM's named choice is, whatever
            # parallel_tool_calls says; `required` may make several when they are allowed.
            parallel=conversation.parallel_tool_calls and choice.mode != "named",
            format=tokenizer.tool_parser_type,
        )
    fmt = conversation.output_format
    if fmt is None or choice.mode in ("required", "named"):
        return None
    if fmt.kind == "json_object":
        return GrammarSpec(kind="json_object", param=fmt.param)
    schema = closed(fmt.schema) if fmt.strict else fmt.schema
    return GrammarSpec(kind="json_schema", param=fmt.param, schema=schema)


def _system_later(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(m["role"] == "system" for m in messages[1:])


def merge_system_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with every system turn after the first joined to the user turn before it
    (or, with none before it, to the next one): the prefix up to that turn is unchanged, so the
    prompt cache still serves it. A system turn with no user turn to join becomes one."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # system texts waiting for a user turn
    for i, message in enumerate(messages):
        if message["role"] != "system" or i == 0:
            if message["role"] == "user" and pending:
                message = {**message, "content": "\n\n".join([*pending, message["content"]])}
                pending = []
            out.append(message)
            continue
        before = next((m for m in reversed(out) if m["role"] == "user"), None)
        if before is not None and before is out[-1]:
            out[-1] = {**before, "content": f"{before['content']}\n\n{message['content']}"}
        else:
            pending.append(message["content"])
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def template_arguments(arguments: str) -> Any:
    """A call's arguments as templates want them: the object, when the JSON text parses to one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def tool_call_message(calls: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """(id, name, arguments JSON) -> an assistant message's `tool_calls`, as templates take them."""
    return [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": template_arguments(args)}}
        for call_id, name, args in calls
    ]
