"""Intake: sessions on their way from the event loop into the batch.

The event loop submits sessions (`submit`); between two steps the generation thread takes them
in (`take`) and inserts them into the BatchGenerator, each row starting from the longest entry
the prompt cache holds for its prompt, with its own sampler and logits processors (its grammar's
mask among them), and tracked by a `Row` from then on. On the way:

- while the pause gate is closed (a managed job holds the machine, see pause.py) no session is
  taken in: those submitted meanwhile wait, in order, until the gate opens;
- a session cancelled before it got in is answered at once, even while the gate is closed;
- a session whose prompt the disk tier (cache/disk.py) can start much further along than memory
  goes to the store's loader thread first and comes back, through `_loaded`, with the entry in
  the memory tier, first in line again.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

from mlxhost.worker.cache.disk_index import worth_loading
from mlxhost.worker.cache.files import Entry
from mlxhost.worker.cache.memory import PromptCache
from mlxhost.worker.engine.generation import GenerationSession
from mlxhost.worker.engine.grammar_mask import GrammarProcessor
from mlxhost.worker.engine.group import Insert, LeadingGenerator, insert_requests
from mlxhost.worker.engine.sampling import SamplerCache, processors_for
from mlxhost.worker.engine.textstream import TextStream
from mlxhost.worker.engine.tokenizer import Tokenizer

__all__ = ["Intake", "Row"]


@dataclass
class Row:
    """A session in the batch, under the generator's uid."""

    session: GenerationSession
    uid: int
    text: TextStream
    tokens: int = 0
    cached: int = 0  # prompt tokens taken from the prompt cache
    grammar: GrammarProcessor | None = None  # its output's constraint, which may fail


class Intake:
    """The sessions submitted and not yet in the batch, and their way in."""

    def __init__(self, prompt_cache: PromptCache, wake: threading.Event) -> None:
        # Touched by the event loop too: sessions come in through `incoming`, and `wake` rouses
        # the generation thread.
        self.incoming: queue.SimpleQueue[GenerationSession] = queue.SimpleQueue()
        self.waiting = 0  # submitted, not yet taken in
        self._wake = wake
        self._prompt_cache = prompt_cache
        self._sampler_cache = SamplerCache()
        self._deferred: list[GenerationSession] = []  # taken from `incoming` while paused, in order
        # Sessions back from the disk tier's loader thread, with what it read (None: unusable).
        self._loaded: queue.SimpleQueue[tuple[GenerationSession, Entry, int, list[Any] | None]]
        self._loaded = queue.SimpleQueue()
        self._loading = 0  # sessions with the loader now
        self._from_disk: set[GenerationSession] = set()  # back from the loader, not yet inserted

    def submit(self, session: GenerationSession) -> None:
        """On the event loop: queue `session` for the thread to take in before its next step."""
        self.waiting += 1
        self.incoming.put(session)
        self._wake.set()

    def idle(self) -> bool:
        """Whether no session is on its way in: none submitted, held by the gate or loading."""
        return self.incoming.empty() and not self._deferred and not self._loading

    def take(
        self, generator: Any, tokenizer: Tokenizer, vocab_size: int, paused: bool
    ) -> tuple[list[GenerationSession], list[Row]] | None:
        """In the generation thread: the sessions found cancelled before they got in, and the rows
        of those inserted into `generator` now; None when no session came."""
        # All of them are counted in `waiting`, those back from the loader too (submitted, not
        # yet in the batch).
        sessions = self._back_from_disk()
        sessions += self._deferred
        self._deferred = []
        while True:
            try:
                sessions.append(self.incoming.get_nowait())
            except queue.Empty:
                break
        if not sessions:
            return None
        cancelled = []
        admitted = []
        for session in sessions:
            if session.cancel_reason is not None:
                # Answered even while paused: a client that left must not wait for the job.
                self._from_disk.discard(session)
                cancelled.append(session)
            elif paused:
                self._deferred.append(session)
            else:
                admitted.append(session)
        inserted = [s for s in admitted if not self._load_first(s)]
        self.waiting -= len(sessions) - len(self._deferred) - (len(admitted) - len(inserted))
        rows = self._insert(generator, tokenizer, vocab_size, inserted) if inserted else []
        return cancelled, rows

    def _insert(
        self, generator: Any, tokenizer: Tokenizer, vocab_size: int, admitted: list[GenerationSession]
    ) -> list[Row]:
        prompt_cache = self._prompt_cache
        starts = [prompt_cache.take(s.request.prompt, s.request.cache_namespace) for s in admitted]
        cached = [len(s.request.prompt) - len(rest) for s, (_, rest) in zip(admitted, starts, strict=True)]
        insert = Insert(
            [s.request for s in admitted],
            [rest for _, rest in starts],
            [s.request.prompt[:n] for s, n in zip(admitted, cached, strict=True)],
        )
        caches = [cache for cache, _ in starts]
        processors = [processors_for(s.request, vocab_size) for s in admitted]
        samplers = self._sampler_cache
        if isinstance(generator, LeadingGenerator):  # a group's rank 0: the followers first
            uids = generator.insert_requests(samplers, insert, caches, vocab_size, processors)
        else:
            uids = insert_requests(generator, samplers, insert, caches, vocab_size, processors)
        self._from_disk.difference_update(admitted)
        rows = []
        for uid, session, hit, own in zip(uids, admitted, cached, processors, strict=True):
            detokenizer = tokenizer.decoder.detokenizer
            text = TextStream(detokenizer, session.request.stop, tokenizer.control)
            grammar = next((p for p in own if isinstance(p, GrammarProcessor)), None)
            rows.append(Row(session, uid, text, cached=hit, grammar=grammar))
        return rows

    def _load_first(self, session: GenerationSession) -> bool:
        """Hand `session` to the disk tier's loader if the disk starts it much further along."""
        disk = self._prompt_cache.disk
        if disk is None or session in self._from_disk:
            return False
        request = session.request
        entry, covered = disk.find(request.prompt, request.cache_namespace)
        in_memory = self._prompt_cache.usable(request.prompt, request.cache_namespace)
        if entry is None or not worth_loading(covered, in_memory):
            return False

        def done(cache: list[Any] | None) -> None:  # in the loader thread
            self._loaded.put((session, entry, covered, cache))
            self._wake.set()

        self._loading += 1
        disk.load_soon(entry, done)
        return True

    def _back_from_disk(self) -> list[GenerationSession]:
        # First in line again: they were submitted before anything still in `incoming`.
        sessions: list[GenerationSession] = []
        while True:
            try:
                session, entry, covered, cache = self._loaded.get_nowait()
            except queue.Empty:
                return sessions
            self._loading -= 1
            self._from_disk.add(session)  # not sent to the loader twice, whatever it found
            if cache is not None and self._prompt_cache.disk is not None:
                # Into the memory tier, where `PromptCache.take` finds it like any other entry.
                self._prompt_cache.adopt(list(entry.tokens), cache, session.request.cache_namespace)
                self._prompt_cache.disk.note_hit(covered)
            sessions.append(session)
