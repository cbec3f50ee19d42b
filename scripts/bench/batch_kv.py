"""--batch-kv: mlx-lm's `BatchGenerator` against mlxhost's `RowBatch` (each row its own KV cache),
in this process, on the same model, decode only.

Three measurements, their runs interleaved in rounds (in each round every group of runs that a
ratio compares runs back to back, in an order that rotates from round to round), medians of at
least 3 rounds (`bench.batch_kv_figures` has the arithmetic and the table):

mixed      eight rows of one short length ("aligned") against one long row and seven short ones
           ("mixed"): on the tiny model 64-token rows and a 2,000-token one, on any other model
           32-token rows and a 600- then a 4,000-token one. With each, the mixed batch's KV bytes
           at the end (`prompt_cache_nbytes`) beside the rows' own (`KVGeometry.own_bytes`).
kv_bits    RowBatch with 4-bit KV against RowBatch without, on the first mixed batch: bytes and
           tok/s. The tiny model's heads (16 dimensions) are too narrow for MLX to quantize, so on
           the tiny size this runs on the `quantizable` demo model (the tiny one with a head of 64).
staggered  4, 8 and 16 short rows inserted one per step against all at once, each generator.

Every row starts from a cache that already holds its prompt but the last token, filled with
random keys and values by the cache's own `update_and_fetch` (so its buffer is as one prefill
chunk leaves it), and the last token as what the generator computes: both generators go straight
to decoding. A decode step costs the same whatever the values in the KV are, and this machine's
CPU prefills the bench model at about 50 tokens/s, so a 4,000-token prompt would take over a
minute a run, all of it outside what is measured. The rows' tokens are distinct (no prompt
cache is involved: neither generator has one). No stop tokens, max_tokens far past the run, so no
row ends while it is timed (a row that does is an error).

Raw BatchGenerator runs with the server's batch sizes (`bench.settings`). The attention seam
RowBatch installs in mlx-lm's model modules (one isinstance check per layer for a BatchKVCache) is
installed before the first run, so that every raw run sees the same code.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache

from bench.batch_kv_figures import (
    MIXED_TARGET,
    BatchKVDocument,
    BatchKVSummary,
    DecodeRun,
    KVGeometry,
    kv_bits_figures,
    kv_geometry,
    mixed_figures,
    print_batch_kv,
    skipped_kv_bits,
    staggered_figures,
)
from bench.figures import progress
from bench.plan import Plan
from bench.raw import RawMLX
from bench.settings import MAX_BATCH, PREFILL_BATCH
from mlxhost import demo
from mlxhost.worker.engine.rows.attention import install
from mlxhost.worker.engine.rows.batch import RowBatch, row_cache, set_growth
from mlxhost.worker.engine.rows.support import quantized_reason

__all__ = ["BatchKVDocument", "measure_batch_kv", "print_batch_kv"]

MIN_ROUNDS = 3
ROWS = 8  # the mixed scenario's batch: one long row and ROWS - 1 short ones
KV_BITS, KV_GROUP_SIZE = 4, 64
WARM_STEPS = 2  # steps after every row's first token, before timing: both pipelines full
MAX_TOKENS = 1_000_000  # far past any run: no row ends while timed
FIRST_TOKEN_STEPS = 64  # a run whose rows have not all had a token by then is broken


@dataclass(frozen=True)
class Lengths:
    """One model size's scenarios."""

    short: int  # every short row's prompt tokens, and the staggered rows'
    longs: tuple[int, ...]  # the long row of each mixed batch
    steps: int  # decode steps timed per run
    staggered: tuple[int, ...]  # rows in each staggered scenario


# Steps: enough for the run to take a second or more on this 2-core CPU (the tiny model decodes
# hundreds of steps a second, the bench model a few).
TINY = Lengths(short=64, longs=(2000,), steps=300, staggered=(4, 8, 16))
OTHER = Lengths(short=32, longs=(600, 4000), steps=10, staggered=(4, 8, 16))
SMOKE = Lengths(short=16, longs=(256,), steps=4, staggered=(4,))
KV_MODEL = {"tiny": "quantizable"}  # the size kv_bits runs on where the main one cannot quantize


