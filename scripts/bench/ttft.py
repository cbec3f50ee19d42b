"""Time to first token, one stream at a time: after the throughput runs, --ttft-requests more
single-stream requests per path (20; 10 with --quick) of max_tokens min(32, max_tokens), the paths
taking turns.

TTFT is the call (raw) or the request's start (HTTP) to the first token: over HTTP the first SSE
frame with content. The report's TTFT p50 and p95 at c1 are over every single-stream request of a
path, the c1 runs of `bench.throughput` and these.
"""

from __future__ import annotations

from bench.figures import median, progress
from bench.plan import Plan
from bench.settings import LABELS, PATHS, in_turn
from bench.throughput import Paths

TTFT_MAX_TOKENS = 32  # or max_tokens, if lower


async def measure_ttft(plan: Plan, paths: Paths) -> int:
    """The TTFT requests of every path, into `paths.results`; returns their max_tokens."""
    ttft_tokens = min(plan.max_tokens, TTFT_MAX_TOKENS)
    results = paths.results
    for number in range(plan.ttft_requests):
        for name in in_turn(number):
            results[name].ttft_probes.append(await paths.stream(name, ttft_tokens))
    progress(
        f"  TTFT: {plan.ttft_requests} requests of max_tokens {ttft_tokens} per path; p50 "
        + ", ".join(
            f"{LABELS[name]} {median([r.ttft_s * 1e3 for r in results[name].ttft_probes]):.1f}"
            for name in PATHS
        )
        + " ms"
    )
    return ttft_tokens
