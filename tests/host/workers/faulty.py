"""A deliberately misbehaving worker, started by the host through `--worker-command`.

    faulty.py exit-during-load     reads the launch record, says why on stderr, exits 3
    faulty.py never-ready          reads the launch record, then never answers
    faulty.py version N            runs the real worker with the launch record's version set to N
    faulty.py ready-socket         says it is ready on a socket other than the one it was given
    faulty.py ready-version N      says it is ready, speaking protocol version N
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    mode = sys.argv[1]
    line = sys.stdin.readline()
    if mode == "exit-during-load":
        print("loading weights...", file=sys.stderr, flush=True)
        time.sleep(0.2)
        print("fatal: the weights file is corrupt", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "never-ready":
        sys.stdin.read()  # until the host goes away or kills us
        return
    if mode == "version":
        record = json.loads(line)
        record["version"] = int(sys.argv[2])
        import io

        sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps(record).encode() + b"\n"))
        from mlxhost.worker.__main__ import main as worker_main

        worker_main()
        return
    if mode in ("ready-socket", "ready-version"):
        record = json.loads(line)
        ready = {
            "pid": os.getpid(),
            "socket": record["socket"] + ".elsewhere" if mode == "ready-socket" else record["socket"],
            "model_id": record["model_id"],
            "version": int(sys.argv[2]) if mode == "ready-version" else record["version"],
            "load_seconds": 0.0,
        }
        print("MLXHOST-READY " + json.dumps(ready), flush=True)
        sys.stdin.read()  # until the host kills us
        return
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
