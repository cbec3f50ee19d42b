"""Generated bad input never makes the host answer 5xx, hang, or break.

Two generators, each with a fixed seed: schemathesis, from the served /openapi.json, sends the
generation routes positive and negative data; hypothesis varies the front door's headers
(content type, Host, Origin, credentials) together against a host with an API key, and works out
independently what each request must be answered.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from mlxhost.testing import RunningHost
from tests.e2e import fuzzing
from tests.e2e.fuzzing import (
    CHAT,
    CLIENT_TIMEOUT,
    FUZZ_SEED,
    ROUTES,
    chat,
    check_answer,
    check_error,
    log_tail,
    start_fuzz_host,
)

# The fixtures this module uses (see tests/e2e/fuzzing.py).
shared_host, host = fuzzing.shared_host, fuzzing.host

EXAMPLES_PER_OPERATION_AND_MODE = 80  # 7 routes x 2 modes: 1,120 generated cases


# -- the generation routes, from the served schema ----------------------------------------


@pytest.mark.slow
def test_fuzz_generation_routes_from_the_served_schema(host: RunningHost) -> None:
    with host.http() as client:
        served = client.get("/openapi.json")
    assert served.status_code == 200
    document = served.json()
    assert document["openapi"].startswith("3.1")
    schema = schemathesis.openapi.from_dict(document)
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # every operation of the served schema loads
        operation = result.ok()
        if operation.path.startswith("/v1/") and operation.method.upper() == "POST":
            operations.append(operation)
    assert sorted(op.path for op in operations) == sorted(ROUTES)

    sent: collections.Counter[tuple[str, str]] = collections.Counter()
    statuses: collections.Counter[tuple[str, int]] = collections.Counter()
    waited = [0.0]  # seconds spent waiting on the host, of the whole run
    session = requests.Session()
    began = time.monotonic()

    def fuzz(operation: Any, mode: GenerationMode) -> None:
        @seed(FUZZ_SEED)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION_AND_MODE,
            database=None,
            deadline=None,
            phases=[Phase.generate],  # no shrinking: each step is a real request
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def send(case: Any) -> None:
            started = time.monotonic()
            response = case.call(base_url=host.url, session=session, timeout=CLIENT_TIMEOUT)
            elapsed = time.monotonic() - started
            waited[0] += elapsed
            sent[(case.path, mode.value)] += 1
            statuses[(mode.value, response.status_code)] += 1
            context = (
                f"{case.method} {case.path} ({mode.value}) body={case.body!r:.2000}\n"
                f"-> {response.status_code} {response.content[:1000]!r}\n"
                f"server log:\n{log_tail(host)}"
            )
            assert response.status_code < 500, context
            assert elapsed < CLIENT_TIMEOUT, context
            try:
                check_answer(response)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{context}") from None

        send()

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode)

    elapsed = time.monotonic() - began
    total = sum(sent.values())
    print(
        f"\nfuzzed {total} cases in {elapsed:.1f}s ({waited[0]:.1f}s waiting on the host): "
        f"{dict(sent)}; statuses {dict(statuses)}"
    )
    assert total >= 1000
    assert all(count >= EXAMPLES_PER_OPERATION_AND_MODE for count in sent.values()), sent
    assert statuses[("positive", 200)] > 0  # the valid-looking cases do reach generation


# -- the front door: content type, Host, Origin and credentials, varied together ---------------


FUZZ_KEY = "fuzz-key"


_HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)


@pytest.fixture(scope="module")
def keyed_host(tiny_model: Path) -> Iterator[RunningHost]:
    with start_fuzz_host(tiny_model, env={"MLXHOST_API_KEY": FUZZ_KEY}) as running:
        yield running


def _expected_status(headers: dict[str, str], port: int) -> int:
    """What the front door must answer, worked out independently of how the host does it."""
    name, _, given_port = headers["host"].lower().rpartition(":")
    host = f"{name.rstrip('.')}:{given_port}"  # 'localhost.' is localhost, fully qualified
    if host not in {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}:
        return 403
    if "origin" in headers:
        return 403
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or token.strip() != FUZZ_KEY:
            return 401
    elif headers.get("x-api-key", "").strip() != FUZZ_KEY:
        return 401
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not (media_type.startswith("application/") and media_type.endswith("+json")):
        return 415
    return 200


def test_fuzz_content_type_host_origin_and_credentials(keyed_host: RunningHost) -> None:
    assert keyed_host.url is not None
    port = int(keyed_host.url.rsplit(":", 1)[1])
    good_host = f"127.0.0.1:{port}"
    body = json.dumps(chat()).encode()
    seen: collections.Counter[int] = collections.Counter()

    @seed(FUZZ_SEED)
    @settings(max_examples=300, database=None, deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @example(host=good_host, origin=None, authorization=f"Bearer {FUZZ_KEY}", api_key=None, content_type="application/json")
    @example(host=f"[::1]:{port}", origin=None, authorization=None, api_key=FUZZ_KEY, content_type="application/json; charset=utf-8")
    @example(host=good_host, origin=None, authorization=f"Bearer {FUZZ_KEY}", api_key=None, content_type="text/plain")
    @example(host=good_host, origin=f"http://{good_host}", authorization=f"Bearer {FUZZ_KEY}", api_key=None, content_type="application/json")
    @given(
        host=st.sampled_from([good_host, f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}"]) | _HEADER_TEXT,
        origin=st.none() | st.sampled_from(["null", "http://evil.example", f"http://{good_host}"]) | _HEADER_TEXT,
        authorization=st.none()
        | st.sampled_from([f"Bearer {FUZZ_KEY}", f"bearer  {FUZZ_KEY}", "Bearer", "Basic Zm9v", f"Bearer {FUZZ_KEY}x"])
        | _HEADER_TEXT,
        api_key=st.none() | st.sampled_from([FUZZ_KEY, f"{FUZZ_KEY}x", "nope"]) | _HEADER_TEXT,
        content_type=st.none()
        | st.sampled_from(
            ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "application/merge-patch+json",
             "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b", "application/jsonp"]
        )
        | _HEADER_TEXT,
    )
    def send(host: str, origin: str | None, authorization: str | None, api_key: str | None, content_type: str | None) -> None:
        headers = {"host": host}
        for name, value in (("origin", origin), ("authorization", authorization), ("x-api-key", api_key), ("content-type", content_type)):
            if value is not None:
                headers[name] = value
        expected = _expected_status(headers, port)
        with httpx.Client(base_url=keyed_host.url or "", timeout=CLIENT_TIMEOUT) as client:
            raw_headers = {k: v.encode("latin-1") for k, v in headers.items()}
            response = client.post(CHAT, content=body, headers=raw_headers)
        seen[response.status_code] += 1
        where = f"{headers!r} -> {response.status_code} {response.content[:300]!r}"
        assert response.status_code == expected, where
        if expected != 200:
            check_error(response)
        assert not any(b < 0x20 and b not in (0x0A, 0x0D) for b in response.content), where

    send()
    assert {200, 401, 403, 415} <= set(seen), seen  # every outcome was exercised
    health = keyed_host.health()
    assert health["status"] == "ok" and [w["restarts"] for w in health["workers"]] == [0], health
