"""POST /admin/jobs: what each kind of job takes, with its bounds and defaults.

The option names are mlx-lm's own (`mlx_lm.lora`'s `iters`, `batch_size`, `learning_rate`,
`num_layers`, `rank`; `mlx_lm.convert`'s `bits` and `group_size`), so a user of mlx-lm reads them at
once. Paths are checked on the host (`mlxhost.host.jobs.requests`); here only their shape.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.inert import excerpt

__all__ = [
    "DEFAULT_NUM_LAYERS",
    "FinetuneRequest", "FuseRequest", "JobRequest", "PullRequest", "QuantizeRequest", "parse_job_request",
    "parse_pull_request",
]

_NAME = Field(min_length=1, max_length=256)
DEFAULT_NUM_LAYERS = 16  # mlx_lm.lora's


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def options(self) -> dict[str, Any]:
        """The kind's options, as the job's record keeps them."""
        return self.model_dump(exclude={"kind", "model"})


class FinetuneRequest(_Request):
    kind: Literal["finetune"]
    model: Annotated[str, _NAME]
    data: Annotated[str, Field(min_length=1, max_length=4096)]  # a directory with train.jsonl, valid.jsonl
    iters: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    batch_size: Annotated[int, Field(ge=1, le=1024)] = 4
    learning_rate: Annotated[float, Field(gt=0, le=1)] = 1e-5
    rank: Annotated[int, Field(ge=1, le=1024)] = 8
    # The last N layers get adapters; -1: all. Left out: mlx-lm's 16, or all of a smaller model
    # (as mlx-lm adapts them), set by the host that knows the model (`DEFAULT_NUM_LAYERS`).
    num_layers: Annotated[int, Field(ge=-1, le=4096)] | None = None
    steps_per_report: Annotated[int, Field(ge=1, le=1_000_000)] = 10
    steps_per_eval: Annotated[int, Field(ge=1, le=1_000_000)] = 200
    max_seq_length: Annotated[int, Field(ge=16, le=1_048_576)] = 2048
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0


class QuantizeRequest(_Request):
    kind: Literal["quantize"]
    model: Annotated[str, _NAME]
    bits: Literal[2, 3, 4, 5, 6, 8] = 4
    group_size: Literal[32, 64, 128] = 64


# A Hugging Face repo id as the hub takes one (owner/name, each of letters, digits, - _ .), and
# optionally @revision (a branch, tag or commit).
REPO_REFERENCE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(@[A-Za-z0-9_./-]{1,255})?$"


class PullRequest(_Request):
    """A model from the Hugging Face Hub (POST /admin/models/pull); `quantize` converts it after."""

    kind: Literal["pull"]
    model: Annotated[str, Field(pattern=REPO_REFERENCE)]  # owner/name[@revision]
    quantize: Literal[2, 3, 4, 5, 6, 8] | None = None  # a transformers checkpoint, quantized by a job after

    @property
    def repo(self) -> str:
        return self.model.partition("@")[0]

    @property
    def revision(self) -> str:
        return self.model.partition("@")[2] or "main"

    def options(self) -> dict[str, Any]:
        return {"repo": self.repo, "revision": self.revision, "quantize": self.quantize}


class FuseRequest(_Request):
    kind: Literal["fuse"]
    adapter: Annotated[str, _NAME]  # a succeeded fine-tune's job id
    model: Annotated[str, _NAME] | None = None  # default: the fine-tune's model


JobRequest = FinetuneRequest | QuantizeRequest | FuseRequest | PullRequest
_ADAPTER: TypeAdapter[JobRequest] = TypeAdapter(Annotated[JobRequest, Field(discriminator="kind")])
KINDS = ("finetune", "quantize", "fuse", "pull")
_PULL: TypeAdapter[PullRequest] = TypeAdapter(PullRequest)


def parse_job_request(body: bytes) -> JobRequest:
    """The request, or an InvalidRequest (400) that names the field."""
    try:
        return _ADAPTER.validate_json(body)
    except ValidationError as exc:
        raise _invalid(exc) from None


def parse_pull_request(body: bytes) -> PullRequest:
    """POST /admin/models/pull's body ({"model": "owner/name[@revision]", "quantize": 4}) as a pull job."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_json")
    model = data.get("model")
    if isinstance(model, str) and not re.match(REPO_REFERENCE, model):
        raise InvalidRequest(
            f"model: '{excerpt(model)}' is not a Hugging Face repo id (owner/name, optionally @revision)",
            param="model",
        )
    try:
        return _PULL.validate_python({**data, "kind": "pull"})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = excerpt(".".join(str(part) for part in error["loc"])) or None
        if error["type"] == "missing":
            raise InvalidRequest(f"missing required option '{param}'", param=param, code="missing_parameter") from None
        if error["type"] == "extra_forbidden":
            raise InvalidRequest(
                f"unknown option '{param}' for a pull", param=param, code="unsupported_parameter"
            ) from None
        raise InvalidRequest(f"{param}: {error['msg']}", param=param) from None


def _invalid(exc: ValidationError) -> InvalidRequest:
    error = exc.errors(include_url=False)[0]
    kind = error["type"]
    if kind == "json_invalid":
        return InvalidRequest(f"the body is not valid JSON: {error['msg']}", code="invalid_json")
    if kind in ("model_attributes_type", "model_type", "dict_type") and not error["loc"]:
        return InvalidRequest("the body must be a JSON object", code="invalid_json")
    if kind == "union_tag_not_found":
        return InvalidRequest(
            f"missing required option 'kind' (one of {', '.join(KINDS)})",
            param="kind",
            code="missing_parameter",
        )
    if kind == "union_tag_invalid":
        return InvalidRequest(f"kind: must be one of {', '.join(KINDS)}", param="kind")
    # The first part of a location is the union member's tag (the kind): not the client's field.
    loc = [str(part) for part in error["loc"][1:]]
    param = excerpt(".".join(loc)) if loc else None
    if kind == "extra_forbidden":
        return InvalidRequest(
            f"unknown option '{param}' for a {error['loc'][0]} job", param=param, code="unsupported_parameter"
        )
    if kind == "missing":
        return InvalidRequest(f"missing required option '{param}'", param=param, code="missing_parameter")
    return InvalidRequest(f"{param}: {error['msg']}", param=param)
