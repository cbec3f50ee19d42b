"""Prompt caching: a prompt that shares a prefix with an earlier request is not prefilled again."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import openai

from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.headers import CACHE_SCOPE_HEADER


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
    small = start_host("--model", str(tiny_model), "--prompt-cache-size", "2")
    off = start_host("--model", str(tiny_model), "--prompt-cache-size", "0")
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


def test_the_worker_reports_its_cache(server: RunningHost, client: openai.OpenAI) -> None:
    question = fresh_question()
    before = server.worker_health()["prompt_cache"]
    ask(client, question)
    _, prompt_tokens, cached = ask(client, question)
    after = server.worker_health()["prompt_cache"]
    assert after["lookups"] == before["lookups"] + 2
    assert after["cached_tokens"] >= before["cached_tokens"] + cached == before["cached_tokens"] + prompt_tokens - 1
    assert after["entries"] >= 1 and after["bytes"] > 0


def ask_worker(server: RunningHost, messages: list[dict[str, str]], scope: str | None) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a chat sent straight to the worker, as the parent would."""
    headers = {CACHE_SCOPE_HEADER: scope} if scope is not None else {}
    body = {"messages": messages, "max_tokens": 4, "temperature": 0}
    transport = httpx.HTTPTransport(uds=server.worker()["socket"])
    with httpx.Client(base_url="http://worker", transport=transport, timeout=60) as http:
        usage = http.post("/v1/chat/completions", json=body, headers=headers).json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def test_a_caller_never_starts_from_another_callers_cached_prompt(server: RunningHost) -> None:
    question = fresh_question()
    alice, bob = f"alice-{uuid.uuid4().hex}", f"bob-{uuid.uuid4().hex}"
    prompt_tokens, _ = ask_worker(server, question, alice)
    assert ask_worker(server, question, alice)[1] == prompt_tokens - 1
    # Bob's scope holds nothing yet: not even the chat template's opening is shared with Alice.
    assert ask_worker(server, question, bob)[1] == 0
    assert ask_worker(server, question, bob)[1] == prompt_tokens - 1  # his own entry, now
    # The shared scope (no header) has at most the template's opening, from other requests.
    assert ask_worker(server, question, None)[1] < prompt_tokens / 2


def test_cache_salt_keeps_a_callers_requests_apart(client: openai.OpenAI) -> None:
    question = fresh_question()

    def cached(salt: str | None) -> tuple[int, int]:
        extra = {"cache_salt": salt} if salt else {}
        reply = client.chat.completions.create(
            model="tiny", messages=question, max_tokens=4, temperature=0, extra_body=extra  # type: ignore[arg-type]
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        return reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens or 0

    salt = uuid.uuid4().hex
    prompt_tokens, _ = cached(salt)
    assert cached(salt) == (prompt_tokens, prompt_tokens - 1)
    assert cached(uuid.uuid4().hex) == (prompt_tokens, 0)
    assert cached(None)[1] < prompt_tokens / 2


def test_namespaces_whose_entries_are_gone_are_forgotten() -> None:
    # Each cache_salt is a namespace; a client sending a new salt with every request must not
    # grow the worker's memory once its entries have been evicted.
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from mlxhost.worker.cache.memory import PromptCache

    def kv_cache(tokens: int) -> list[KVCache]:
        cache = KVCache()
        cache.update_and_fetch(mx.zeros((1, 1, tokens, 4)), mx.zeros((1, 1, tokens, 4)))
        return [cache]

    cache = PromptCache(entries=2, max_bytes=1 << 30)
    for salt in range(100):
        cache.keep([1, 2, 3], kv_cache(3), ("scope", f"salt-{salt}"))
    assert cache.statistics().entries == 2
    assert len(cache._lru._trie._trie) == 2  # one trie root per namespace that still has entries
    assert cache.take([1, 2, 3, 4], ("scope", "salt-99"))[1] == [4]
    assert cache.take([1, 2, 3, 4], ("scope", "salt-0")) == (None, [1, 2, 3, 4])
