"""The OpenAPI 3.1 document for the served routes, built from the request models' schemas."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from mlxhost.wire.anthropic import CountTokensRequest, MessagesRequest
from mlxhost.wire.embeddings import EmbeddingRequest, RerankRequest
from mlxhost.wire.openai import ChatCompletionRequest, CompletionRequest
from mlxhost.wire.responses import ResponsesRequest

__all__ = ["openapi_document"]


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _errors(*codes: int, shape: str = "Error") -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{shape}"}
    return {str(code): {"description": "error", **_json(schema)} for code in codes}


def _generation_route(model: str, summary: str, error: str = "Error") -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, **_json({"$ref": f"#/components/schemas/{model}"})},
            "responses": {
                "200": {
                    "description": "the completion, or an SSE stream when `stream` is true",
                    "content": {
                        "application/json": {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **_errors(400, 413, 500, 503, shape=error),
            },
        }
    }


def _pooled_route(model: str, summary: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, **_json({"$ref": f"#/components/schemas/{model}"})},
            "responses": {
                "200": {"description": "the answer", **_json({"type": "object"})},
                **_errors(400, 413, 429, 500, 503),
            },
        }
    }


@cache
def openapi_document() -> dict[str, Any]:
    _, definitions = models_json_schema(
        [
            (ChatCompletionRequest, "validation"),
            (CompletionRequest, "validation"),
            (ResponsesRequest, "validation"),
            (MessagesRequest, "validation"),
            (CountTokensRequest, "validation"),
            (EmbeddingRequest, "validation"),
            (RerankRequest, "validation"),
        ],
        ref_template="#/components/schemas/{model}",
    )
    schemas = definitions["$defs"]
    schemas["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
            }
        },
    }
    # Anthropic's error shape, on /v1/messages (see wire/dialect.py).
    schemas["AnthropicError"] = {
        "type": "object",
        "required": ["type", "error"],
        "properties": {
            "type": {"const": "error"},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    }
    plain = {"type": "object"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "mlxhost", "version": "1"},
        "paths": {
            "/v1/chat/completions": _generation_route("ChatCompletionRequest", "Chat completion"),
            "/v1/completions": _generation_route("CompletionRequest", "Text completion"),
            "/v1/responses": _generation_route("ResponsesRequest", "Response (OpenAI Responses API)"),
            "/v1/messages": _generation_route(
                "MessagesRequest", "Message (Anthropic Messages API)", "AnthropicError"
            ),
            "/v1/messages/count_tokens": {
                "post": {
                    "summary": "Count a message's input tokens (Anthropic Messages API)",
                    "requestBody": {
                        "required": True,
                        **_json({"$ref": "#/components/schemas/CountTokensRequest"}),
                    },
                    "responses": {
                        "200": {"description": "the count", **_json(plain)},
                        **_errors(400, 413, 500, 503, shape="AnthropicError"),
                    },
                }
            },
            "/v1/embeddings": _pooled_route("EmbeddingRequest", "Embeddings of texts or token ids"),
            "/v1/rerank": _pooled_route("RerankRequest", "Documents ranked by relevance to a query"),
            "/v1/models": {
                "get": {
                    "summary": "Served models",
                    "responses": {"200": {"description": "models", **_json(plain)}},
                }
            },
            "/health": {
                "get": {
                    "summary": "Liveness; workers, counters and memory to callers with credentials",
                    "responses": {
                        "200": {"description": "serving", **_json(plain)},
                        **_errors(503),
                    },
                }
            },
        },
        "components": {"schemas": schemas},
    }
