"""A model split across MLX ranks: rank 0 batches, the other ranks follow it step by step.

Tensor or pipeline parallel, every rank must run the same forward passes over the same rows in the
same order, or the collectives inside the model pair up the wrong tensors. Rank 0 runs the engine
as a single worker does (batching.py); its BatchGenerator is wrapped in `LeadingGenerator`, which
sends each call that changes the batch (insert, remove, step, close) to the followers before making
it. A follower (`follow`) makes the same calls on a generator of its own, built with the same
options over its shard of the model.

Both sides sample for themselves: the logits leaving the model are the same on every rank (the
last collective gives each the whole sum), and so are the samplers, the logits processors (built
from the request each insert carries) and MLX's random state (every rank seeds it alike), so each
rank picks the same token and feeds it back. The messages travel through MLX's own collectives on
the group (`Link`): nothing home-made for transport, and they queue behind the model's own
collectives in the one stream that orders them.

The prompt cache follows rank 0's the same way (`follow`): each rank keeps its own shard of the
same entries. A pipelined group has none: its ranks hold different layers, so the same entries
take different bytes on each and the byte bound would evict differently.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from mlxhost.worker.cache.memory import PromptCache
from mlxhost.worker.engine.generation import GenerationRequest
from mlxhost.worker.engine.sampling import LogitsProcessor, SamplerCache, processors_for

__all__ = [
    "GroupDiverged",
    "Insert",
    "LeadingGenerator",
    "Link",
    "describe_ranks",
    "follow",
    "insert_requests",
]

# A message travels in one collective when it fits here with its length (a step's message is a
# few bytes; an insert carries its prompts); a longer one takes a second collective for the rest.
INLINE = 4096
SEED = 0  # MLX's random state on every rank, so that sampling agrees


class Link:
    """Messages from rank 0 to every other rank of `group`, over the group's collectives.

    A broadcast is a sum in which only rank 0 has anything but zeros: every backend MLX has
    implements `all_sum`, and no other primitive is needed. The sums run on `stream`, the
    generator's: a collective on another stream could run before the model's collectives queued
    ahead of it, and pair with the wrong one on the other ranks.
    """

    def __init__(self, group: mx.distributed.Group, stream: Any) -> None:
        self.group = group
        self.rank = group.rank()
        self.stream = stream

    def send(self, message: bytes) -> None:
        assert self.rank == 0, "only rank 0 sends"
        head = struct.pack("<I", len(message)) + message[: INLINE - 4]
        self._sum(head.ljust(INLINE, b"\0"))
        if len(message) > INLINE - 4:
            self._sum(message[INLINE - 4 :])

    def receive(self) -> bytes:
        assert self.rank != 0, "rank 0 only sends"
        head = self._sum(bytes(INLINE))
        (length,) = struct.unpack_from("<I", head)
        message = head[4 : 4 + length]
        if length > INLINE - 4:
            message += self._sum(bytes(length - (INLINE - 4)))
        return message

    def _sum(self, data: bytes) -> bytes:
        array = mx.array(np.frombuffer(data, dtype=np.uint8))
        total = mx.distributed.all_sum(array, group=self.group, stream=self.stream)
        mx.eval(total)
        return np.asarray(total).tobytes()


HOST_BYTES = 64  # a rank's host name, as it reports it (cut to this)


def describe_ranks(group: mx.distributed.Group) -> list[dict[str, Any]]:
    """Every rank's number, host name and pid, as each says: a collective, so on every rank at once."""
    size, rank = group.size(), group.rank()
    rows = np.zeros((size, 8 + HOST_BYTES), dtype=np.uint8)
    rows[rank, :8] = np.frombuffer(struct.pack("<q", os.getpid()), dtype=np.uint8)
    host = socket.gethostname().encode()[:HOST_BYTES]
    rows[rank, 8 : 8 + len(host)] = np.frombuffer(host, dtype=np.uint8)
    total = mx.distributed.all_sum(mx.array(rows), group=group, stream=mx.cpu)
    table = np.asarray(total)
    return [
        {
            "rank": r,
            "host": bytes(table[r, 8:]).rstrip(b"\0").decode(errors="replace"),
            "pid": struct.unpack("<q", bytes(table[r, :8]))[0],
        }
        for r in range(size)
    ]


@dataclass(frozen=True)
class Insert:
    """Rows to add to the batch: what each rank needs to build the same rows."""

    requests: list[GenerationRequest]
    prompts: list[list[int]]  # what each row still has to prefill
    all_tokens: list[list[int]]  # what its cache already holds


