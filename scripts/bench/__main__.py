"""`python scripts/bench [options]` (or, from scripts/, `python -m bench`): run the benchmark.

Run as a directory, this file is `__main__` with scripts/bench/ first on sys.path, where the
package cannot import itself; so scripts/ goes first instead, and the checkout's root after it
for `mlxhost` when it is not installed. The package's own imports are all `bench.`-prefixed.
"""

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent
for folder in (SCRIPTS.parent, SCRIPTS):  # the repository root, then scripts/ before it
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != SCRIPTS / "bench"]

from bench.cli import main

sys.exit(main())
