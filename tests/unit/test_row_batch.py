"""The row batch (engine/rows/batch.py) on the real demo models through real mlx-lm: each row of a
mixed, staggered batch gives token for token what its prompt gives alone, rows join and leave
without touching each other, and a row's cache is handed over whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.generate import BatchGenerator, generate_step
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from mlxhost.demo import make_model
from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.rows.batch import RowBatch
from mlxhost.worker.engine.rows.budget import PrefillBudget
from mlxhost.worker.engine.sampling import SamplerCache

pytestmark = pytest.mark.unit

# Lengths from one token to past the sliding model's window (16) and a prefill chunk (64 below).
LENGTHS = [3, 40, 150, 17, 1, 90, 8]
TOKENS = 12


def _prompt(length: int, seed: int) -> list[int]:
    return [(5 * i + 7 * seed) % 900 + 3 for i in range(length)]


PROMPTS = [_prompt(n, j) for j, n in enumerate(LENGTHS)]
_models: dict[Path, Any] = {}


def _load(path: Path) -> Any:
    if path not in _models:
        _models[path] = mlx_lm.load(str(path))[0]
    return _models[path]


def _alone(model: Any, prompt: list[int], tokens: int = TOKENS) -> list[int]:
    greedy = generate_step(
        mx.array(prompt), model, max_tokens=tokens, sampler=lambda x: mx.argmax(x, axis=-1)
    )
    return [int(token) for token, _ in greedy]


def _staggered(
    batch: RowBatch, prompts: list[list[int]], every: int = 3, **insert: Any
) -> dict[int, list[int]]:
    """Each prompt's tokens, a new prompt inserted every `every` steps while the others run."""
    out: dict[int, list[int]] = {}
    index: dict[int, int] = {}
    queue = list(enumerate(prompts))
    step = 0
    while queue or batch.prompt_cache_nbytes or any(len(v) < TOKENS for v in out.values()) or not out:
        if queue and step % every == 0:
            j, prompt = queue.pop(0)
            index[batch.insert([prompt], max_tokens=[TOKENS], **insert)[0]] = j
        _, generated = batch.next()
        step += 1
        for response in generated:
            out.setdefault(index[response.uid], []).append(response.token)
        if step > 500:
            raise AssertionError("the batch never finished")
    return out


def _small_chunks() -> PrefillBudget:
    return PrefillBudget(prefill_step=64, tokens=64, adaptive=False)


@pytest.mark.parametrize("name", ["tiny", "sliding", "pipelined"])
def test_each_row_of_a_mixed_staggered_batch_is_what_its_prompt_gives_alone(
    name: str, tiny_model: Path, sliding_model: Path, pipelined_model: Path
) -> None:
    model = _load({"tiny": tiny_model, "sliding": sliding_model, "pipelined": pipelined_model}[name])
    got = _staggered(RowBatch(model, budget=_small_chunks()), PROMPTS)
    assert [got[j] for j in range(len(PROMPTS))] == [_alone(model, p) for p in PROMPTS]


def test_seeded_rows_sample_the_same_whatever_else_is_in_the_batch(tiny_model: Path) -> None:
    model = _load(tiny_model)
    samplers = SamplerCache()

    def seeded(prompts: list[list[int]]) -> dict[int, list[int]]:
        params = [SamplingParams(temperature=1.0, seed=40 + j) for j in range(len(prompts))]
        batch = RowBatch(model, budget=_small_chunks())
        out: dict[int, list[int]] = {}
        uids = batch.insert(
            prompts, max_tokens=[TOKENS] * len(prompts), samplers=[samplers.sampler_for(p) for p in params]
        )
        while len(out) < len(prompts) or any(len(v) < TOKENS for v in out.values()):
            for response in batch.next()[1]:
                out.setdefault(uids.index(response.uid), []).append(response.token)
        return out

    together = seeded(PROMPTS[:4])
    assert seeded(PROMPTS[:4]) == together  # reproducible
    assert seeded(PROMPTS[:1])[0] == together[0]  # and the first row's the same alone


def test_a_long_prompt_joins_in_chunks_while_the_running_row_keeps_its_pace(tiny_model: Path) -> None:
    model = _load(tiny_model)
    batch = RowBatch(model, budget=_small_chunks())
    running = batch.insert([PROMPTS[1]], max_tokens=[400])[0]
    while not batch.next()[1]:
        pass
    joining = batch.insert([_prompt(1000, 9)], max_tokens=[4])[0]
    steps = 0
    while True:
        progress, generated = batch.next()
        steps += 1
        # The running row gets its token at every step of the other's prefill.
        assert [r.uid for r in generated if r.uid == running] == [running]
        if any(r.uid == joining for r in generated):
            break
        done = [p.progress[0] for p in progress if p.uid == joining]
        assert all(n <= 64 * steps for n in done)  # never more than a chunk a step
    assert steps >= 999 // 64  # it took a chunk per step, not the whole prompt at once


