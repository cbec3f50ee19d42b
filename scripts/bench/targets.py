"""The targets on the table's figures, printed after the table and kept in the JSON's targets:
isolated >= 0.95 x raw at every concurrency (c1: decode tok/s; cN: total tok/s); isolated >= 1.15
x mlx_lm.server at c8 (total tok/s); TTFT p50 isolated <= raw + 5 ms. Beside them, not a target,
isolated against raw batches that never detokenize (see `bench.raw`).

Also stated here, judged and printed in its own section (`bench.constrained`): 8 streams of which
4 are constrained by a JSON schema >= 0.9 x 8 free streams (total tok/s, isolated)."""

from __future__ import annotations

import math

from bench.figures import at_least, number, ratio, verdict
from bench.results.serving import Batched, IsolatedAndRaw, PathSummary, SpeedTargets
from bench.settings import PATHS

ISOLATED_VS_RAW_MIN = 0.95  # at every concurrency
ISOLATED_VS_MLX_LM_SERVER_MIN = 1.15
ISOLATED_VS_MLX_LM_SERVER_AT = 8  # concurrency
TTFT_SLACK_MS = 5.0  # TTFT p50: isolated <= raw + this
CONSTRAINED_VS_FREE_MIN = 0.9  # total tok/s: 8 streams, half under a grammar, / 8 free streams


def path_ratios(summaries: dict[str, PathSummary], path: str, base: str) -> dict[str, float]:
    """`path` / `base` by concurrency (c1: decode tok/s; cN: total tok/s), c1_e2e and ttft_p50."""
    top, bottom = summaries[path], summaries[base]
    ratios: dict[str, float] = {}
    for key in bottom:
        figure = "decode_tok_s" if key == "c1" else "total_tok_s"
        ratios[key] = ratio(getattr(top[key], figure), getattr(bottom[key], figure))
    if "c1" in bottom:
        ratios["c1_e2e"] = ratio(top["c1"].e2e_tok_s, bottom["c1"].e2e_tok_s)  # type: ignore[union-attr]
        ratios["ttft_p50"] = ratio(top["c1"].ttft_ms_p50, bottom["c1"].ttft_ms_p50)
    return ratios


def c1_figure(summary: PathSummary, figure: str) -> float | None:
    """A path's c1 figure, or None when it ran no single stream."""
    c1 = summary.get("c1")
    return None if c1 is None else getattr(c1, figure)


def speed_targets(summaries: dict[str, PathSummary]) -> SpeedTargets:
    vs_raw = path_ratios(summaries, "isolated", "raw")
    vs_peer = path_ratios(summaries, "isolated", "mlx_lm_server")
    levels = list(summaries["raw"])  # c1, c4, ...
    by_level = {key: at_least(vs_raw.get(key), ISOLATED_VS_RAW_MIN) for key in levels}
    peer_key = f"c{ISOLATED_VS_MLX_LM_SERVER_AT}"
    ttft = {path: c1_figure(summaries[path], "ttft_ms_p50") for path in PATHS}
    gap = None
    if ttft["isolated"] is not None and ttft["raw"] is not None:
        gap = ttft["isolated"] - ttft["raw"]
    raw = summaries["raw"]
    return SpeedTargets(
        isolated_vs_raw_min=ISOLATED_VS_RAW_MIN,
        isolated_vs_raw={key: vs_raw.get(key) for key in levels},
        isolated_vs_raw_ok_by_concurrency=by_level,
        isolated_vs_raw_ok=None if not by_level or None in by_level.values() else all(by_level.values()),
        isolated_vs_mlx_lm_server_min=ISOLATED_VS_MLX_LM_SERVER_MIN,
        isolated_vs_mlx_lm_server_at=peer_key,
        isolated_vs_mlx_lm_server=vs_peer.get(peer_key),
        isolated_vs_mlx_lm_server_ok=at_least(vs_peer.get(peer_key), ISOLATED_VS_MLX_LM_SERVER_MIN),
        ttft_p50_slack_ms=TTFT_SLACK_MS,
        ttft_p50_ms=IsolatedAndRaw(isolated=ttft["isolated"], raw=ttft["raw"]),
        ttft_p50_isolated_minus_raw_ms=gap,
        ttft_ok=None if gap is None or math.isnan(gap) else gap <= TTFT_SLACK_MS,
        # Not a target: against raw batches that never turn tokens into text (see RawMLX.batch).
        isolated_vs_raw_tokens_only={
            key: ratio(summaries["isolated"][key].total_tok_s, level.tokens_only_total_tok_s)
            for key, level in raw.items()
            if isinstance(level, Batched) and level.tokens_only_total_tok_s is not None
        },
    )


def print_targets(targets: SpeedTargets) -> None:
    print()
    print("targets:")
    levels = ", ".join(
        f"{key} {number(value, 3)}" + (" (decode)" if key == "c1" else "")
        + ("" if targets.isolated_vs_raw_ok_by_concurrency[key] is not False else " FAIL")
        for key, value in targets.isolated_vs_raw.items()
    )  # fmt: skip
    print(
        f"  isolated >= {ISOLATED_VS_RAW_MIN:g} x raw at every concurrency: {levels}: "
        f"{verdict(targets.isolated_vs_raw_ok)}"
    )
    print(
        f"  isolated >= {ISOLATED_VS_MLX_LM_SERVER_MIN:g} x mlx_lm.server at "
        f"{targets.isolated_vs_mlx_lm_server_at} (total tok/s): "
        f"{number(targets.isolated_vs_mlx_lm_server, 3)}: "
        f"{verdict(targets.isolated_vs_mlx_lm_server_ok)}"
    )
    ttft = targets.ttft_p50_ms
    print(
        f"  TTFT p50 isolated <= raw + {TTFT_SLACK_MS:g} ms: isolated {number(ttft.isolated, 2)}"
        f" ms, raw {number(ttft.raw, 2)} ms (difference "
        f"{number(targets.ttft_p50_isolated_minus_raw_ms, 2)} ms): {verdict(targets.ttft_ok)}"
    )
    if bare := targets.isolated_vs_raw_tokens_only:
        listed = ", ".join(f"{key} {number(value, 3)}" for key, value in bare.items())
        print(f"  (not a target) isolated / raw batches that do not detokenize: {listed}")