@dataclass(frozen=True)
class Arm:
    """One run's setting: its scenario, generator, rows' prompt lengths and how they go in."""

    scenario: str
    generator: str  # "raw" or "rows"
    lengths: tuple[int, ...]
    staggered: bool = False
    kv_bits: int | None = None
    on_kv_model: bool = False


@dataclass(frozen=True)
class Loaded:
    """A model and what its KV holds per token."""

    model: Any
    geometry: KVGeometry
    size: str


def row_prompt(index: int, length: int) -> list[int]:
    """A prompt of `length` tokens, distinct from every other row's (ids under 1,000: any model's)."""
    return [(index * 131 + i * 7) % 997 + 3 for i in range(length)]


def filled_cache(cache: list[Any], geometry: KVGeometry, tokens: int, seed: int) -> list[Any]:
    """`cache` (an empty cache of a row) holding `tokens` tokens of random keys and values."""
    if tokens > 0:
        set_growth(cache, tokens)  # the buffer a RowBatch's own prefill would have grown
        dtype = getattr(mx, geometry.dtype)
        shape = (1, geometry.kv_heads, tokens, geometry.head_dim)
        keys = mx.random.split(mx.random.key(seed), 2 * len(cache))
        for e, layer in enumerate(cache):
            layer.update_and_fetch(
                mx.random.normal(shape, dtype, key=keys[2 * e]),
                mx.random.normal(shape, dtype, key=keys[2 * e + 1]),
            )
        mx.eval([layer.state for layer in cache])
    return cache


def decode_run(arm: Arm, loaded: Loaded, steps: int, number: int) -> DecodeRun:
    """The arm's rows into a fresh generator; `steps` decode steps timed after every row's first
    token (and WARM_STEPS more)."""
    gc.collect()
    mx.clear_cache()
    model = loaded.model
    if arm.generator == "raw":
        generator: Any = BatchGenerator(
            model, stop_tokens=None, completion_batch_size=MAX_BATCH, prefill_batch_size=PREFILL_BATCH
        )
    else:
        generator = RowBatch(model, stop_tokens=[], max_batch=MAX_BATCH, kv_bits=arm.kv_bits)
    counts: dict[int, int] = {}

    def step() -> int:
        _, generated = generator.next()
        for response in generated:
            if response.finish_reason is not None:
                raise RuntimeError(f"row {response.uid} ended ({response.finish_reason}) while timed")
            counts[response.uid] = counts.get(response.uid, 0) + 1
        return len(generated)

    try:
        uids: list[int] = []
        for index, length in enumerate(arm.lengths):
            prompt = row_prompt(index, length)
            empty = make_prompt_cache(model) if arm.generator == "raw" else row_cache(model, arm.kv_bits)
            cache = filled_cache(empty, loaded.geometry, length - 1, seed=number * 1000 + index)
            uids += generator.insert(
                [prompt[-1:]], max_tokens=[MAX_TOKENS], caches=[cache], all_tokens=[prompt[:-1]]
            )
            if arm.staggered:
                step()
        for _ in range(FIRST_TOKEN_STEPS):
            if len(counts) == len(uids):
                break
            step()
        else:
            raise RuntimeError(f"{arm.scenario}: not every row had a token after {FIRST_TOKEN_STEPS} steps")
        for _ in range(WARM_STEPS):
            step()
        began = time.perf_counter()
        tokens = sum(step() for _ in range(steps))
        seconds = time.perf_counter() - began
        kv_bytes = generator.prompt_cache_nbytes
    finally:
        generator.close()
    # A row's cache holds its prompt and every token it returned: the last one's KV is written by
    # the step already under way (both generators run one step ahead).
    row_tokens = [length + counts[uid] for length, uid in zip(arm.lengths, uids, strict=True)]
    return DecodeRun(
        arm.scenario, arm.generator, number, len(uids), steps, tokens, seconds, kv_bytes, row_tokens
    )


