"""The chart (--chart, default beside --json with .png, else bench.png): total tok/s against
concurrency for the four paths (c1: the single stream's end-to-end tok/s, which is its total), and
below it the isolated server's ratios to raw and to mlx_lm.server with their targets; a PNG drawn
by matplotlib (Agg). Without matplotlib the chart is skipped, with a hint: pip install -e '.[bench]'.
"""

from __future__ import annotations

from pathlib import Path

from bench.figures import progress, ratio
from bench.results.serving import Info, PathSummary
from bench.settings import LABELS, PATHS
from bench.targets import ISOLATED_VS_MLX_LM_SERVER_MIN, ISOLATED_VS_RAW_MIN

STYLES = {  # color, marker, line
    "raw": ("tab:gray", "s", "--"),
    "mlx_lm_server": ("tab:orange", "^", "-"),
    "in_process": ("tab:blue", "D", "-"),
    "isolated": ("tab:green", "o", "-"),
}


def write_chart(
    path: Path, summaries: dict[str, PathSummary], concurrency: list[int], title: str
) -> Path | None:
    """Total tok/s against concurrency for every path, and the isolated server's ratios; a PNG.
    None, with a hint, when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress(
            "chart skipped: matplotlib is not installed; install it with "
            "pip install -e '.[bench]' (or pip install matplotlib)"
        )
        return None

    def total(path_name: str, level: int) -> float:
        figures = summaries[path_name].get(f"c{level}")
        return float("nan") if figures is None else figures.total_tok_s

    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(9, 7.5), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    for name in PATHS:
        color, marker, line = STYLES[name]
        values = [total(name, level) for level in concurrency]
        top.plot(
            concurrency, values, color=color, marker=marker, linestyle=line, linewidth=2,
            markersize=7, label=LABELS[name],
        )  # fmt: skip
    top.set_ylabel("total tok/s (all streams)")
    top.set_ylim(bottom=0)
    top.set_title(title, fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left")

    for base, color, bound in (
        ("raw", "tab:gray", ISOLATED_VS_RAW_MIN),
        ("mlx_lm_server", "tab:orange", ISOLATED_VS_MLX_LM_SERVER_MIN),
    ):
        values = [ratio(total("isolated", level), total(base, level)) for level in concurrency]
        bottom.plot(
            concurrency, values, color=color, marker="o", linewidth=2,
            label=f"isolated / {LABELS[base]} (target >= {bound:g})",
        )  # fmt: skip
        bottom.axhline(bound, color=color, linestyle=":", linewidth=1)
    bottom.axhline(1.0, color="black", linewidth=0.6)
    bottom.set_ylabel("ratio")
    bottom.set_xlabel("concurrent streams (c1: one stream's end-to-end tok/s)")
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="best", fontsize=8)
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(concurrency)
    bottom.set_xticklabels([str(level) for level in concurrency])
    bottom.minorticks_off()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def chart_title(info: Info, max_tokens: int, repeats: int) -> str:
    model, machine, versions = info.model, info.machine, info.versions
    return (
        f"{Path(model.path).name} ({model.parameters:,} parameters), "
        f"max_tokens {max_tokens}, greedy, medians of {repeats}\n"
        f"{machine.cpu_count} CPUs (load average at start "
        f"{(machine.load_average_at_start or ['?'])[0]}), mlx "
        f"{versions.mlx}, mlx-lm {versions.mlx_lm}"
    )
