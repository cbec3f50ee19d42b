"""Speculative decoding in the row batch (engine/speculate/, engine/rows/speculation.py), on the real
demo models through real mlx-lm: greedy rows write token for token what they write without drafts,
sampled rows keep the model's distribution, constrained rows keep to their grammar, and every row
stops where it would have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.sample_utils import make_sampler

from mlxhost.demo import make_model
from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.grammar import GrammarSpec
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.rows.batch import RowBatch
from mlxhost.worker.engine.rows.budget import PrefillBudget
from mlxhost.worker.engine.speculate.acceptance import kept, sampled_choices, target_logprobs
from tests.unit.grammar_helpers import compile_

pytestmark = pytest.mark.unit

LENGTHS = [3, 40, 150, 17, 1, 90, 8]


def _prompt(length: int, seed: int) -> list[int]:
    # A phrase said again and again, as an edit re-emits its file: something to draft from.
    phrase = [(11 * i + 7 * seed) % 900 + 3 for i in range(9)]
    return (phrase * (length // 9 + 1))[:length]


PROMPTS = [_prompt(n, j) for j, n in enumerate(LENGTHS)]
_models: dict[Path, Any] = {}


def _load(path: Path) -> Any:
    if path not in _models:
        _models[path] = mlx_lm.load(str(path))[0]
    return _models[path]


def _batch(model: Any, drafts: int, **options: Any) -> RowBatch:
    """A batch that verifies every draft its rows find (speculate = "always"): what it writes
    must not depend on which steps verify, and these tests make as many as they can."""
    budget = PrefillBudget(prefill_step=64, tokens=64, adaptive=False)
    options = {"priced": False, **options}
    return RowBatch(model, budget=budget, draft_tokens=drafts, stop_tokens=[[0]], **options)


def _run(
    batch: RowBatch, prompts: list[list[int]], tokens: int, every: int = 3, **insert: Any
) -> list[list[int]]:
    """Each prompt's tokens, a new prompt inserted every `every` steps while the others run."""
    out: dict[int, list[int]] = {}
    ended: set[int] = set()
    index: dict[int, int] = {}
    queue = list(enumerate(prompts))
    step = 0
    while queue or len(ended) < len(prompts):
        if queue and step % every == 0:
            j, prompt = queue.pop(0)
            one = {name: [values[j]] for name, values in insert.items()}
            index[batch.insert([prompt], max_tokens=[tokens], **one)[0]] = j
        for response in batch.next()[1]:
            out.setdefault(index[response.uid], []).append(response.token)
            if response.finish_reason is not None:
                ended.add(index[response.uid])
        step += 1
        assert step < 2000, "the batch never finished"
    return [out.get(j, []) for j in range(len(prompts))]


@pytest.mark.parametrize("name", ["tiny", "sliding", "pipelined", "tiny-kv8", "agent", "bench"])
def test_greedy_rows_write_what_they_write_without_drafts(
    name: str, tiny_model: Path, sliding_model: Path, pipelined_model: Path, tmp_path: Path
) -> None:
    path = {"tiny": tiny_model, "sliding": sliding_model, "pipelined": pipelined_model}.get(name)
    options: dict[str, Any] = {"kv_bits": 8, "kv_group_size": 32} if name == "tiny-kv8" else {}
    if path is None:
        size = "quantizable" if name == "tiny-kv8" else name
        path = make_model(tmp_path / size, size=size)
    model = _load(path)
    prompts, tokens = (PROMPTS[:3], 16) if name == "bench" else (PROMPTS, 40)  # the bench model is slow
    plain = _run(_batch(model, 0, **options), prompts, tokens)
    drafting = _batch(model, 6, **options)
    assert _run(drafting, prompts, tokens) == plain
    assert all(len(out) == tokens or out[-1] == 0 for out in plain)
    counters = drafting.counters
    if name != "sliding":  # its window (16) is past for most rows: they cannot roll back, nor draft
        assert counters.drafted > 0
    if name in ("tiny", "pipelined", "tiny-kv8"):  # these repeat themselves: drafts are kept
        assert counters.accepted > 0
        assert counters.verified_tokens > counters.verifications  # more than one token a pass