def insert_requests(
    generator: Any,
    samplers: SamplerCache,
    insert: Insert,
    caches: list[Any] | None,
    vocab_size: int,
    processors: list[list[LogitsProcessor]] | None = None,
) -> list[int]:
    """Add `insert`'s rows to `generator`; their uids, in order. `processors`: each row's logits
    processors, when the caller keeps them (built from the requests otherwise)."""
    requests = insert.requests
    # The row batch tests sampled rows' drafts against their sampling settings (speculation.py);
    # mlx-lm's BatchGenerator takes no such argument.
    drafts = {"sampling": [r.sampling for r in requests]} if hasattr(generator, "draft_tokens") else {}
    return list(
        generator.insert(
            insert.prompts,
            max_tokens=[r.max_tokens for r in requests],
            caches=caches,
            all_tokens=insert.all_tokens,
            samplers=[samplers.sampler_for(r.sampling) for r in requests],
            logits_processors=processors or [processors_for(r, vocab_size) for r in requests],
            **drafts,
        )
    )


class GroupDiverged(RuntimeError):
    """A follower's batch or prompt cache no longer matches rank 0's: the group must restart."""


class LeadingGenerator:
    """Rank 0's BatchGenerator: each call that changes the batch goes to the followers first."""

    def __init__(self, generator: Any, link: Link) -> None:
        self._generator = generator
        self._link = link

    def insert_requests(
        self,
        samplers: SamplerCache,
        insert: Insert,
        caches: list[Any] | None,
        vocab_size: int,
        processors: list[list[LogitsProcessor]] | None = None,
    ) -> list[int]:
        self._link.send(pickle.dumps(("insert", insert)))
        return insert_requests(self._generator, samplers, insert, caches, vocab_size, processors)

    def remove(self, uids: list[int], return_prompt_caches: bool = False) -> Any:
        self._link.send(pickle.dumps(("remove", (list(uids), return_prompt_caches))))
        return self._generator.remove(uids, return_prompt_caches=return_prompt_caches)

    def extract_cache(self, uids: list[int]) -> Any:
        self._link.send(pickle.dumps(("extract", list(uids))))
        return self._generator.extract_cache(uids)

    @property
    def counters(self) -> Any:
        """The batch's speculation counters (rows/speculation.py), where it has them."""
        return getattr(self._generator, "counters", None)

    def next(self) -> Any:
        self._link.send(pickle.dumps(("next", None)))
        return self._generator.next()

    def close(self) -> None:
        try:
            self._link.send(pickle.dumps(("close", None)))
        finally:
            self._generator.close()


@dataclass
class _Row:
    request: GenerationRequest
    cached: int  # prompt tokens its cache started with


def follow(
    generator: Any,
    link: Link,
    vocab_size: int,
    prompt_cache: PromptCache,
    on_step: Callable[[], object] = lambda: None,
) -> None:
    """A follower's loop: make rank 0's calls on `generator` until rank 0 closes it.

    The prompt cache follows too. A rank's cache holds its own shard of each entry, but which
    entries it holds, and which one a prompt starts from, must be rank 0's: so every call that
    takes or keeps an entry on rank 0 (intake.py, cache_keeping.py) is made here with the same
    tokens, in the same order, under the same bounds. Each take is checked against rank 0's: a
    follower that starts a row from another entry would pair the wrong KV with rank 0's, and
    `GroupDiverged` ends the group instead.

    The messages are pickles, read only from rank 0 of the same group: processes this host
    started with `mlx.launch`, never a client.
    """
    samplers = SamplerCache()
    rows: dict[int, _Row] = {}

    def keep(uid: int, tokens: list[int], cache: Any) -> None:
        row = rows.get(uid)
        if row is not None and row.request.keep_cache and len(tokens) > row.cached:
            prompt_cache.keep(list(tokens), cache, row.request.cache_namespace)

    try:
        while True:
            kind, argument = pickle.loads(link.receive())  # noqa: S301 - see the docstring
            if kind == "insert":
                insert: Insert = argument
                caches = []
                for request, rest in zip(insert.requests, insert.prompts, strict=True):
                    cache, mine = prompt_cache.take(request.prompt, request.cache_namespace)
                    if len(mine) != len(rest):
                        raise GroupDiverged(
                            f"rank 0 prefills {len(rest)} tokens of a prompt, this rank {len(mine)}"
                        )
                    caches.append(cache)
                uids = insert_requests(generator, samplers, insert, caches, vocab_size)
                for uid, request, rest in zip(uids, insert.requests, insert.prompts, strict=True):
                    rows[uid] = _Row(request, len(request.prompt) - len(rest))
            elif kind == "remove":
                uids, return_caches = argument
                removed = generator.remove(uids, return_prompt_caches=return_caches)
                for uid in uids:
                    if return_caches and uid in removed:
                        keep(uid, *reversed(removed[uid]))
                    rows.pop(uid, None)
            elif kind == "extract":
                for uid, (cache, tokens) in generator.extract_cache(argument).items():
                    keep(uid, tokens, cache)
            elif kind == "next":
                _, responses = generator.next()
                for response in responses:
                    if response.finish_reason is not None:
                        if response.prompt_cache is not None:
                            keep(response.uid, response.all_tokens, response.prompt_cache)
                        rows.pop(response.uid, None)
                on_step()
            elif kind == "close":
                return
            else:
                raise ValueError(f"rank 0 sent an unknown call: {kind!r}")
    finally:
        generator.close()
