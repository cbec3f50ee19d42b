"""A real worker whose generation thread wedges, started by the host through `--worker-command`.

    wedged.py     serves like the real worker, but the first decode step it takes never returns

Its event loop stays free (it still answers /health at once): only the stall watch can tell
that it is hung.
"""

from __future__ import annotations

import threading
from typing import Any

from mlxhost.worker.__main__ import main
from mlxhost.worker.engine.batching import Batching


def wedged_step(self: Batching, generator: Any) -> None:
    threading.Event().wait()  # forever: the host must kill this process


if __name__ == "__main__":
    Batching._step = wedged_step  # type: ignore[method-assign]
    main()