def test_rows_end_at_max_tokens_and_stop_tokens_exactly(tiny_model: Path) -> None:
    model = _load(tiny_model)
    lengths = [1, 2, 5, 7, 13]
    plain = _batch(model, 0)
    drafting = _batch(model, 8)
    for tokens in lengths:
        assert _run(drafting, [PROMPTS[2]], tokens) == _run(plain, [PROMPTS[2]], tokens)
    # A stop token inside the drafts: the row ends at it (its KV handed over holds no more).
    free = _run(_batch(model, 0), [PROMPTS[2]], 30)[0]
    stop = free[10]
    batch = RowBatch(model, draft_tokens=8, stop_tokens=[[stop]])
    uid = batch.insert([PROMPTS[2]], max_tokens=[30])[0]
    got: list[int] = []
    while True:
        (last, *_) = [r for r in batch.next()[1] if r.uid == uid] or [None]
        if last is None:
            continue
        got.append(last.token)
        if last.finish_reason is not None:
            break
    assert got == free[: free.index(stop) + 1]
    assert last.finish_reason == "stop"
    assert last.all_tokens == PROMPTS[2] + got
    assert last.prompt_cache[0].offset == len(PROMPTS[2]) + len(got)


def test_a_row_whose_drafts_fail_stops_drafting(tiny_model: Path) -> None:
    model = _load(tiny_model)
    batch = _batch(model, 6)
    # The phrase repeats in the prompt but the model does not go on with it: drafts fail, and
    # the row rests, then drafts less and less often.
    _run(batch, [_prompt(60, 3)], 200)
    counters = batch.counters
    assert counters.verifications < 60
    assert counters.drafted < 6 * 60


def test_sampled_rows_keep_the_models_distribution(tiny_model: Path) -> None:
    """The first token of 600 sampled rows, drafted or not, against the model's own distribution
    (its top 6 tokens, the rest folded together): a chi-squared test at 0.1%."""
    model = _load(tiny_model)
    params = SamplingParams(temperature=1.0, top_k=6)

    def distribution(prompt: list[int]) -> list[float]:
        logits = model(mx.array([prompt]))[0, -1]
        return mx.exp(target_logprobs(logits - mx.logsumexp(logits), params)).tolist()

    # A prompt whose lookup drafts (`t`, after the bigram seen earlier) a token the model gives
    # a middling chance: the test sees drafts both kept and refused.
    for t in range(3, 400):
        prompt = [5, 9, t, *_prompt(30, 1), 5, 9]
        probabilities = distribution(prompt)
        if 0.1 < probabilities[t] < 0.6:
            break
    else:
        raise AssertionError("no prompt drafts a token of middling chance")
    support = sorted(range(len(probabilities)), key=lambda t: -probabilities[t])[:6]
    mx.random.seed(7)
    batch = _batch(model, 6)
    rows = 600
    firsts = [
        tokens[0]
        for tokens in _run(
            batch,
            [prompt] * rows,
            1,
            every=1,
            sampling=[params] * rows,
            samplers=[make_sampler(1.0, top_k=6)] * rows,
        )
    ]
    assert batch.counters.drafted >= rows  # every row drafted (the prompt repeats a phrase)
    assert 0 < batch.counters.accepted < batch.counters.drafted  # drafts kept, and refused
    assert set(firsts) <= set(support)
    chi2 = sum((firsts.count(t) - rows * probabilities[t]) ** 2 / (rows * probabilities[t]) for t in support)
    assert chi2 < 20.5  # 5 degrees of freedom, p = 0.001