def groups(lengths: Lengths, kv: bool) -> list[list[Arm]]:
    """The runs of one round, in groups that run back to back: the arms each ratio pairs."""
    aligned = (lengths.short,) * ROWS
    mixed = [Arm("aligned", g, aligned) for g in ("raw", "rows")]
    for long in lengths.longs:
        mixed += [Arm(f"mixed{long}", g, (long,) + (lengths.short,) * (ROWS - 1)) for g in ("raw", "rows")]
    found = [mixed]
    if kv:
        first = (lengths.longs[0],) + (lengths.short,) * (ROWS - 1)
        found.append(
            [
                Arm("kv_plain", "rows", first, on_kv_model=True),
                Arm("kv_bits", "rows", first, kv_bits=KV_BITS, on_kv_model=True),
            ]
        )
    for count in lengths.staggered:
        rows = (lengths.short,) * count
        found.append(
            [
                Arm(f"{m}{count}", g, rows, staggered=m == "staggered")
                for m in ("at_once", "staggered")
                for g in ("raw", "rows")
            ]
        )
    return found


def in_turn(arms: Sequence[Arm], number: int) -> list[Arm]:
    """The group's arms in round `number`'s order: rotated by one each round, so none is always
    first (and with two arms, their order alternates)."""
    shift = number % len(arms)
    return [*arms[shift:], *arms[:shift]]


def load(path: Path, size: str) -> Loaded:
    model = mlx_lm.load(str(path))[0]
    return Loaded(model, kv_geometry(json.loads((path / "config.json").read_text())), size)


def measure_batch_kv(plan: Plan, raw: RawMLX) -> BatchKVSummary:
    lengths = SMOKE if plan.smoke else (TINY if plan.size == "tiny" else OTHER)
    rounds = plan.rounds(MIN_ROUNDS)
    main = Loaded(
        raw.model, kv_geometry(json.loads((plan.model_path / "config.json").read_text())), plan.size
    )
    kv_size = KV_MODEL.get(plan.size)
    kv_model = main if kv_size is None else load(demo.cached_model(f"bench-{kv_size}", kv_size), kv_size)
    skipped = quantized_reason(kv_model.model, row_cache(kv_model.model, KV_BITS, KV_GROUP_SIZE))
    if skipped:
        progress(f"batch-kv: kv_bits={KV_BITS} skipped on the {kv_model.size} model: {skipped}")
    install()  # RowBatch's attention seam, before the first raw run: every raw run sees it
    runs: list[DecodeRun] = []
    for number in range(rounds):
        for group in groups(lengths, kv=skipped is None):
            for arm in in_turn(group, number):
                run = decode_run(arm, kv_model if arm.on_kv_model else main, lengths.steps, number)
                runs.append(run)
                progress(
                    f"batch-kv round {number + 1}/{rounds}: {arm.scenario} {arm.generator}"
                    f"{'' if arm.kv_bits is None else f' kv_bits={arm.kv_bits}'}: {run.tok_s:.1f} tok/s, "
                    f"KV {run.kv_bytes / 1e6:.2f} MB"
                )
    target = MIXED_TARGET["tiny" if plan.size == "tiny" else "other"]
    first = lengths.longs[0]
    kv = (
        skipped_kv_bits(kv_model.size, KV_BITS, KV_GROUP_SIZE, skipped)
        if skipped
        else kv_bits_figures(runs, kv_model.size, KV_BITS, KV_GROUP_SIZE, first, lengths.short, ROWS)
    )
    return BatchKVSummary(
        size=plan.size,
        rounds=rounds,
        steps=lengths.steps,
        kv_per_token_bytes=main.geometry.bytes_per_token,
        geometry=main.geometry,
        mixed=[
            mixed_figures(runs, long, lengths.short, ROWS, main.geometry, target) for long in lengths.longs
        ],
        kv_bits=kv,
        staggered=[staggered_figures(runs, count, lengths.short) for count in lengths.staggered],
        runs=runs,
    )
