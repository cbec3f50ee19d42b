"""The restart budget, on a clock the tests move by hand: how many respawns, how soon, when to stop."""

from __future__ import annotations

from mlxhost.config import Settings
from mlxhost.host.workers.process import exit_of
from mlxhost.host.workers.restart_budget import GiveUp, Respawn, RestartBudget
from mlxhost.host.workers.status import WorkerExit
from mlxhost.wire.launch import EXIT_BAD_LAUNCH


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget(clock: Clock, limit: int = 3, window: float = 60.0) -> RestartBudget:
    return RestartBudget(limit=limit, window=window, early_exit=10.0, crash_backoff=5.0, clock=clock)


def crash(uptime: float = 30.0, ready: bool = True, code: int | None = 1) -> WorkerExit:
    return WorkerExit(pid=7, code=code, signal=None, uptime=uptime, ready=ready, reason="boom")


def test_the_defaults_are_the_design_s() -> None:
    defaults = RestartBudget.from_settings(Settings())
    # DESIGN.md: at most 3 respawns in a rolling 60 s; two deaths within 10 s of spawn wait 5 s.
    assert (defaults.limit, defaults.window, defaults.early_exit, defaults.crash_backoff) == (3, 60.0, 10.0, 5.0)


def test_respawns_are_counted_within_the_window_then_it_gives_up() -> None:
    clock = Clock()
    restarts = budget(clock)
    for attempt in (1, 2, 3):
        assert restarts.after_exit(crash()) == Respawn(delay=0.0, attempt=attempt)
        clock.now += 10
    verdict = restarts.after_exit(crash())
    assert isinstance(verdict, GiveUp) and verdict.code == "restart_limit_reached"
    assert verdict.why == "its worker exited 4 times within 60s (last: exit code 1: boom)"


def test_respawns_older_than_the_window_no_longer_count() -> None:
    clock = Clock()
    restarts = budget(clock, limit=2, window=60.0)
    assert restarts.after_exit(crash()) == Respawn(0.0, 1)
    clock.now += 30
    assert restarts.after_exit(crash()) == Respawn(0.0, 2)
    clock.now += 31  # the first has left the window
    assert restarts.after_exit(crash()) == Respawn(0.0, 2)
    clock.now += 100  # a long healthy run: both have
    assert restarts.after_exit(crash()) == Respawn(0.0, 1)


def test_two_early_exits_in_a_row_back_off_until_a_healthy_run() -> None:
    clock = Clock()
    restarts = budget(clock, limit=10)
    assert restarts.after_exit(crash(uptime=2.0)) == Respawn(0.0, 1)  # one early exit: at once
    assert restarts.after_exit(crash(uptime=2.0)) == Respawn(5.0, 2)  # two in a row: the backoff
    assert restarts.after_exit(crash(uptime=9.9)) == Respawn(5.0, 3)
    assert restarts.after_exit(crash(uptime=10.0)) == Respawn(0.0, 4)  # it lived: the count starts over
    assert restarts.after_exit(crash(uptime=1.0)) == Respawn(0.0, 5)
    assert restarts.after_exit(crash(uptime=1.0)) == Respawn(5.0, 6)


def test_failed_starts_in_a_row_give_up_even_when_they_outlast_the_window() -> None:
    clock = Clock()
    restarts = budget(clock, limit=2, window=60.0)
    timed_out = crash(uptime=120.0, ready=False, code=None)
    for _ in range(2):
        assert restarts.after_exit(timed_out) == Respawn(0.0, 1)  # the window never holds two
        clock.now += 120  # each load times out after the window has moved on
    verdict = restarts.after_exit(timed_out)
    assert verdict == GiveUp("its worker failed to start 3 times in a row (last: boom)", "restart_limit_reached")


def test_a_start_that_became_ready_resets_the_failed_starts() -> None:
    clock = Clock()
    restarts = budget(clock, limit=2, window=1.0)
    for ready in (False, False, True, False, False):
        assert isinstance(restarts.after_exit(crash(uptime=30.0, ready=ready)), Respawn)
        clock.now += 10
    assert isinstance(restarts.after_exit(crash(uptime=30.0, ready=False)), GiveUp)


def test_a_bad_launch_is_never_retried() -> None:
    # Exit status 2 before ready: the worker refused its launch record, and said why on stderr.
    refused = exit_of(7, EXIT_BAD_LAUNCH, 0.1, was_ready=False, reason=None, stderr_tail=["log", "version 9"])
    assert refused.permanent and refused.reason == "version 9"
    verdict = budget(Clock()).after_exit(refused)
    assert verdict == GiveUp(
        f"its worker cannot start (exit code {EXIT_BAD_LAUNCH}: version 9); another try would end the same way",
        "worker_cannot_start",
    )
    # The same status from a worker that had been ready is a crash like any other.
    assert not exit_of(7, EXIT_BAD_LAUNCH, 50.0, was_ready=True, reason=None).permanent
    assert isinstance(budget(Clock()).after_exit(exit_of(7, EXIT_BAD_LAUNCH, 50.0, True, None)), Respawn)


def test_a_killed_or_hung_worker_says_so_in_its_exit() -> None:
    hung = exit_of(7, -9, 40.0, was_ready=True, reason=None, stderr_tail=["noise"], hung="no answer in 5s")
    assert (hung.signal, hung.code, hung.reason, hung.permanent) == ("SIGKILL", None, "hung: no answer in 5s", False)
    assert hung.describe() == "signal SIGKILL: hung: no answer in 5s"  # a ready worker's stderr is its log
    unsent = exit_of(7, 1, 0.1, was_ready=False, reason=None, fallback="could not send the launch record")
    assert unsent.reason == "could not send the launch record"


def test_giving_up_starts_the_crash_loop_counters_over_and_a_reset_the_window() -> None:
    clock = Clock()
    restarts = budget(clock, limit=1)
    assert restarts.after_exit(crash(uptime=1.0, ready=False)) == Respawn(0.0, 1)
    assert isinstance(restarts.after_exit(crash(uptime=1.0, ready=False)), GiveUp)
    # Without a reset the window still holds its respawn: the next exit gives up again.
    assert isinstance(restarts.after_exit(crash(uptime=1.0)), GiveUp)
    restarts.reset()  # an operator's restart: a fresh budget
    assert restarts.after_exit(crash(uptime=1.0)) == Respawn(0.0, 1)  # no backoff: that count started over


def test_a_zero_limit_never_respawns() -> None:
    verdict = budget(Clock(), limit=0).after_exit(crash())
    assert isinstance(verdict, GiveUp) and verdict.why.startswith("its worker exited 1 times within 60s")
