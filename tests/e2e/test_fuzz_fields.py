"""Hand-written hostile field values are answered without 5xx, and never break a worker.

Numbers out of range or not JSON at all, tokens past the vocabulary, extreme penalties, model
names that look like paths, ten thousand messages, null bytes. The cases that once crashed or
poisoned a worker (out-of-range seeds, top_k past the vocabulary) run against a throwaway host of
their own, so a regression there cannot hide behind a broken shared one; the rest share this
module's host, which must still serve after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost
from tests.e2e import fuzzing
from tests.e2e.fuzzing import (
    CHAT,
    CLIENT_TIMEOUT,
    COMPLETIONS,
    ROUTES,
    chat,
    check_answer,
    check_error,
    check_still_serving,
    check_success,
    log_tail,
    post_raw,
    start_fuzz_host,
)

# The fixtures this module uses (see tests/e2e/fuzzing.py).
shared_host, host, http, vocab_size = fuzzing.shared_host, fuzzing.host, fuzzing.http, fuzzing.vocab_size


@pytest.fixture(scope="module")
def strict_host(tiny_model: Path) -> Iterator[RunningHost]:
    with start_fuzz_host(tiny_model, "--strict-models") as running:
        yield running


@pytest.fixture
def throwaway_host(tiny_model: Path) -> Iterator[RunningHost]:
    """A host of its own, for a request that crashes or poisons its worker."""
    with start_fuzz_host(tiny_model) as running:
        yield running


# -- numbers ---------------------------------------------------------------------------------


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
def test_seed_out_of_range_is_a_400(throwaway_host: RunningHost, seed: int) -> None:
    with throwaway_host.http(timeout=CLIENT_TIMEOUT) as client:
        response = client.post(CHAT, json=chat(seed=seed))
        assert response.status_code < 500, (response.status_code, response.content, log_tail(throwaway_host))
        check_error(response, 400, param="seed")
    check_still_serving(throwaway_host)


def test_top_k_over_the_vocabulary_is_a_400(throwaway_host: RunningHost, vocab_size: int) -> None:
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


# -- model names -----------------------------------------------------------------------------


PATH_LIKE_MODELS = ["../../etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "..", "/", "file:///etc/passwd", "C:\\Windows\\win.ini"]


def _served(server: RunningHost) -> tuple[list[str], list[str]]:
    health = server.health()
    return [m["id"] for m in health["models"]], [w["model"] for w in health["workers"]]


@pytest.mark.parametrize("model", PATH_LIKE_MODELS)
def test_path_like_model_is_answered_by_the_default_model(host: RunningHost, http: httpx.Client, model: str) -> None:
    before = _served(host)
    response = http.post(CHAT, json=chat(model=model))
    check_success(response)
    assert response.json()["model"] == before[0][0]
    assert _served(host) == before  # nothing loaded, no worker started


@pytest.mark.parametrize("model", PATH_LIKE_MODELS)
def test_path_like_model_is_a_404_with_strict_models(strict_host: RunningHost, model: str) -> None:
    before = _served(strict_host)
    with strict_host.http(timeout=CLIENT_TIMEOUT) as client:
        for path in ROUTES:
            body = chat(model=model) if path == CHAT else {"prompt": "hi", "max_tokens": 2, "model": model}
            response = client.post(path, json=body)
            check_error(response, 404, param="model", code="model_not_found")
    assert _served(strict_host) == before
    check_still_serving(strict_host)


def test_the_tiny_model_path_itself_loads_nothing_new(host: RunningHost, http: httpx.Client, tiny_model: Path) -> None:
    before = _served(host)
    check_success(http.post(CHAT, json=chat(model=str(tiny_model))))
    assert _served(host) == before


# -- strings and lists ----------------------------------------------------------------------


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


# -- the host itself -------------------------------------------------------------------------


def test_host_is_still_healthy_and_no_worker_restarted(host: RunningHost) -> None:
    """The shared host answers each kind of request from its one worker, never restarted.

    Whatever ran before it: every test that shares the host checks the same once it is done.
    """
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
