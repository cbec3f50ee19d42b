"""Anthropic's client tools: tools the Messages API defines and the client runs (bash, the text
editor, memory), offered to the model here under their published names and input schemas, so a
model can call them and the client's own implementation (Claude Code, the SDKs' tool runners)
carries the call out.

A request names one by its versioned type (`bash_20250124`) and its name (`bash`); Anthropic's
servers describe it to the model themselves, so the request carries no schema: these are the
input shapes Anthropic documents for each version. The computer-use tools are not among them:
their results are screenshots, which no model here can read. Server tools (web search, code
execution) run on Anthropic's side and stay skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CLIENT_TOOLS", "ClientTool", "client_tool"]


@dataclass(frozen=True)
class ClientTool:
    name: str  # the name Anthropic's docs give it, which a request must use
    description: str
    input_schema: dict[str, Any]


def _editor(commands: list[str], insert_text: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "command": {"type": "string", "enum": commands, "description": "The command to run."},
        "path": {"type": "string", "description": "Absolute path to a file or directory."},
        "file_text": {"type": "string", "description": "create: the content of the new file."},
        "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
        "new_str": {"type": "string", "description": "str_replace: the new text; insert: the text to insert."},
        "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0: the start)."},
        "view_range": {
            "type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
            "description": "view: first and last line to show (1-based; -1 for the end).",
        },
    }  # fmt: skip
    if insert_text:
        properties["insert_text"] = {"type": "string", "description": "insert: the text to insert."}
    return {"type": "object", "properties": properties, "required": ["command", "path"]}


_BASH = ClientTool(
    "bash",
    "Run a command in a persistent bash shell and read its output; restart: true restarts the shell.",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command to run."},
            "restart": {"type": "boolean", "description": "Restart the shell."},
        },
    },
)
_VIEW_EDIT = "View, create and edit text files: view, create, str_replace, insert"
_OLD_EDITOR = ClientTool(
    "str_replace_editor",
    _VIEW_EDIT + ", undo_edit.",
    _editor(["view", "create", "str_replace", "insert", "undo_edit"]),
)
_EDITOR = ClientTool("str_replace_based_edit_tool", _VIEW_EDIT + ".", _editor(["view", "create", "str_replace", "insert"]))
_MEMORY = ClientTool(
    "memory",
    "A memory directory (/memories) kept across conversations: view, create, str_replace, insert, delete, rename.",
    {
        "type": "object",
        "properties": {
            **_editor(["view", "create", "str_replace", "insert", "delete", "rename"], insert_text=True)["properties"],
            "old_path": {"type": "string", "description": "rename: the current path."},
            "new_path": {"type": "string", "description": "rename: the new path."},
        },
        "required": ["command"],
    },
)

CLIENT_TOOLS: dict[str, ClientTool] = {
    "bash_20241022": _BASH,
    "bash_20250124": _BASH,
    "text_editor_20241022": _OLD_EDITOR,
    "text_editor_20250124": _OLD_EDITOR,
    "text_editor_20250429": _EDITOR,
    "text_editor_20250728": _EDITOR,
    "memory_20250818": _MEMORY,
}


def client_tool(kind: str) -> ClientTool | None:
    return CLIENT_TOOLS.get(kind)
