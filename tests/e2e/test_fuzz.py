"""Bad input never makes the host answer 5xx, hang, or break: schema-driven fuzzing and hand-written cases.

Part 1 generates requests for the generation routes from the served /openapi.json with
schemathesis (positive and negative data, a fixed seed). Part 2 sends hand-written hostile
requests. Part 3 checks the host is still healthy and no worker restarted.

The cases that once crashed or poisoned a worker (out-of-range seeds, top_k past the vocabulary,
float32-zero penalties, deep nesting, a chunked body over the limit) run against a throwaway host
of their own, so a regression there cannot hide behind a broken shared one.
"""

from __future__ import annotations

import collections
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import requests
import schemathesis
from tests.conftest import Server, start_server
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

MAX_BODY = 4 * 1024 * 1024
# Generation stays cheap: at most 8 tokens, 4 unless asked; more is a fast 400.
SERVE_ARGS = ("--max-tokens-limit", "8", "--default-max-tokens", "4", "--max-body-bytes", str(MAX_BODY))
CLIENT_TIMEOUT = 30.0  # no request may take longer: a hang fails the test instead of stalling it
EXAMPLES_PER_OPERATION_AND_MODE = 275  # 2 routes x 2 modes: 1,100 generated cases
FUZZ_SEED = 20261130  # fixed, so CI sends the same cases every run (edits to the test included)
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ROUTES = (CHAT, COMPLETIONS)
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, "max_tokens": 2, **fields}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(tiny_model: Path) -> Iterator[Server]:
    """The host everything in this module runs against (TCP, a worker process, default models)."""
    running = start_server("--model", str(tiny_model), *SERVE_ARGS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def strict_host(tiny_model: Path) -> Iterator[Server]:
    running = start_server("--model", str(tiny_model), "--strict-models", *SERVE_ARGS)
    yield running
    running.stop()


@pytest.fixture
def throwaway_host(tiny_model: Path) -> Iterator[Server]:
    """A host of its own, for a request that crashes or poisons its worker."""
    running = start_server("--model", str(tiny_model), *SERVE_ARGS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def vocab_size(tiny_model: Path) -> int:
    return int(json.loads((tiny_model / "config.json").read_text())["vocab_size"])


@pytest.fixture
def http(host: Server) -> Iterator[httpx.Client]:
    with host.http(timeout=CLIENT_TIMEOUT) as client:
        yield client


# -- checks -----------------------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON (RFC 8259)")


def strict_json(data: bytes | str) -> Any:
    """Parse JSON as RFC 8259 has it: NaN and Infinity are refused."""
    return json.loads(data, parse_constant=_no_constants)


def content_type(response: Any) -> str:
    """Of an httpx or a schemathesis response (whose headers map names to lists)."""
    for name, value in response.headers.items():
        if name.lower() == "content-type":
            return str(value[0] if isinstance(value, list) else value)
    return ""


def log_tail(server: Server, lines: int = 30) -> str:
    return "".join(server.log[-lines:])


def check_error(
    response: Any,
    status: int | tuple[int, ...] | None = None,
    *,
    param: object = ...,
    code: str | None = None,
) -> dict[str, Any]:
    """The response is an OpenAI-shaped 4xx (with `status`, `param` and `code` where given)."""
    where = f"{response.status_code} {response.content[:500]!r}"
    if status is not None:
        allowed = (status,) if isinstance(status, int) else status
        assert response.status_code in allowed, where
    assert 400 <= response.status_code < 500, where
    assert content_type(response).startswith("application/json"), where
    body = strict_json(response.content)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), where
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], where
    assert isinstance(error.get("type"), str) and error["type"], where
    assert "param" in error and (error["param"] is None or isinstance(error["param"], str)), where
    assert "code" in error and (error["code"] is None or isinstance(error["code"], str)), where
    if param is not ...:
        assert error["param"] == param, where
    if code is not None:
        assert error["code"] == code, where
    return error  # type: ignore[no-any-return]


