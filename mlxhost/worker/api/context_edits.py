"""Anthropic's context editing (`context_management.edits`), made on a conversation before it renders.

    clear_thinking_20251015     the thinking of all but the last `keep` assistant turns is dropped
    clear_tool_uses_20250919    once the prompt passes `trigger`, all but the last `keep` tool
                                results (and, if asked, their calls' inputs) become a short note

A token trigger is checked against the rendered prompt (`token_trigger`, by the route that renders
it); a count of tool uses, here. An edit mlxhost does not make (compaction, which needs a model
call of its own) is skipped and named; one no SDK knows is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlxhost.wire.anthropic import ClearThinking, ClearToolUses, CountTokensRequest, ToolUses, UnsupportedEdit
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.fields import Skipped, known_type
from mlxhost.wire.inert import excerpt

__all__ = ["CLEARED_RESULT", "apply_edits", "clear_tool_uses", "token_trigger"]

# What a cleared tool result says instead, so the model knows something was there.
CLEARED_RESULT = "[tool result cleared to save context]"
DEFAULT_KEEP_TOOL_USES = 3  # Anthropic's defaults for clear_tool_uses_20250919
DEFAULT_TRIGGER_TOKENS = 100_000


def apply_edits(
    messages: list[dict[str, Any]], edits: Sequence[Any], skipped: Skipped, names: dict[str, str]
) -> None:
    """Anthropic's context editing, made on the conversation before it renders. The token
    trigger of clear_tool_uses is checked against the rendered prompt, in `_prepare`."""
    for edit in edits:
        if isinstance(edit, ClearThinking):
            keep = 1 if edit.keep is None else None if edit.keep == "all" else edit.keep.value
            if keep is not None:
                turns = [m for m in messages if m["role"] == "assistant" and "reasoning_content" in m]
                for message in turns[: max(0, len(turns) - keep)]:
                    del message["reasoning_content"]
        elif isinstance(edit, ClearToolUses):
            if isinstance(edit.trigger, ToolUses):
                results = sum(1 for m in messages if m["role"] == "tool")
                if results > edit.trigger.value:
                    clear_tool_uses(messages, edit)
        elif isinstance(edit, UnsupportedEdit):
            if not known_type("messages", "edits", edit.type):
                raise InvalidRequest(
                    f"context_management.edits: '{excerpt(edit.type)}' is no context edit of the "
                    "Messages API",
                    param="context_management.edits",
                )
            skipped.add(f"context_management.edits.{edit.type}")


def clear_tool_uses(messages: list[dict[str, Any]], edit: ClearToolUses) -> None:
    """Replace all but the last `keep` tool results (and, if asked, their calls' inputs)."""
    keep = edit.keep.value if edit.keep is not None else DEFAULT_KEEP_TOOL_USES
    excluded = set(edit.exclude_tools or ())
    results = [m for m in messages if m["role"] == "tool" and m.get("name") not in excluded]
    cleared = {m["tool_call_id"] for m in results[: max(0, len(results) - keep)]}
    for message in results[: max(0, len(results) - keep)]:
        message["content"] = CLEARED_RESULT
    inputs = edit.clear_tool_inputs
    if not inputs:
        return
    for message in messages:
        for call in message.get("tool_calls", ()):
            function = call["function"]
            if call["id"] in cleared and (inputs is True or function["name"] in inputs):
                function["arguments"] = {}


def token_trigger(body: CountTokensRequest) -> tuple[int, ClearToolUses] | None:
    """The prompt length past which a clear_tool_uses edit applies, when it counts tokens."""
    for edit in body.context_management.edits or () if body.context_management else ():
        if isinstance(edit, ClearToolUses) and not isinstance(edit.trigger, ToolUses):
            return (edit.trigger.value if edit.trigger is not None else DEFAULT_TRIGGER_TOKENS), edit
    return None
