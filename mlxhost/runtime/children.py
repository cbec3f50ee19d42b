"""How the host starts Python children (workers, the warm standby, jobs, checks): never from the cwd.

`python -m pkg` puts the current directory first on `sys.path`, so a `queue.py` (any stdlib
name) in the directory `mlxhost serve` was started from would run, as the host's user, in every
child. `-P` (Python 3.11's "safe path") leaves it out. Not `-I`: that would also drop
`PYTHONPATH` and the user's site-packages, which an operator may rely on to find mlxhost itself.
"""

from __future__ import annotations

import sys

__all__ = ["SAFE_PATH", "python_module"]

SAFE_PATH = "-P"


def python_module(module: str, *args: str) -> list[str]:
    """The argv that runs `module` as `python -m module ARGS` in this interpreter, the cwd off its path."""
    return [sys.executable, SAFE_PATH, "-m", module, *args]