def check_success(response: Any) -> None:
    """A 200 is a whole completion, or an SSE stream of strict-JSON chunks ending in [DONE]."""
    where = f"{response.status_code} {response.content[-500:]!r}"
    assert response.status_code == 200, where
    if content_type(response).startswith("text/event-stream"):
        frames = [
            line[len("data: ") :]
            for line in response.content.decode().splitlines()
            if line.startswith("data: ")
        ]
        assert frames and frames[-1] == "[DONE]", where
        for frame in frames[:-1]:
            chunk = strict_json(frame)
            assert "error" not in chunk, where
            assert chunk["object"] in ("chat.completion.chunk", "text_completion"), where
    else:
        body = strict_json(response.content)
        assert body["object"] in ("chat.completion", "text_completion"), where
        assert body["choices"] and body["choices"][0]["finish_reason"] in ("stop", "length"), where


def check_answer(response: Any) -> None:
    """Anything but a 5xx: a good answer, or an OpenAI-shaped 4xx."""
    if response.status_code >= 400:
        check_error(response)
    else:
        check_success(response)


def check_still_serving(server: Server) -> None:
    health = server.health()
    assert health["status"] == "ok", health
    assert [w["restarts"] for w in health["workers"]] == [0], health["workers"]
    with server.http(timeout=CLIENT_TIMEOUT) as client:
        check_success(client.post(CHAT, json=chat()))


# -- 1. schema-driven fuzzing -----------------------------------------------------------------


@pytest.mark.slow
def test_fuzz_generation_routes_from_the_served_schema(host: Server, vocab_size: int) -> None:
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
    check_still_serving(host)


# -- 2. hand-written cases --------------------------------------------------------------------


def post_raw(http: httpx.Client, raw: bytes, path: str = CHAT, **headers: str) -> httpx.Response:
    return http.post(path, content=raw, headers={"content-type": "application/json", **headers})


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b'{"messages": [',
        b'{"messages": [{"role": "us',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ',
        b'{"messages": [{"role": "user", "content": "hi\\',
    ],
)
def test_truncated_json_is_a_400(http: httpx.Client, raw: bytes) -> None:
    for path in ROUTES:
        check_error(post_raw(http, raw, path), 400, param=None, code="invalid_json")


def test_3mb_string_in_a_message_is_answered_without_5xx(http: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "x" * 3_000_000}], "max_tokens": 1}
    response = http.post(CHAT, json=body)
    if response.status_code != 200:
        check_error(response, 400, param="messages", code="context_length_exceeded")


@pytest.mark.parametrize(("field", "param"), [("user", "user"), ("stop", "stop"), ("model", "model")])
def test_3mb_string_in_a_short_field_is_a_400(http: httpx.Client, field: str, param: str) -> None:
    check_error(http.post(CHAT, json=chat(**{field: "x" * 3_000_000})), 400, param=param)


def test_body_over_max_body_bytes_is_a_413(http: httpx.Client) -> None:
    raw = json.dumps(chat(user="x" * MAX_BODY)).encode()
    check_error(post_raw(http, raw), 413, param=None, code="request_too_large")


def test_body_just_at_max_body_bytes_is_read(http: httpx.Client) -> None:
    prefix, suffix = b'{"messages": [{"role": "user", "content": "hi"}], "user": "', b'"}'
    raw = prefix + b"x" * (MAX_BODY - len(prefix) - len(suffix)) + suffix
    assert len(raw) == MAX_BODY
    check_error(post_raw(http, raw), 400, param="user")  # read and validated: too long a user