def test_the_sampling_rule_writes_each_token_with_the_targets_probability() -> None:
    """The rule alone, over a small vocabulary: the first token written has the distribution of
    position 0, whatever the draft; the second, given a kept first draft, position 1's."""
    mx.random.seed(3)
    target = mx.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    logprobs = mx.log(target)
    params = SamplingParams(temperature=1.0)
    trials = 4000
    first, second, kept_first = [0] * 4, [0] * 4, 0
    for _ in range(trials):
        passes, choices = sampled_choices(logprobs, [1, 3], params)
        count = kept(passes.tolist())
        written = [1, 3][:count] + [choices[count].item()]
        first[written[0]] += 1
        if count >= 1:
            kept_first += 1
            second[written[1]] += 1
    expected = target.tolist()
    assert sum((first[t] - trials * expected[0][t]) ** 2 / (trials * expected[0][t]) for t in range(4)) < 16.3
    assert (
        sum((second[t] - kept_first * expected[1][t]) ** 2 / (kept_first * expected[1][t]) for t in range(4))
        < 16.3
    )  # 3 degrees of freedom, p = 0.001


def test_constrained_rows_verify_drafts_through_their_grammar(tiny_model: Path) -> None:
    model, tokenizer = mlx_lm.load(str(tiny_model))[:2]
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "tags": {"type": "array", "items": {"enum": ["aa", "bb"]}, "maxItems": 8},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    grammar = compile_(
        Grammars(tokenizer, model.args.vocab_size), GrammarSpec("json_schema", "schema", schema)
    )
    eos = sorted(tokenizer.eos_token_ids)
    prompt = tokenizer.encode('{"name": "bb", "tags": ["aa", "bb", "aa", "bb"]} ' * 4)

    def constrained(drafts: int) -> tuple[list[list[int]], RowBatch]:
        batch = RowBatch(model, draft_tokens=drafts, stop_tokens=[[t] for t in eos])
        rows = 4
        return _run(
            batch,
            [prompt] * rows,
            120,
            every=1,
            logits_processors=[[grammar.processor()] for _ in range(rows)],
        ), batch

    plain, _ = constrained(0)
    drafted, batch = constrained(6)
    assert drafted == plain
    assert batch.counters.accepted > 0
    validator = jsonschema_rs.validator_for(schema)
    for tokens in drafted:
        text = tokenizer.decode([t for t in tokens if t not in eos])
        assert validator.is_valid(json.loads(text)), text


@pytest.mark.parametrize("draft", ["itself", "another"])
def test_a_draft_model_drafts_for_every_row_and_greedy_rows_write_what_they_would(
    draft: str, tiny_model: Path, tmp_path: Path
) -> None:
    model = _load(tiny_model)
    drafter = model if draft == "itself" else _load(make_model(tmp_path / "other", size="tiny", seed=5))
    prompts = [[(3 * i + j) % 700 + 3 for i in range(n)] for j, n in enumerate([5, 300, 90, 1, 40])]
    plain = _run(_batch(model, 0), prompts, 40)
    drafting = _batch(model, 4, draft_model=drafter, priced=False)
    assert _run(drafting, prompts, 40) == plain
    counters = drafting.counters
    if draft == "itself":  # the target's own choices: every draft kept
        assert counters.accepted == counters.drafted > 0
    else:
        assert counters.drafted > counters.accepted
    assert counters.verifications > 0


def test_a_draft_models_sampled_drafts_keep_the_targets_distribution() -> None:
    """The rule with a draft model's own distribution q: the first token written has the target's
    distribution at position 0, whatever q."""
    mx.random.seed(4)
    target = mx.array([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
    draft = mx.array([[0.1, 0.2, 0.3, 0.4]])
    params = SamplingParams(temperature=1.0)
    trials = 4000
    first = [0] * 4
    for _ in range(trials):
        token = mx.random.categorical(mx.log(draft[0])).item()  # drawn from q, as the drafter does
        passes, choices = sampled_choices(mx.log(target), [token], params, mx.log(draft))
        first[token if passes.tolist()[0] else choices[0].item()] += 1
    expected = target.tolist()[0]
    assert sum((first[t] - trials * expected[t]) ** 2 / (trials * expected[t]) for t in range(4)) < 16.3
