"""The speculation bench's records, arithmetic and report: each run as measured, each cell's medians
(a workload at a concurrency), the copy model's accuracy, the targets, and the JSON document.

Rates. A run's `tok_s` is its answers' tokens over its wall time (the requests' start to the last
answer's end: prefill included, the same for every arm); its `decode_tok_s` is the tokens after each
answer's first over the span from the earliest first token to the last. Over HTTP the latter is
rough: the host sends a stream's tokens in frames at most every 50 ms (`stream_interval`), so a
short answer's first and last frames can be one frame. A cell's figure for an arm is the median over
the rounds; its `lookup_vs_off` is the median of the rounds' own ratios of tok_s (the two arms of a
round ran next to each other in time). The targets are judged on tok_s.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field

from bench.figures import at_least, median, number, print_table, ratio, verdict
from bench.results.record import Record, run_list
from bench.results.serving import Machine, Versions
from bench.speculation_model import CopyModel
from bench.speculation_raw import Answer

ARMS = ("lookup", "off", "raw", "raw_speculative")
LABELS = {
    "lookup": "mlxhost lookup",
    "off": "mlxhost off",
    "raw": "raw mlx-lm",
    "raw_speculative": "raw speculative",
}
# Issue 29: speculation against none, on the edit workload at one and at eight streams, and on
# prompts with nothing to copy (at every concurrency).
EDIT_C1_TARGET = 1.8
EDIT_C8_TARGET = 1.4
RANDOM_TARGET = 0.95


@dataclass(frozen=True)
class AnswerFigures:
    tokens: int
    ttft_s: float
    end_s: float
    drafted: int  # draft tokens kept
    refused: int  # draft tokens refused (the host's usage only)
    text_sha: str  # the answer's text, digested: equal answers across arms have equal digests

    @classmethod
    def of(cls, answer: Answer) -> AnswerFigures:
        digest = hashlib.sha256(answer.text.encode()).hexdigest()[:16]
        return cls(answer.count, answer.ttft_s, answer.end_s, answer.drafted, answer.refused, digest)


@dataclass(frozen=True)
class Run:
    """One arm's requests of one cell in one round, started together."""

    workload: str  # "edit" or "random"
    arm: str  # one of ARMS
    concurrency: int
    round: int
    wall_s: float
    answers: list[AnswerFigures]

    @property
    def tok_s(self) -> float:
        return ratio(sum(a.tokens for a in self.answers), self.wall_s)

    @property
    def decode_tok_s(self) -> float:
        span = max(a.end_s for a in self.answers) - min(a.ttft_s for a in self.answers)
        return ratio(sum(max(a.tokens - 1, 0) for a in self.answers), span if span > 0 else float("nan"))


@dataclass(frozen=True)
class Cell(Record):
    """One workload at one concurrency: each arm's medians over the rounds, and the comparisons."""

    concurrency: int
    tok_s: dict[str, float]
    decode_tok_s: dict[str, float]
    tokens_per_answer: dict[str, float]
    lookup_vs_off: float  # tok_s, the median of the rounds' ratios
    lookup_vs_off_decode: float  # decode_tok_s, likewise
    lookup_vs_off_by_round: list[float]
    drafts_kept_per_token: float  # the lookup arm's kept drafts over its tokens
    draft_acceptance: float  # kept / (kept + refused)
    same_answers_lookup_off: str  # "k/n": answers whose text is identical
    same_answers_off_raw: str


@dataclass(frozen=True)
class VersusRaw(Record):
    """One stream, tok_s: each host arm over raw mlx-lm, and over mlx-lm's speculation."""

    lookup_vs_raw: float
    lookup_vs_raw_speculative: float
    off_vs_raw: float
    raw_speculative_vs_raw: float


@dataclass(frozen=True)
class Workload(Record):
    name: str
    requests: str  # what a request holds
    max_tokens: int
    cells: dict[str, Cell]  # "c1", "c4", ...
    versus_raw: VersusRaw | None  # when c1 was measured


@dataclass(frozen=True)
class CopyFigures(Record):
    """How well the model copies: from the raw arm's greedy answers to the edit requests (the
    tokens of the expected answer, the source file with its edits, that the answer reproduces in
    order: difflib's matching blocks), and by teacher forcing on the first file."""

    greedy_copied_share: float  # median over the answers
    greedy_copied_shares: list[float]
    teacher_forced_share: float
    expected_answer_tokens: float  # median
    answer_tokens: float  # median, as the model wrote them


@dataclass(frozen=True)
class StepPrice(Record):
    """What a verification step costs in this process, on the edit workload's first prompt: one
    forward step of `width` tokens (a token and width - 1 drafts) against one of a single token.
    Speculation at one stream can at best turn `width` tokens per wide step into a speed-up of
    `ceiling` (every draft kept, nothing else paid)."""

    context_tokens: int
    width: int
    one_token_s: float
    wide_s: float

    DERIVED = ("wide_vs_one", "ceiling")

    @property
    def wide_vs_one(self) -> float:
        return ratio(self.wide_s, self.one_token_s)

    @property
    def ceiling(self) -> float:
        return ratio(self.width, self.wide_vs_one)