def test_a_removed_row_hands_over_its_cache_and_the_others_go_on_unchanged(tiny_model: Path) -> None:
    model = _load(tiny_model)
    batch = RowBatch(model, budget=_small_chunks())
    uids = batch.insert(PROMPTS[:3], max_tokens=[TOKENS] * 3)
    out: dict[int, list[int]] = {uid: [] for uid in uids}
    handed: dict[int, tuple[list[Any], list[int]]] = {}
    while any(len(v) < TOKENS for uid, v in out.items() if uid != uids[1]):
        for response in batch.next()[1]:
            out[response.uid].append(response.token)
        if len(out[uids[1]]) == 5 and not handed:
            handed = batch.remove([uids[1]], return_prompt_caches=True)
    assert out[uids[0]] == _alone(model, PROMPTS[0]) and out[uids[2]] == _alone(model, PROMPTS[2])
    cache, tokens = handed[uids[1]]
    assert tokens == PROMPTS[1] + out[uids[1]]
    assert cache[0].offset == len(tokens)
    # Started from the handed-over cache, the row goes on as if it had never left.
    again = RowBatch(model)
    uid = again.insert([[out[uids[1]][-1]]], max_tokens=[3], caches=[cache], all_tokens=[tokens[:-1]])[0]
    # The cache holds the last token already: step back one, as the prompt cache does on an exact hit.
    for layer in cache:
        layer.trim(1)
    rest = []
    while len(rest) < 3:
        rest += [r.token for r in again.next()[1] if r.uid == uid]
    assert out[uids[1]] + rest == _alone(model, PROMPTS[1], 5 + 3)


def test_a_finished_rows_cache_holds_exactly_its_tokens(tiny_model: Path) -> None:
    model = _load(tiny_model)
    batch = RowBatch(model)
    batch.insert([PROMPTS[2]], max_tokens=[4])
    while not (finished := [r for r in batch.next()[1] if r.finish_reason is not None]):
        pass
    (response,) = finished
    assert response.finish_reason == "length"
    assert response.all_tokens == PROMPTS[2] + _alone(model, PROMPTS[2], 4)
    assert all(layer.offset == len(response.all_tokens) for layer in response.prompt_cache)


def test_a_snapshot_is_unchanged_by_its_row_going_on(tiny_model: Path) -> None:
    model = _load(tiny_model)
    batch = RowBatch(model)
    uid = batch.insert([PROMPTS[2]], max_tokens=[20])[0]
    for _ in range(4):
        batch.next()
    ((cache, tokens),) = batch.extract_cache([uid]).values()
    before = [mx.array(layer.keys[..., : layer.offset, :]) for layer in cache]
    mx.eval(before)
    for _ in range(10):
        batch.next()
    assert all(layer.offset == len(tokens) for layer in cache)
    assert all(
        mx.array_equal(b, layer.keys[..., : layer.offset, :]).item() for b, layer in zip(before, cache)
    )


def test_the_batch_holds_the_sum_of_its_rows_kv_not_rows_times_the_longest(tiny_model: Path) -> None:
    model = _load(tiny_model)
    lengths = [600] + [16] * 7
    prompts = [_prompt(n, j) for j, n in enumerate(lengths)]
    rows = RowBatch(model)
    rows.insert(prompts, max_tokens=[100] * 8)
    padded = BatchGenerator(model, stop_tokens=[])
    padded.insert(prompts, max_tokens=[100] * 8)
    for _ in range(12):
        rows.next()
        padded.next()
    one = 2 * 2 * 2 * 16 * 4  # bytes a position takes: layers, keys and values, kv heads, dims, float32
    # Each row its own buffer, grown by about an eighth of its length at a time.
    own = sum(n + 12 for n in lengths) * one
    assert own <= rows.prompt_cache_nbytes <= 1.2 * own
    assert padded.prompt_cache_nbytes >= 8 * 600 * one
    padded.close()


def test_kv_bits_rows_keep_quantized_kv_in_a_quarter_of_the_bytes(tmp_path: Path) -> None:
    model = _load(make_model(tmp_path / "quantizable", size="quantizable"))
    plain, quantized = RowBatch(model), RowBatch(model, kv_bits=4, kv_group_size=64)
    for batch in (plain, quantized):
        batch.insert(PROMPTS[:3], max_tokens=[TOKENS] * 3)
        for _ in range(8):
            batch.next()
    cache = quantized.extract_cache([0])[0][0]
    assert all(isinstance(layer, QuantizedKVCache) and layer.bits == 4 for layer in cache)
    assert all(isinstance(layer, KVCache) for layer in plain.extract_cache([0])[0][0])
    assert quantized.prompt_cache_nbytes <= 0.35 * plain.prompt_cache_nbytes
    # And it still writes text: every row runs to its end.
    got = _staggered(RowBatch(model, kv_bits=4, kv_group_size=64, budget=_small_chunks()), PROMPTS[:3])
    assert [len(got[j]) for j in range(3)] == [TOKENS] * 3
