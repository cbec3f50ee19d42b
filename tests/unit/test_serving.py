"""How far apart a stream's frames come: `stream_interval`, stretched while many streams share a worker."""

from __future__ import annotations

import pytest

from mlxhost.worker.api.serving import FRAMES_PER_SECOND, frame_interval


def test_few_streams_get_the_configured_interval() -> None:
    assert frame_interval(0.05, 1) == 0.05
    assert frame_interval(0.05, int(0.05 * FRAMES_PER_SECOND)) == 0.05


@pytest.mark.parametrize("sessions", [16, 32, 64])
def test_many_streams_share_one_frame_budget(sessions: int) -> None:
    interval = frame_interval(0.05, sessions)
    assert interval > 0.05
    assert sessions / interval == pytest.approx(FRAMES_PER_SECOND)


def test_an_interval_of_zero_means_a_frame_per_token_however_many_streams() -> None:
    assert frame_interval(0.0, 64) == 0.0
