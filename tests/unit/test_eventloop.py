import asyncio

import pytest

from mlxhost.runtime import eventloop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_host_runs_on_uvloop_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.EVENT_LOOP, raising=False)
    assert eventloop.loop_name() == "uvloop"  # a dependency of the package on Linux and macOS
    assert eventloop.run(_loop_module).startswith("uvloop")


def test_the_standard_loop_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.EVENT_LOOP, "asyncio")
    assert eventloop.loop_name() == "asyncio"
    assert eventloop.run(_loop_module) == "asyncio.unix_events"
