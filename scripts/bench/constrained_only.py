"""--constrained-only: constrained decoding alone (`bench.constrained`), on an isolated server of its
own started with the whole run's options, the grammar compiles in this process on the tokenizer the
raw path loaded. The other servers never start: the free and mixed runs share the machine with
nothing but this process, as they do in a whole run after mlx_lm.server stops."""

from __future__ import annotations

import anyio
import httpx

from bench import hosts
from bench.constrained import CONSTRAINED_STREAMS, constrained_summary, measure_constrained
from bench.figures import progress
from bench.plan import Plan
from bench.raw import RawMLX
from bench.results.measurements import ConstrainedSummary
from bench.settings import REQUEST_TIMEOUT_S


async def measure_constrained_only(plan: Plan, prompt: str, raw: RawMLX) -> ConstrainedSummary:
    progress("constrained decoding: starting an isolated server of its own")
    options = hosts.server_options("isolated", plan)
    server = await anyio.to_thread.run_sync(hosts.start, "isolated", plan.model_path, plan.max_batch, options)
    # Every stream of a run on a connection of its own, opened once and kept (as in a whole run).
    connections = CONSTRAINED_STREAMS + 4
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    with hosts.running(server):
        async with httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
            progress("constrained decoding: free runs and mixed runs on the isolated server")
            result = await measure_constrained(client, server.pid, prompt, plan, raw)
    return constrained_summary(result, plan.max_tokens)
