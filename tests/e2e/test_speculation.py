"""Speculative decoding as a client sees it: one host serves the tiny model four times, verifying
every row's drafts ("tiny", `speculate = "always"`: which steps verify does not depend on this
machine's timing), verifying them where they pay ("priced", the default), drafting with a draft
model ("drafted", another tiny model) and not drafting ("plain", `speculate = "off"`). Greedy
answers, their logprobs, stop strings and max_tokens are the same; the drafts show in the usage
and the worker's counters; a draft model of another tokenizer is refused, saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host, wait_until

# Things said twice: the answers re-quote them (and the tiny model repeats itself), so rows draft.
PROMPTS = [
    "Copy this: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta.",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n",
    "Hi",
    "Tell me about the sea, the sea, the sea.",
]


@pytest.fixture(scope="module")
def host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    folder = tmp_path_factory.mktemp("speculation")
    other = make_model(folder / "other", size="tiny", seed=3)  # the same tokenizer, other weights
    config = folder / "models.toml"
    config.write_text(
        f'[[model]]\nid = "tiny"\npath = "{tiny_model}"\npreload = true\nspeculate = "always"\n\n'
        f'[[model]]\nid = "priced"\npath = "{tiny_model}"\npreload = true\n\n'
        f'[[model]]\nid = "drafted"\npath = "{tiny_model}"\npreload = true\nspeculate = "always"\n'
        f'draft = "{other}"\ndraft_tokens = 3\n\n'
        f'[[model]]\nid = "plain"\npath = "{tiny_model}"\npreload = true\nspeculate = "off"\n'
    )
    with start_host("--config", str(config), "--max-resident", "4", timeout=120) as running:
        yield running


def _answer(client: openai.OpenAI, model: str, prompt: str, **options: Any) -> Any:
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=options.pop("max_tokens", 60),
        temperature=0,
        **options,
    )


def test_greedy_answers_and_logprobs_are_those_without_drafts(host: RunningHost) -> None:
    with host.client() as client:
        for prompt in PROMPTS:
            drafted = _answer(client, "tiny", prompt, logprobs=True, top_logprobs=2)
            plain = _answer(client, "plain", prompt, logprobs=True, top_logprobs=2)
            assert drafted.choices[0].message.content == plain.choices[0].message.content
            assert drafted.choices[0].finish_reason == plain.choices[0].finish_reason
            ours, theirs = drafted.choices[0].logprobs.content, plain.choices[0].logprobs.content
            assert [t.token for t in ours] == [t.token for t in theirs]
            assert [t.logprob for t in ours] == pytest.approx([t.logprob for t in theirs], abs=1e-3)
            for model in ("priced", "drafted"):
                other = _answer(client, model, prompt)
                assert other.choices[0].message.content == plain.choices[0].message.content
    drafting, off = host.engine("tiny"), host.engine("plain")
    assert drafting["accepted_tokens"] > 0
    assert drafting["verified_tokens"] > drafting["verifications"]  # more than one token a pass
    assert off["drafted_tokens"] == 0
    by_model = host.engine("drafted")
    assert by_model["drafted_tokens"] > by_model["accepted_tokens"] > 0  # another model's guesses


def test_a_draft_model_of_another_tokenizer_is_refused_saying_why(tiny_model: Path, tmp_path: Path) -> None:
    other = make_model(tmp_path / "qwen", size="tiny", family="qwen3_coder")  # other special tokens
    config = tmp_path / "models.toml"
    config.write_text(f'[[model]]\nid = "tiny"\npath = "{tiny_model}"\ndraft = "{other}"\n')
    with start_host("--config", str(config), timeout=120) as running, running.http() as http:
        reply = http.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "worker_cannot_start"
    assert "has another tokenizer than the model" in error["message"]
    assert str(other) in error["message"]
    # What differs, by name: not "1024 tokens against 1024, 2030 differing".
    assert "under other ids" in error["message"] or "only in the" in error["message"], error["message"]
    assert "'" in error["message"]  # a token named


def test_the_usage_the_session_and_the_metrics_tell_the_drafts(host: RunningHost) -> None:
    with host.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="tiny",
            messages=[{"role": "user", "content": PROMPTS[0]}],
            max_tokens=120,
            temperature=0,
        )
        reply = raw.parse()
        plain = _answer(client, "plain", PROMPTS[0], max_tokens=120)
    details = reply.usage.completion_tokens_details
    accepted, refused = details.accepted_prediction_tokens, details.rejected_prediction_tokens
    assert 0 < accepted < reply.usage.completion_tokens
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert plain.usage.completion_tokens_details.rejected_prediction_tokens == 0
    # The operator sees the same counts on the session, and the worker's totals on /metrics.
    session = raw.headers["x-mlxhost-session"]
    with host.http() as http:
        record = http.get("/admin/sessions").json()
        outcome = next(s for s in record["recent"] if s["id"] == session)["outcome"]
        assert (outcome["drafted_tokens"], outcome["accepted_tokens"]) == (accepted + refused, accepted)
        engine = host.engine("tiny")

        def metrics() -> str | None:
            text = http.get("/metrics").text
            line = f'mlxhost_accepted_draft_tokens_total{{model="tiny"}} {float(engine["accepted_tokens"])}'
            return text if line in text else None

        text = wait_until(metrics, timeout=10)
    assert 'mlxhost_draft_acceptance_ratio{model="tiny"}' in text
    assert 'mlxhost_tokens_per_verification{model="tiny"}' in text


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 33])
def test_max_tokens_and_stop_strings_end_where_they_would(host: RunningHost, max_tokens: int) -> None:
    with host.client() as client:
        plain = _answer(client, "plain", PROMPTS[1], max_tokens=max_tokens)
        drafted = _answer(client, "tiny", PROMPTS[1], max_tokens=max_tokens)
        assert drafted.choices[0].message.content == plain.choices[0].message.content
        assert drafted.usage.completion_tokens == plain.usage.completion_tokens == max_tokens
        text = _answer(client, "plain", PROMPTS[1]).choices[0].message.content or ""
        stop = text[len(text) // 2 : len(text) // 2 + 3]
        if stop.strip():
            ended = [_answer(client, m, PROMPTS[1], stop=[stop]) for m in ("tiny", "plain")]
            assert ended[0].choices[0].message.content == ended[1].choices[0].message.content
            assert ended[0].choices[0].finish_reason == ended[1].choices[0].finish_reason == "stop"


def test_streams_side_by_side_are_what_they_are_alone(host: RunningHost) -> None:
    import asyncio

    async def one(client: openai.AsyncOpenAI, model: str, prompt: str) -> str:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=60,
            temperature=0,
            stream=True,
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main(model: str) -> list[str]:
        async with host.async_client() as client:
            return await asyncio.gather(*(one(client, model, p) for p in PROMPTS * 2))

    assert asyncio.run(main("tiny")) == asyncio.run(main("plain"))


def test_a_client_that_leaves_stops_its_drafting_row_within_a_step(host: RunningHost) -> None:
    def engine_once(predicate: Any) -> dict[str, Any]:
        def counters() -> dict[str, Any] | None:
            engine = host.engine("tiny")
            return engine if predicate(engine) else None

        return wait_until(counters, timeout=30)

    before = engine_once(lambda c: c["active"] == 0)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPTS[0]}],
        "max_tokens": 4000,
        "temperature": 0,
        "stream": True,
    }
    with host.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        received = [line for line, _ in zip(response.iter_lines(), range(100), strict=False)]
        assert any(line.startswith("data: ") for line in received)
    after = engine_once(lambda c: c["cancelled"] == before["cancelled"] + 1 and c["active"] == 0)
    assert after["accepted_tokens"] > before["accepted_tokens"]  # it was drafting
    assert after["last_cancel_lag_steps"] <= 1
    assert after["generated_tokens"] - before["generated_tokens"] < 4000
    assert host.engine("tiny")["generated_tokens"] == after["generated_tokens"]
