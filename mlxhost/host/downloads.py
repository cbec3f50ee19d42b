"""Serve-time pulls: the configured models whose repos are not in the cache, pulled as the host starts.

Each becomes a pull job of the host's own runner (the same store, tail, cancel and events as a
pull asked over the admin API), while the host already serves: the model is pending in the pool
(listed, and a request for it is told it is downloading) until its files arrive, and then it
loads if it preloads. Its progress is on the admin stream (`model.download`), in /admin/state and
/health, and on the terminal that started the host: a bar where stderr is a terminal, a line
every tenth of the way where it is not.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio.abc

from mlxhost.catalog.spec import ModelSpec
from mlxhost.errors import StartupError
from mlxhost.host.jobs.runner import JobRunner
from mlxhost.host.workers.pool import ModelPool
from mlxhost.wire.admin import ModelDownload
from mlxhost.wire.admin.job_requests import PullRequest
from mlxhost.wire.admin.state import DownloadRecord

__all__ = ["start_pulls"]

logger = logging.getLogger("mlxhost.pull")


async def start_pulls(
    specs: Sequence[ModelSpec], pool: ModelPool, jobs: JobRunner | None, tg: anyio.abc.TaskGroup
) -> None:
    """Pull each of `specs` as a job of `jobs`; each loads once its files are in, if it preloads."""
    if not specs:
        return
    if jobs is None:
        raise StartupError(
            f"cannot pull {', '.join(s.path for s in specs)}: jobs are off because another mlxhost owns "
            "the state directory; pull first (mlxhost pull REPO), or give this host its own --state-dir"
        )
    for spec in specs:
        pool.wait_for(spec.id, DownloadRecord(repo=spec.path, state="downloading"))
        record = await jobs.submit(PullRequest(kind="pull", model=spec.path))
        pool.wait_for(spec.id, DownloadRecord(repo=spec.path, state="downloading", job=record.id))
        jobs.watch_download(record.id, _Follower(pool, spec.id).seen)
        logger.info("model %s: pulling %s from the hub (job %s)", spec.id, spec.path, record.id)
        tg.start_soon(pool.preload_when_arrived, spec.id)


class _Follower:
    """One configured model's pull: the pool's record of it, and the terminal's view."""

    def __init__(self, pool: ModelPool, model_id: str) -> None:
        self.pool = pool
        self.model_id = model_id
        self.bar: Any = None
        self.tenths = -1

    def seen(self, download: ModelDownload) -> None:
        if download.state == "downloading":
            if self.pool.is_pending(self.model_id):
                self.pool.wait_for(
                    self.model_id,
                    DownloadRecord(
                        repo=download.repo, state="downloading", done_bytes=download.done_bytes,
                        total_bytes=download.total_bytes, bytes_per_s=download.bytes_per_s, job=download.job,
                    ),
                )  # fmt: skip
            self._show(download)
            return
        self._close()
        if download.state == "done":
            logger.info("model %s: pulled %s (%d bytes)", self.model_id, download.repo, download.total_bytes)
            return
        error = download.error or download.state
        logger.error("model %s: the pull of %s %s: %s", self.model_id, download.repo, download.state, error)
        self.pool.wait_for(
            self.model_id, DownloadRecord(repo=download.repo, state="failed", job=download.job, error=error)
        )

    def _show(self, download: ModelDownload) -> None:
        if sys.stderr.isatty():
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=download.total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=self.model_id, file=sys.stderr, dynamic_ncols=True,
                )  # fmt: skip
            self.bar.set_postfix_str(download.file or "", refresh=False)
            self.bar.update(download.done_bytes - self.bar.n)
            return
        tenths = int(download.fraction * 10)
        if tenths > self.tenths:
            self.tenths = tenths
            logger.info(
                "model %s: %d%% of %d bytes from %s (%.1f MB/s)",
                self.model_id, tenths * 10, download.total_bytes, download.repo, download.bytes_per_s / 1e6,
            )  # fmt: skip

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
