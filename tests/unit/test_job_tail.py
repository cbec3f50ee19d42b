"""Following a job's log: every line in order, a torn last line held back, exactly one terminal event."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mlxhost.host.jobs.tail import MAX_LINE, READ_CHUNK, TailSlots, tail, tail_batches
from mlxhost.wire.admin.jobs import INTERRUPTED_BY_EXIT, JobLogEvent, JobRecord, JobResult, JobState
from mlxhost.wire.errors import AdmissionRefused

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def record(state: JobState, **changes: object) -> JobRecord:
    fields: dict[str, object] = dict(
        id="j1", kind="finetune", model="m", state=state.value, options={}, progress=None, result=None,
        error=None, pid=None, created_at=1, started_at=2, ended_at=3,
    )  # fmt: skip
    return JobRecord(**{**fields, **changes})  # type: ignore[arg-type]


def line(kind: str, **data: object) -> str:
    return JobLogEvent(kind, 5, data).line()


async def collect(log: Path, current: list[JobRecord], after: int = 0) -> list[tuple[int, JobLogEvent]]:
    found = []
    with anyio.fail_after(10):
        async for item in tail(log, lambda: current[0], after=after):
            assert item is not None
            found.append(item)
    return found


async def test_a_finished_log_is_replayed_whole(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line("started") + line("progress", iteration=1, total=2) + line("succeeded", output="/o"))
    events = await collect(log, [record(JobState.SUCCEEDED)])
    assert [(n, e.type) for n, e in events] == [(1, "started"), (2, "progress"), (3, "succeeded")]
    resumed = await collect(log, [record(JobState.SUCCEEDED)], after=1)
    assert [n for n, _ in resumed] == [2, 3]


async def test_a_log_without_a_terminal_line_gets_one_from_the_record(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line("started") + line("progress", iteration=1, total=9))
    events = await collect(log, [record(JobState.INTERRUPTED)])
    assert [e.type for _, e in events] == ["started", "progress", "interrupted"]
    assert events[-1][1].data == {"error": INTERRUPTED_BY_EXIT} and events[-1][0] == 3
    succeeded = await collect(log, [record(JobState.SUCCEEDED, result=JobResult(model="x", path="/out"))])
    assert succeeded[-1][1].type == "succeeded" and succeeded[-1][1].data == {"output": "/out"}


async def test_a_missing_log_still_ends_with_one_terminal_event(tmp_path: Path) -> None:
    events = await collect(tmp_path / "never-written.jsonl", [record(JobState.FAILED, error="no such model")])
    assert [(e.type, e.data) for _, e in events] == [("failed", {"error": "no such model"})]


async def test_a_second_terminal_line_is_not_sent(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line("started") + line("cancelled", error="cancelled") + line("failed", error="late"))
    events = await collect(log, [record(JobState.CANCELLED)])
    assert [e.type for _, e in events] == ["started", "cancelled"]


async def test_a_torn_line_waits_for_its_end_and_the_tail_follows_a_running_job(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    started = line("started")
    progress = line("progress", iteration=1, total=2)
    log.write_text(started + progress[:7])  # the job is in the middle of a write
    current = [record(JobState.RUNNING)]
    seen: list[tuple[int, JobLogEvent]] = []

    async def follow() -> None:
        seen.extend(await collect(log, current))

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        await anyio.sleep(0.5)
        with log.open("a") as file:
            file.write(progress[7:] + line("succeeded", output="/o"))
        # The store says it ended just after the job's last write: the tail drains it.
        current[0] = record(JobState.SUCCEEDED)
    assert [(n, e.type) for n, e in seen] == [(1, "started"), (2, "progress"), (3, "succeeded")]
    assert seen[1][1].progress() is not None and seen[1][1].progress().iteration == 1  # type: ignore[union-attr]


async def test_a_corrupt_line_is_skipped_but_keeps_its_number(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line("started") + "{not json\n" + line("succeeded", output="/o"))
    events = await collect(log, [record(JobState.SUCCEEDED)])
    assert [(n, e.type) for n, e in events] == [(1, "started"), (3, "succeeded")]


async def test_a_long_log_is_replayed_a_chunk_at_a_time_in_order(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    count = 40_000  # about 3 MB: a dozen chunks
    with log.open("w") as file:
        file.write(line("started"))
        for i in range(count):
            file.write(line("message", text=f"line {i} " + "x" * 40))
        file.write(line("succeeded", output="/o"))
    sizes = []
    numbers: list[int] = []
    with anyio.fail_after(30):
        async for batch in tail_batches(log, lambda: record(JobState.SUCCEEDED)):
            assert batch is not None
            sizes.append(len(batch))
            numbers.extend(n for n, _ in batch)
    assert numbers == list(range(1, count + 3))
    assert len(sizes) > 5 and max(sizes) * 60 < READ_CHUNK * 2  # never the whole backlog at once


async def test_a_line_longer_than_the_limit_is_numbered_but_not_held_or_sent(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line("started") + line("message", text="y" * (MAX_LINE * 2)) + line("succeeded", output="/o"))
    events = await collect(log, [record(JobState.SUCCEEDED)])
    assert [(n, e.type) for n, e in events] == [(1, "started"), (3, "succeeded")]


def test_tail_slots_refuse_past_the_cap_naming_it_and_give_back_once() -> None:
    slots = TailSlots(2)
    first, _ = slots.take(), slots.take()
    with pytest.raises(AdmissionRefused) as refused:
        slots.take()
    assert refused.value.status_code == 429 and "(2)" in refused.value.message
    assert refused.value.headers == {"retry-after": "5"}
    first()
    first()  # a second call gives nothing more back
    slots.take()
    with pytest.raises(AdmissionRefused):
        slots.take()