@dataclass(frozen=True)
class Targets(Record):
    edit_c1_min: float
    edit_c1: float | None
    edit_c1_ok: bool | None
    edit_c8_min: float
    edit_c8: float | None
    edit_c8_ok: bool | None
    random_min: float
    random: dict[str, float]
    random_ok: bool | None


@dataclass(frozen=True)
class Settings(Record):
    copy_model: str  # "built" (bench.speculation_copier) or "lora" (bench.speculation_model)
    model: str
    parameters: int
    file_lines: int
    edits_per_file: int
    random_prompt_words: int
    concurrency: list[int]
    repeats: int
    draft_tokens: int
    raw_draft_model: str
    host_flags: list[str]  # the speculation flags this checkout's `mlxhost serve` takes
    host_options: dict[str, list[str]]
    speculation_available: bool
    smoke: bool


@dataclass(frozen=True)
class SpeculationDocument(Record):
    command: str
    machine: Machine
    versions: Versions
    settings: Settings
    copy_model: CopyModel | None  # the fine-tuned one (--copy-model lora); None: the built copier
    copy: CopyFigures
    step_price: StepPrice
    workloads: dict[str, Workload]
    targets: Targets
    runs: list[Run] = field(metadata=run_list("tok_s", "decode_tok_s"))


def copied_share(answer: list[int], expected: list[int]) -> float:
    """The share of the expected tokens the answer reproduces, in order."""
    if not expected:
        return float("nan")
    matcher = difflib.SequenceMatcher(None, answer, expected, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / len(expected)


def _same(runs: list[Run], one: str, other: str) -> str:
    pairs = same = 0
    for run in runs:
        if run.arm != one:
            continue
        for twin in runs:
            if twin.arm == other and twin.round == run.round:
                for a, b in zip(run.answers, twin.answers, strict=False):
                    pairs += 1
                    same += a.text_sha == b.text_sha
    return f"{same}/{pairs}"


def cell_of(runs: list[Run], concurrency: int) -> Cell:
    mine = [run for run in runs if run.concurrency == concurrency]
    arms = [arm for arm in ARMS if any(run.arm == arm for run in mine)]

    def of(arm: str, figure: str) -> float:
        return median([getattr(run, figure) for run in mine if run.arm == arm])

    def by_round(figure: str) -> list[float]:
        lookups = {run.round: run for run in mine if run.arm == "lookup"}
        offs = {run.round: run for run in mine if run.arm == "off"}
        both = [n for n in sorted(lookups) if n in offs]
        return [ratio(getattr(lookups[n], figure), getattr(offs[n], figure)) for n in both]

    def tokens(arm: str) -> list[int]:
        return [answer.tokens for run in mine if run.arm == arm for answer in run.answers]

    lookup = [a for run in mine if run.arm == "lookup" for a in run.answers]
    kept, refused = sum(a.drafted for a in lookup), sum(a.refused for a in lookup)
    rounds = by_round("tok_s")
    return Cell(
        concurrency=concurrency,
        tok_s={arm: of(arm, "tok_s") for arm in arms},
        decode_tok_s={arm: of(arm, "decode_tok_s") for arm in arms},
        tokens_per_answer={arm: median(tokens(arm)) for arm in arms},
        lookup_vs_off=median(rounds),
        lookup_vs_off_decode=median(by_round("decode_tok_s")),
        lookup_vs_off_by_round=rounds,
        drafts_kept_per_token=ratio(kept, sum(a.tokens for a in lookup)),
        draft_acceptance=ratio(kept, kept + refused),
        same_answers_lookup_off=_same(mine, "lookup", "off"),
        same_answers_off_raw=_same(mine, "off", "raw"),
    )


def workload_of(
    name: str, requests: str, max_tokens: int, runs: list[Run], concurrency: list[int]
) -> Workload:
    mine = [run for run in runs if run.workload == name]
    cells = {f"c{c}": cell_of(mine, c) for c in concurrency}
    versus = None
    if "c1" in cells:
        rates = cells["c1"].tok_s
        raw, speculative = rates.get("raw", float("nan")), rates.get("raw_speculative", float("nan"))
        versus = VersusRaw(
            lookup_vs_raw=ratio(rates.get("lookup", float("nan")), raw),
            lookup_vs_raw_speculative=ratio(rates.get("lookup", float("nan")), speculative),
            off_vs_raw=ratio(rates.get("off", float("nan")), raw),
            raw_speculative_vs_raw=ratio(speculative, raw),
        )
    return Workload(name, requests, max_tokens, cells, versus)


def targets_of(workloads: dict[str, Workload]) -> Targets:
    edit, random = workloads["edit"].cells, workloads["random"].cells
    c1 = edit["c1"].lookup_vs_off if "c1" in edit else None
    c8 = edit["c8"].lookup_vs_off if "c8" in edit else None
    by_level = {level: cell.lookup_vs_off for level, cell in random.items()}
    judged = [at_least(value, RANDOM_TARGET) for value in by_level.values()]
    random_ok = None if None in judged or not judged else all(judged)
    return Targets(
        EDIT_C1_TARGET, c1, None if c1 is None else at_least(c1, EDIT_C1_TARGET),
        EDIT_C8_TARGET, c8, None if c8 is None else at_least(c8, EDIT_C8_TARGET),
        RANDOM_TARGET, by_level, random_ok,
    )  # fmt: skip


def print_speculation(document: SpeculationDocument) -> None:
    settings, copy = document.settings, document.copy
    print(f"command: {document.command}")
    print(
        f"model: {settings.model} ({settings.parameters:,} parameters); greedy; {settings.repeats} "
        f"round(s), medians; host options {settings.host_options}"
    )
    if not settings.speculation_available:
        print("  NOTE: this checkout's `mlxhost serve` has no --speculate: both host arms are the same host")
    made = document.copy_model
    if made is not None:
        t = made.training
        reports = made.reports
        losses = f"{reports[0].train_loss:.3f} -> {reports[-1].train_loss:.3f}" if reports else "?"
        print(
            f"copy model: the {t.base} demo model, LoRA rank {t.rank} on every layer, {t.iters} iterations "
            f"of batch {t.batch_size} at learning rate {t.learning_rate:g}, {t.train_examples} edits of "
            f"{t.file_lines}-line files (max_seq_length {t.max_seq_length}); train loss {losses}; "
            f"fine-tune job {made.finetune_s:.0f} s, fuse {made.fuse_s:.0f} s"
            + ("" if made.trained_by_this_run else " (made by an earlier run)")
        )
    print(
        f"copying ({settings.file_lines}-line files): greedy answers reproduce "
        f"{number(copy.greedy_copied_share, 3)} of the expected tokens (median; answers "
        f"{number(copy.answer_tokens, 0)} tokens, expected {number(copy.expected_answer_tokens, 0)}); "
        f"teacher-forced {number(copy.teacher_forced_share, 3)}"
    )
    price = document.step_price
    print(
        f"a step of {price.width} tokens after {price.context_tokens} costs {number(price.wide_vs_one, 2)} "
        f"steps of one ({price.wide_s * 1e3:.1f} ms against {price.one_token_s * 1e3:.1f}): speculation's "
        f"ceiling at one stream, every draft kept, is {number(price.ceiling, 2)}x"
    )
    for workload in document.workloads.values():
        print()
        print(f"{workload.name}: {workload.requests}, max_tokens {workload.max_tokens}; tok/s (decoding)")
        header = ["streams", *(LABELS[a] for a in ARMS), "lookup/off", "kept/token", "acceptance", "same l/o"]
        lines = []
        for level, cell in workload.cells.items():
            rates = [
                f"{number(cell.tok_s[arm])} ({number(cell.decode_tok_s[arm])})" if arm in cell.tok_s else "-"
                for arm in ARMS
            ]
            lines.append([
                level, *rates, f"{number(cell.lookup_vs_off, 2)} ({number(cell.lookup_vs_off_decode, 2)})",
                number(cell.drafts_kept_per_token, 2), number(cell.draft_acceptance, 2),
                cell.same_answers_lookup_off,
            ])  # fmt: skip
        print_table(header, lines, ["<", *([">"] * (len(header) - 1))], indent="  ")
        if workload.versus_raw is not None:
            v = workload.versus_raw
            print(
                f"  one stream, tok/s: lookup / raw {number(v.lookup_vs_raw, 2)}, lookup / raw speculative "
                f"{number(v.lookup_vs_raw_speculative, 2)}, off / raw {number(v.off_vs_raw, 2)}, raw "
                f"speculative / raw {number(v.raw_speculative_vs_raw, 2)} (draft: {settings.raw_draft_model})"
            )
    t = document.targets
    print()
    print(
        f"targets (tok/s, lookup / off): edit c1 {number(t.edit_c1, 2)} >= {t.edit_c1_min:g}: "
        f"{verdict(t.edit_c1_ok)}; edit c8 {number(t.edit_c8, 2)} >= {t.edit_c8_min:g}: "
        f"{verdict(t.edit_c8_ok)}; "
        f"random {', '.join(f'{k} {number(v, 2)}' for k, v in t.random.items())} >= {t.random_min:g}: "
        f"{verdict(t.random_ok)}"
    )
