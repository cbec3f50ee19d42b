"""Prompt caching: a prompt that shares a prefix with an earlier request is not prefilled again."""

from __future__ import annotations

import uuid
from pathlib import Path

import openai

from conftest import Server, start_server


def ask(client: openai.OpenAI, messages: list[dict[str, str]], max_tokens: int = 16) -> tuple[str, int, int]:
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens, temperature=0)  # type: ignore[arg-type]
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    return reply.choices[0].message.content or "", usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


def fresh_question() -> list[dict[str, str]]:
    # A prompt no earlier request began with: only the chat template's opening can be shared.
    return [{"role": "user", "content": f"{uuid.uuid4().hex}: tell me about the harbour"}]


def test_a_repeated_prompt_is_served_from_the_cache_with_the_same_answer(client: openai.OpenAI) -> None:
    question = fresh_question()
    first, prompt_tokens, first_cached = ask(client, question)
    second, _, second_cached = ask(client, question)
    assert first_cached < prompt_tokens / 2
    assert second_cached == prompt_tokens - 1  # the last prompt token is computed to get logits
    assert second == first


def test_the_next_turn_of_a_chat_reuses_the_turn_before(client: openai.OpenAI) -> None:
    question = fresh_question()
    answer, first_prompt, _ = ask(client, question)
    follow_up = [*question, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    _, prompt_tokens, cached = ask(client, follow_up)
    # The first turn's prompt (at least) was not prefilled again.
    assert first_prompt <= cached < prompt_tokens


def test_streamed_usage_reports_cached_tokens(client: openai.OpenAI) -> None:
    question = fresh_question()
    ask(client, question)
    stream = client.chat.completions.create(
        model="tiny",
        messages=question,  # type: ignore[arg-type]
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = list(stream)[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_the_cache_keeps_at_most_its_size_and_can_be_turned_off(tiny_model: Path) -> None:
    small = start_server("--model", str(tiny_model), "--prompt-cache-size", "2")
    off = start_server("--model", str(tiny_model), "--prompt-cache-size", "0")
    try:
        with small.client() as client:
            for _ in range(5):
                ask(client, fresh_question(), max_tokens=4)
        kept = small.worker_health()["prompt_cache"]
        assert kept["entries"] == 2 and kept["lookups"] == 5
        with off.client() as client:
            question = fresh_question()
            ask(client, question, max_tokens=4)
            assert ask(client, question, max_tokens=4)[2] == 0
        assert off.worker_health()["prompt_cache"]["entries"] == 0
    finally:
        small.stop()
        off.stop()


def test_the_worker_reports_its_cache(server: Server, client: openai.OpenAI) -> None:
    question = fresh_question()
    before = server.worker_health()["prompt_cache"]
    ask(client, question)
    _, prompt_tokens, cached = ask(client, question)
    after = server.worker_health()["prompt_cache"]
    assert after["lookups"] == before["lookups"] + 2
    assert after["cached_tokens"] >= before["cached_tokens"] + cached == before["cached_tokens"] + prompt_tokens - 1
    assert after["entries"] >= 1 and after["bytes"] > 0
