"""Errors the API answers with, each shaped like OpenAI's: {"error": {message, type, param, code}}.

    APIError
     ├── InvalidRequest        400 invalid_request_error
     ├── Unauthorized          401 authentication_error
     ├── NotFound              404 not_found_error
     ├── MethodNotAllowed      405 invalid_request_error
     ├── PayloadTooLarge       413 invalid_request_error
     ├── ServiceUnavailable    503 service_unavailable
     └── InternalError         500 internal_error (the message never carries a traceback)
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

__all__ = [
    "APIError",
    "InternalError",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "Unauthorized",
]


class APIError(Exception):
    status_code = 400
    type = "invalid_request_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code, headers=self.headers)


class InvalidRequest(APIError):
    code = "invalid_value"


class Unauthorized(APIError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(APIError):
    status_code = 404
    type = "not_found_error"
    code = "not_found"


class MethodNotAllowed(APIError):
    status_code = 405
    code = "method_not_allowed"


class PayloadTooLarge(APIError):
    status_code = 413
    code = "request_too_large"


class ServiceUnavailable(APIError):
    status_code = 503
    type = "service_unavailable"
    code = "unavailable"


class InternalError(APIError):
    status_code = 500
    type = "internal_error"
    code = "internal_error"