def _chunks(total: int) -> Iterator[bytes]:
    yield b'{"messages": [{"role": "user", "content": "hi"}], "user": "'
    for _ in range(total // 65536):
        yield b"x" * 65536
    yield b'"}'


def test_chunked_body_over_max_body_bytes_is_a_413(host: Server) -> None:
    # No content-length: the limit is enforced while reading. A client of its own, since the
    # connection is not reusable afterwards: the 413 says `connection: close`.
    with host.http(timeout=CLIENT_TIMEOUT) as client:
        response = client.post(
            CHAT, content=_chunks(MAX_BODY + 2 * 65536), headers={"content-type": "application/json"}
        )
    check_error(response, 413, param=None, code="request_too_large")


def _raw_http(url: str, head: bytes, chunks: Iterator[bytes]) -> tuple[bytes, socket.socket]:
    """Send a chunked request over a raw socket (writing while reading); return the response head."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=CLIENT_TIMEOUT)

    def write() -> None:
        try:
            sock.sendall(head)
            for chunk in chunks:
                sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped reading; the response says what it thought

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    received = b""
    while b"\r\n\r\n" not in received:
        data = sock.recv(65536)
        assert data, f"the connection closed before a response: {received!r}"
        received += data
    response_head, _, rest = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in response_head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    writer.join(CLIENT_TIMEOUT)
    return response_head, sock


def test_connection_after_a_chunked_413_is_closed_with_notice_or_reusable(host: Server) -> None:
    assert host.url is not None
    netloc = host.url.removeprefix("http://").encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\n" % netloc
        + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    response_head, sock = _raw_http(host.url, request, _chunks(MAX_BODY + 40 * 65536))
    with sock:
        assert response_head.startswith(b"HTTP/1.1 413"), response_head
        if b"\r\nconnection: close" in response_head.lower():
            return
        time.sleep(0.3)
        body = json.dumps(chat(max_tokens=1)).encode()
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\n" % netloc
                + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
            )
            answer = sock.recv(65536)
        except OSError as exc:
            answer = repr(exc).encode()
        assert answer.startswith(b"HTTP/1.1 200"), (response_head, answer)


DEPTH = 10_000
DEEP_BODIES = {
    "lists as a field": b'{"messages": [{"role": "user", "content": "hi"}], "user": '
    + b"[" * DEPTH
    + b"]" * DEPTH
    + b"}",
    "objects as a field": b'{"messages": [{"role": "user", "content": "hi"}], "user": '
    + b'{"a": ' * DEPTH
    + b"1"
    + b"}" * DEPTH
    + b"}",
    "lists as the body": b"[" * DEPTH + b"]" * DEPTH,
    "objects as the body": b'{"a": ' * DEPTH + b"1" + b"}" * DEPTH,
}


@pytest.mark.parametrize("name", DEEP_BODIES)
def test_deeply_nested_json_is_a_400(http: httpx.Client, name: str) -> None:
    check_error(post_raw(http, DEEP_BODIES[name]), 400, param=None, code="invalid_json")


def test_moderately_nested_json_is_a_400(http: httpx.Client) -> None:
    depth = 500
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "user": ' + b"[" * depth + b"]" * depth + b"}"
    check_error(post_raw(http, raw), 400)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "\xff\xfe hi"}]}',
        b'{"messages": [{"role": "user", "content": "\xc0\xaf"}]}',  # overlong '/'
        b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',  # a UTF-8-encoded surrogate
        b'{"messages": [{"role": "user", "content": "\xe2\x82"}]}',  # cut short
        b'{"\xff": 1, "messages": [{"role": "user", "content": "hi"}]}',
    ],
)
def test_invalid_utf8_is_a_400(http: httpx.Client, raw: bytes) -> None:
    for path in ROUTES:
        check_error(post_raw(http, raw, path), 400, param=None, code="invalid_json")


def test_json_sent_as_text_plain_is_a_415(http: httpx.Client) -> None:
    # A browser may POST text/plain to any site without asking first: JSON only, said so.
    response = http.post(CHAT, content=json.dumps(chat()), headers={"content-type": "text/plain"})
    check_error(response, 415, param="content-type", code="unsupported_media_type")


def test_multipart_form_data_is_a_415(http: httpx.Client) -> None:
    response = http.post(CHAT, files={"messages": ("m.json", json.dumps(MESSAGES).encode())})
    check_error(response, 415, code="unsupported_media_type")


def test_url_encoded_form_is_a_415(http: httpx.Client) -> None:
    check_error(http.post(CHAT, data={"messages": "hi"}), 415, code="unsupported_media_type")


@pytest.mark.parametrize("content_type", [None, "application/json"])
def test_empty_body_is_a_400(http: httpx.Client, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    for path in ROUTES:
        check_error(http.post(path, content=b"", headers=headers), 400, param=None, code="invalid_json")


BAD_NUMBERS = [
    (CHAT, {"max_tokens": -1}, "max_tokens"),
    (CHAT, {"max_tokens": 10**30}, "max_tokens"),
    (CHAT, {"max_tokens": 0}, "max_tokens"),
    (CHAT, {"max_completion_tokens": 10**30}, "max_completion_tokens"),
    (CHAT, {"max_completion_tokens": -(10**30)}, "max_completion_tokens"),
    (CHAT, {"temperature": 1e308}, "temperature"),
    (CHAT, {"temperature": -1e308}, "temperature"),
    (CHAT, {"top_k": -5}, "top_k"),
    (CHAT, {"top_k": -(2**70)}, "top_k"),
    (CHAT, {"top_p": 1e308}, "top_p"),
    (CHAT, {"min_p": -1e-308}, "min_p"),
    (CHAT, {"presence_penalty": -1e308}, "presence_penalty"),
    (CHAT, {"frequency_penalty": 1e308}, "frequency_penalty"),
    (CHAT, {"repetition_penalty": 1e308}, "repetition_penalty"),
    (CHAT, {"n": 10**30}, "n"),
    (CHAT, {"logprobs": True, "top_logprobs": 10**30}, "top_logprobs"),
    (CHAT, {"seed": 1.5}, "seed"),
    (CHAT, {"seed": 1e308}, "seed"),
    (COMPLETIONS, {"logprobs": 10**30}, "logprobs"),
    (COMPLETIONS, {"max_tokens": 10**30}, "max_tokens"),
]


@pytest.mark.parametrize(("path", "fields", "param"), BAD_NUMBERS)
def test_negative_and_enormous_numbers_are_a_400_naming_the_field(
    http: httpx.Client, path: str, fields: dict[str, Any], param: str
) -> None:
    body = chat(**fields) if path == CHAT else {"prompt": "hi", "max_tokens": 2, **fields}
    check_error(http.post(path, json=body), 400, param=param)


@pytest.mark.parametrize("token", [-1, 2**70, 10**30])
def test_out_of_vocabulary_prompt_token_is_a_400(http: httpx.Client, token: int) -> None:
    response = http.post(COMPLETIONS, json={"prompt": [1, token], "max_tokens": 2})
    check_error(response, 400, param="prompt[1]")


@pytest.mark.parametrize("seed", [0, -1, 2**63 - 1, -(2**63)])
def test_seed_in_the_int64_range_works(http: httpx.Client, seed: int) -> None:
    check_success(http.post(CHAT, json=chat(seed=seed)))


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 2**70])
def test_seed_out_of_range_is_a_400(throwaway_host: Server, seed: int) -> None:
    with throwaway_host.http(timeout=CLIENT_TIMEOUT) as client:
        response = client.post(CHAT, json=chat(seed=seed))
        assert response.status_code < 500, (response.status_code, response.content, log_tail(throwaway_host))
        check_error(response, 400, param="seed")
    check_still_serving(throwaway_host)


def test_top_k_over_the_vocabulary_is_a_400(throwaway_host: Server, vocab_size: int) -> None:
    with throwaway_host.http(timeout=CLIENT_TIMEOUT) as client:
        response = client.post(CHAT, json=chat(top_k=vocab_size))
        after = client.post(CHAT, json=chat())  # the worker must still generate afterwards
        outcome = (response.status_code, response.content, after.status_code, after.content)
        assert response.status_code < 500 and after.status_code == 200, (outcome, log_tail(throwaway_host))
        if response.status_code != 200:
            check_error(response, 400, param="top_k")
        check_success(after)
    check_still_serving(throwaway_host)


def test_top_k_just_under_the_vocabulary_works(http: httpx.Client, vocab_size: int) -> None:
    check_success(http.post(CHAT, json=chat(top_k=vocab_size - 1)))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ROUTES)
def test_logprobs_are_finite_json_even_with_extreme_penalties(
    http: httpx.Client, path: str, stream: bool
) -> None:
    fields: dict[str, Any] = {"max_tokens": 2, "repetition_penalty": 5e-324, "stream": stream}
    if path == CHAT:
        body = chat(logprobs=True, top_logprobs=1, **fields)
    else:
        body = {"prompt": "hi", "logprobs": 1, **fields}
    check_answer(http.post(path, json=body))


NON_JSON_NUMBERS = [
    (CHAT, b'"temperature": NaN', "temperature"),
    (CHAT, b'"temperature": Infinity', "temperature"),
    (CHAT, b'"temperature": -Infinity', "temperature"),
    (CHAT, b'"top_p": NaN', "top_p"),
    (CHAT, b'"min_p": NaN', "min_p"),
    (CHAT, b'"presence_penalty": NaN', "presence_penalty"),
    (CHAT, b'"repetition_penalty": Infinity', "repetition_penalty"),
    (CHAT, b'"max_tokens": Infinity', "max_tokens"),
    (CHAT, b'"seed": NaN', "seed"),
    (CHAT, b'"top_k": -Infinity', "top_k"),
    (COMPLETIONS, b'"max_tokens": NaN', "max_tokens"),
    (COMPLETIONS, b'"temperature": NaN', "temperature"),
]


@pytest.mark.parametrize(("path", "field", "param"), NON_JSON_NUMBERS)
def test_nan_and_infinity_literals_are_a_400(http: httpx.Client, path: str, field: bytes, param: str) -> None:
    start = b'{"messages": [{"role": "user", "content": "hi"}]' if path == CHAT else b'{"prompt": "hi"'
    response = post_raw(http, start + b", " + field + b"}", path)
    error = check_error(response, 400)
    # Refusing the literal outright (no param) is as good as refusing the value.
    assert error["param"] in (param, None), error


def test_nan_as_the_whole_body_is_a_400(http: httpx.Client) -> None:
    for raw in (b"NaN", b"Infinity", b"-Infinity"):
        check_error(post_raw(http, raw), 400, param=None, code="invalid_json")


PATH_LIKE_MODELS = ["../../etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "..", "/", "file:///etc/passwd", "C:\\Windows\\win.ini"]


def _served(server: Server) -> tuple[list[str], list[str]]:
    health = server.health()
    return [m["id"] for m in health["models"]], [w["model"] for w in health["workers"]]


@pytest.mark.parametrize("model", PATH_LIKE_MODELS)
def test_path_like_model_is_answered_by_the_default_model(host: Server, http: httpx.Client, model: str) -> None:
    before = _served(host)
    response = http.post(CHAT, json=chat(model=model))
    check_success(response)
    assert response.json()["model"] == before[0][0]
    assert _served(host) == before  # nothing loaded, no worker started


@pytest.mark.parametrize("model", PATH_LIKE_MODELS)
def test_path_like_model_is_a_404_with_strict_models(strict_host: Server, model: str) -> None:
    before = _served(strict_host)
    with strict_host.http(timeout=CLIENT_TIMEOUT) as client:
        for path in ROUTES:
            body = chat(model=model) if path == CHAT else {"prompt": "hi", "max_tokens": 2, "model": model}
            response = client.post(path, json=body)
            check_error(response, 404, param="model", code="model_not_found")
    assert _served(strict_host) == before
    check_still_serving(strict_host)


def test_the_tiny_model_path_itself_loads_nothing_new(host: Server, http: httpx.Client, tiny_model: Path) -> None:
    before = _served(host)
    check_success(http.post(CHAT, json=chat(model=str(tiny_model))))
    assert _served(host) == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_tokens": 999}',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 999, "max_tokens": 2}',
        b'{"messages": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        b'{"messages": [{"role": "user", "role": "tool", "content": "hi"}], "max_tokens": 2}',
        b'{"model": "../../etc/passwd", "model": 5, "messages": [{"role": "user", "content": "hi"}]}',
        b'{"stream": true, "stream": false, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        b'{"stream": false, "stream": true, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
    ],
)
def test_duplicate_keys_are_answered_without_5xx(http: httpx.Client, raw: bytes) -> None:
    response = post_raw(http, raw)
    check_answer(response)
    if response.status_code == 400:
        assert check_error(response)["param"] is not None


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, [chat()], None),
        (CHAT, {"messages": {"role": "user", "content": "hi"}}, "messages"),
        (CHAT, {"messages": [["role", "user"]]}, "messages[0]"),
        (CHAT, chat(stream_options=[True]), "stream_options"),
        (CHAT, chat(response_format=["text"]), "response_format"),
        (CHAT, {"messages": [{"role": "user", "content": [["text", "hi"]]}]}, "messages[0].content[0]"),
        (COMPLETIONS, [{"prompt": "hi"}], None),
        (COMPLETIONS, {"prompt": {"text": "hi"}}, "prompt"),
        (COMPLETIONS, {"prompt": "hi", "stream_options": []}, "stream_options"),
    ],
)
def test_arrays_where_objects_are_expected_are_a_400(
    http: httpx.Client, path: str, body: object, param: str | None
) -> None:
    check_error(http.post(path, json=body), 400, param=param)


@pytest.mark.parametrize("content", ["hi", ""])
def test_ten_thousand_messages_are_answered_without_5xx(http: httpx.Client, content: str) -> None:
    body = {"messages": [{"role": "user", "content": content}] * 10_000, "max_tokens": 1}
    response = http.post(CHAT, json=body)
    if response.status_code != 200:
        check_error(response, 400, param="messages", code="context_length_exceeded")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat(messages=[{"role": "user", "content": "a\x00b"}])),
        (CHAT, chat(messages=[{"role": "user", "content": "\x00" * 100}])),
        (CHAT, chat(messages=[{"role": "user", "content": [{"type": "text", "text": "\x00"}]}])),
        (CHAT, chat(messages=[{"role": "user", "content": "hi", "name": "a\x00b"}])),
        (CHAT, chat(user="a\x00b")),
        (CHAT, chat(stop=["\x00", "a\x00b"])),
        (CHAT, chat(model="tiny\x00../../etc/passwd")),
        (COMPLETIONS, {"prompt": "a\x00b", "max_tokens": 2}),
        (COMPLETIONS, {"prompt": "\x00", "max_tokens": 2, "stream": True}),
    ],
)
def test_null_bytes_in_strings_are_answered_without_5xx(http: httpx.Client, path: str, body: dict[str, Any]) -> None:
    check_answer(http.post(path, json=body))


def test_null_byte_as_a_key_is_an_unsupported_parameter(http: httpx.Client) -> None:
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "\\u0000": 1}'
    # Quoted back escaped: no control character of a client's reaches a log or a terminal.
    check_error(post_raw(http, raw), 400, param="\\x00", code="unsupported_parameter")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ROUTES)
def test_other_methods_on_post_routes_are_a_405(http: httpx.Client, path: str, method: str) -> None:
    body = json.dumps(chat()).encode() if method in ("PUT", "PATCH") else None
    response = http.request(method, path, content=body)
    check_error(response, 405, param=None, code="method_not_allowed")
    assert "POST" in response.headers.get("allow", ""), response.headers


@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/chat/completions/extra", "/v1/chat", "/v2/completions"])
def test_unknown_route_is_a_404(http: httpx.Client, path: str) -> None:
    check_error(http.post(path, json=chat()), 404, param=None)


# -- the front door: content type, Host, Origin and credentials, varied together ---------------

FUZZ_KEY = "fuzz-key"
_HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)


@pytest.fixture(scope="module")
def keyed_host(tiny_model: Path) -> Iterator[Server]:
    running = start_server("--model", str(tiny_model), *SERVE_ARGS, env={"MLXHOST_API_KEY": FUZZ_KEY})
    yield running
    running.stop()


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


def test_fuzz_content_type_host_origin_and_credentials(keyed_host: Server) -> None:
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


# -- 3. after all of that ---------------------------------------------------------------------


def test_host_is_still_healthy_and_no_worker_restarted(host: Server) -> None:
    """Runs last in this module: everything above went to this one host."""
    with host.http(timeout=CLIENT_TIMEOUT) as client:
        health = client.get("/health")
        assert health.status_code == 200, health.text
        workers = health.json()["workers"]
        assert len(workers) == 1 and workers[0]["restarts"] == 0, workers
        assert workers[0]["state"] == "ready", workers
        check_success(client.post(CHAT, json=chat()))
        check_success(client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 2}))
        check_success(client.post(CHAT, json=chat(stream=True)))
    assert host.process.poll() is None
