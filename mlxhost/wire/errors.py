"""Errors the API answers with. `body()` is OpenAI's shape, {"error": {message, type, param, code}};
dialect.py words the same error for each API dialect (Anthropic's type comes from the status).

    APIError
     ├── InvalidRequest        400 invalid_request_error
     ├── Unauthorized          401 authentication_error
     ├── Forbidden             403 permission_error (a Host or Origin this server does not serve)
     ├── NotFound              404 not_found_error
     ├── MethodNotAllowed      405 invalid_request_error
     ├── RequestTimeout        408 invalid_request_error (the body came too slowly)
     ├── PayloadTooLarge       413 invalid_request_error
     ├── UnsupportedMediaType  415 invalid_request_error (a body that is not JSON)
     ├── ClientClosed          499 client_closed (it left before its body arrived; nobody reads it)
     ├── AdmissionRefused      429 resource_admission
     ├── InternalError         500 internal_error (the message never carries a traceback)
     ├── WorkerFailed          502 worker_error (the model's worker exited mid-request)
     ├── ServiceUnavailable    503 service_unavailable
     ├── Cancelled             503 cancelled (an operator or shutdown stopped it)
     ├── TimedOut              504 timeout (the request's deadline passed)
     └── HTTPVersionNotSupported 505 invalid_request_error (HTTP/2 while it is off)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "APIError",
    "Cancelled",
    "ClientClosed",
    "Forbidden",
    "HTTPVersionNotSupported",
    "RequestTimeout",
    "UnsupportedMediaType",
    "InternalError",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "AdmissionRefused",
    "ServiceUnavailable",
    "TimedOut",
    "Unauthorized",
    "WorkerFailed",
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


class InvalidRequest(APIError):
    code = "invalid_value"


class Unauthorized(APIError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(APIError):
    status_code = 403
    type = "permission_error"
    code = "forbidden"


class RequestTimeout(APIError):
    status_code = 408
    code = "body_timeout"


class UnsupportedMediaType(APIError):
    status_code = 415
    code = "unsupported_media_type"


class ClientClosed(APIError):
    status_code = 499  # nginx's code for it: only the access log will see this answer
    type = "client_closed"
    code = "client_closed_request"


class HTTPVersionNotSupported(APIError):
    status_code = 505
    code = "http_version_not_supported"


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


class AdmissionRefused(APIError):
    status_code = 429
    type = "resource_admission"
    code = "queue_full"


class WorkerFailed(APIError):
    status_code = 502
    type = "worker_error"
    code = "worker_exited"


class Cancelled(APIError):
    status_code = 503
    type = "cancelled"
    code = "cancelled"


class TimedOut(APIError):
    status_code = 504
    type = "timeout"
    code = "deadline"
