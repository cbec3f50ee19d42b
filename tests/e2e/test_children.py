"""What the host's children (its workers, the warm standby, its jobs) take from it, on a real host.

Not the operator's working directory: a stdlib name planted there never runs in a child. Not the
host's listening sockets: once the host is gone, its port is free at once, whatever children are
still ending, and a restart on the same port serves.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import psutil
import pytest

from mlxhost.testing import start_host, wait_until
from tests.e2e.test_jobs import FOREVER, submit, wait_running, write_dataset
from tests.e2e.test_standby import ready_standby

pytestmark = pytest.mark.slow

# A stand-in for the stdlib module it shadows: it leaves a mark, then puts the real one in its place,
# so that a child that wrongly imports it still runs and the test fails on the mark, not on a crash.
PLANTED = """\
import importlib, os, sys
here = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(here, f"ran-{__name__}-{os.getpid()}"), "w").close()
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules[__name__]
sys.modules[__name__] = importlib.import_module(__name__)
"""
SHADOWED = ("json", "queue", "argparse")


def _listening_on(pid: int, port: int) -> bool:
    try:
        held = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in held)


def test_children_run_nothing_from_the_cwd_and_hold_no_listener(tiny_model: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "shared-checkout"
    cwd.mkdir()
    for name in SHADOWED:
        (cwd / f"{name}.py").write_text(PLANTED)
    data = write_dataset(tmp_path / "data")
    host = start_host("--model", str(tiny_model), "--standby-workers", "1", cwd=cwd)
    try:
        port = int(host.url.rsplit(":", 1)[1])
        standby = ready_standby(host)["pid"]
        with host.client() as client:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        with host.http(timeout=60.0) as admin:
            job = submit(
                admin, kind="finetune", model="tiny", data=str(data), iters=FOREVER, steps_per_report=1, num_layers=-1
            )
            job_pid = wait_running(admin, job["id"])["pid"]
        children = psutil.Process(host.process.pid).children(recursive=True)
        assert {standby, job_pid} <= {c.pid for c in children}
        assert sorted(p.name for p in cwd.glob("ran-*")) == []
        assert [c.pid for c in children if _listening_on(c.pid, port)] == []
    finally:
        host.stop(signal.SIGKILL)
    # Nobody accepts for a dead host: a client is refused at once rather than left hanging.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5.0).close()
    with start_host("--model", str(tiny_model), "--port", str(port), tcp=False) as again:
        assert again.url is not None and again.url.endswith(f":{port}")
    wait_until(lambda: not psutil.pid_exists(job_pid) or psutil.Process(job_pid).status() == "zombie", timeout=30.0)
