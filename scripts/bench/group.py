"""--group-only: one model served by a group of two ranks against one worker, on the same model.

The group is two ranks under `mlx.launch` (ring backend, loopback), the model split by tensor;
the single worker is the same host serving the same model alone. Both answer the same streams,
taking turns: throughput and time to first token at 1 and 8 streams.

On one machine the group cannot win: both ranks compute on the same cores, and every step adds
the collectives of a split model (two per layer) and the group's own message to its follower
(mlxhost/worker/engine/group.py). What the run measures is that overhead, reported per decode step:
at one stream a step makes one token, so the gap between the two paths' time per token is the
group's cost per step. Across machines the split is what lets a model that does not fit one of
them be served at all.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import httpx

from bench.figures import progress
from bench.hosts import Host, admin_token_option, running
from bench.plan import Plan
from bench.results.measurements import GroupFigures
from bench.settings import REPO_ROOT, SERVER_START_TIMEOUT_S
from bench.streams import HTTPBench
from mlxhost.testing import start_host

__all__ = ["GROUP_CONCURRENCY", "measure_group", "print_group"]

GROUP_RANKS = 2
GROUP_CONCURRENCY = (1, 8)
WARM_STREAMS = 2
REQUEST_TIMEOUT_S = 300.0


def _start(name: str, plan: Plan, folder: Path) -> Host:
    model = plan.model_path
    table = f'[[model]]\nid = "{model.name}"\npath = "{model}"\n'
    if name == "group":
        table += f'ranks = {GROUP_RANKS}\nbackend = "ring"\nsharding = "tensor"\n'
    config = folder / f"{name}.toml"
    config.write_text(table)
    env = {"PYTHONPATH": str(REPO_ROOT)}
    return Host(
        name,
        start_host(
            f"--config={config}", "--host=127.0.0.1", f"--max-batch={plan.max_batch}",
            f"--max-active={max(GROUP_CONCURRENCY)}", admin_token_option(), env=env,
            timeout=SERVER_START_TIMEOUT_S,
        ),
    )  # fmt: skip


async def measure_group(plan: Plan, prompt: str) -> GroupFigures:
    """Each path's tok/s and TTFT at each concurrency (medians of --repeats), and the comparison."""
    paths: dict[str, dict[int, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="mlxhost-bench-group-") as folder:
        for name in ("single", "group"):
            progress(f"group: starting the {name} host")
            with running(_start(name, plan, Path(folder))) as host:
                ready_s = host.running.worker()["ready_s"]
                async with httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S) as client:
                    bench = HTTPBench(client, prompt, plan.max_tokens)
                    await bench.batch(WARM_STREAMS, min(plan.max_tokens, 16))
                    paths[name] = {}
                    for concurrency in GROUP_CONCURRENCY:
                        runs = [await bench.batch(concurrency) for _ in range(plan.repeats)]
                        tok_s = statistics.median(run.total_tok_s for run in runs)
                        ttft = statistics.median(statistics.median(run.ttft_s) for run in runs)
                        paths[name][concurrency] = {"tok_s": tok_s, "ttft_s": ttft}
                        progress(f"group: {name} c{concurrency}: {tok_s:.1f} tok/s, TTFT {ttft * 1e3:.1f} ms")
                paths[name][0] = {"ready_s": ready_s}
    single, group = paths["single"], paths["group"]
    ms_per_token = {name: 1e3 / paths[name][1]["tok_s"] for name in paths}
    return GroupFigures(
        ranks=GROUP_RANKS,
        backend="ring",
        sharding="tensor",
        max_tokens=plan.max_tokens,
        paths={name: {f"c{c}": v for c, v in figures.items() if c} for name, figures in paths.items()},
        ready_s={name: figures[0]["ready_s"] for name, figures in paths.items()},
        group_vs_single={f"c{c}": group[c]["tok_s"] / single[c]["tok_s"] for c in GROUP_CONCURRENCY},
        ttft_group_vs_single={f"c{c}": group[c]["ttft_s"] / single[c]["ttft_s"] for c in GROUP_CONCURRENCY},
        collective_ms_per_step=ms_per_token["group"] - ms_per_token["single"],
    )


def print_group(figures: GroupFigures) -> None:
    print(
        f"\nworker group ({figures.ranks} ranks, {figures.backend}, {figures.sharding} parallel, "
        f"loopback) against one worker, max_tokens {figures.max_tokens}, medians:"
    )
    print("  path    " + "".join(f"  c{c} tok/s  c{c} TTFT ms" for c in GROUP_CONCURRENCY) + "  ready s")
    for name, figures_of in figures.paths.items():
        cells = "".join(
            f"  {figures_of[f'c{c}']['tok_s']:9.1f}  {figures_of[f'c{c}']['ttft_s'] * 1e3:10.1f}"
            for c in GROUP_CONCURRENCY
        )
        print(f"  {name:<6}{cells}  {figures.ready_s[name]:7.2f}")
    ratios = ", ".join(f"{c} {v:.2f}" for c, v in figures.group_vs_single.items())
    print(f"  group / single tok/s: {ratios}")
    ttft = ", ".join(f"{c} {v:.2f}" for c, v in figures.ttft_group_vs_single.items())
    print(f"  group / single TTFT: {ttft}")
    print(
        f"  the group's cost per decode step (c1 time per token, group minus single): "
        f"{figures.collective_ms_per_step:.2f} ms"
    )
