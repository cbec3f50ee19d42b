"""What the batch leaves in the prompt cache (cache/memory.py) as its rows end.

The prompt cache gets what the batch can give it: the KV of every generation that ends with its
cache intact (finished, stopped by a stop string, or cancelled), and, for models whose cache
cannot be trimmed, a snapshot at the end of each prompt. Where a row starts from the cache is
intake's part (intake.py); when rows end, the step loop's (batching.py). In a group, each
follower keeps the same entries in the same order (`follow` in group.py).

Runs in the generation thread only.
"""

from __future__ import annotations

from typing import Any

from mlxhost.worker.cache.memory import PromptCache
from mlxhost.worker.engine.intake import Row

__all__ = ["keep_finished", "keep_removed", "keep_snapshots"]


def keep_finished(prompt_cache: PromptCache, row: Row, response: Any) -> None:
    """Keep the KV of a row that ended inside the generator (its KV intact), if it is one to keep."""
    if response.prompt_cache is not None and row.session.request.keep_cache:
        prompt_cache.keep(response.all_tokens, response.prompt_cache, row.session.request.cache_namespace)


def keep_removed(prompt_cache: PromptCache, generator: Any, rows: list[Row]) -> None:
    """Remove `rows` from the generator, keeping the KV cache of those that want it kept."""
    keep = [row for row in rows if row.session.request.keep_cache and prompt_cache.enabled]
    caches = generator.remove([row.uid for row in rows], return_prompt_caches=bool(keep))
    for row in keep:
        cache, tokens = caches.get(row.uid, (None, []))
        # Not one still queued: its KV is only the entry it started from, kept already.
        if cache is not None and len(tokens) > row.cached:
            prompt_cache.keep(list(tokens), cache, row.session.request.cache_namespace)


def keep_snapshots(
    prompt_cache: PromptCache, generator: Any, prompt_responses: list[Any], rows: dict[int, Row]
) -> None:
    """Keep the KV of each row whose prompt (all but its last token) was just prefilled."""
    # The prompt's last token is a segment of its own (BatchGenerator makes it one), so a
    # segment that ends short of the prompt's end leaves the KV holding prompt[:-1]. Kept,
    # it starts the next turn (prompt + reply + new message) even when the cache cannot
    # be trimmed and the template rewrote the reply.
    uids = []
    for response in prompt_responses:
        row = rows.get(response.uid)
        ended = response.end_of_segment and not response.end_of_prompt
        wanted = row is not None and row.session.request.keep_cache and row.session.cancel_reason is None
        if ended and wanted:
            uids.append(response.uid)
    if not uids:
        return
    for uid, (cache, tokens) in generator.extract_cache(uids).items():
        if len(tokens) > rows[uid].cached:
            prompt_cache.keep(list(tokens), cache, rows[uid].session.request.cache_namespace)
