"""What every measurement shares: the four paths compared, their labels, the batch sizes they all
use, and the timeouts of starting a server and of one request.

The raw path copies the server's defaults (`EngineOptions`: 32 rows decoded per step, 8 prompts
prefilled per step), and mlx_lm.server is started with the same, so that the paths differ only in
what carries the tokens to the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

PATHS = ("raw", "mlx_lm_server", "in_process", "isolated")
SERVED = ("in_process", "isolated")  # the mlxhost servers
HTTP_PATHS = ("mlx_lm_server", *SERVED)
LABELS = {
    "raw": "raw",
    "mlx_lm_server": "mlx_lm.server",
    "in_process": "in-process",
    "isolated": "isolated",
}

# The server's defaults (EngineOptions), which the raw BatchGenerator copies.
MAX_BATCH = 32
PREFILL_BATCH = 8

SERVER_START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 900.0
MB = 1 << 20


def in_turn(number: int) -> tuple[str, ...]:
    """The paths in the order of turn `number`: it rotates from one turn to the next, so that a
    machine that drifts (warms up, throttles, gets busy) favours none of them."""
    shift = number % len(PATHS)
    return PATHS[shift:] + PATHS[:shift]


def alternating(rounds: int) -> Iterator[tuple[int, bool]]:
    """(round, kind) for rounds of two runs, False then True, the other way round every other
    round, so that a drifting machine favours neither kind."""
    for number in range(rounds):
        for kind in (False, True) if number % 2 == 0 else (True, False):
            yield number, kind
