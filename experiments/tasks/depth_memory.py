"""Task ``depth_memory``: the peak memory of one gradient per mechanism and depth (a side
study of the depth page, docs/depth.md; part of ``experiment=depth`` before the study
runner).

Each (gradient, depth) is one gradient of the digits model
(:func:`transflow.control.gradient_peak_rss`) in a fresh process: its peak RSS and its
seconds, at the depths ``task.memory_depths`` on a batch of ``task.memory_batch`` random
images, width ``task.d``. Claimed for every mechanism but ``backprop`` (which stores a
state per step: the contrast): peak(N_max) <= ``task.max_memory_ratio`` × peak(N_min).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import library_names
from ..context import markdown_table

__all__ = ["CHOICES", "Config", "memory_table", "run"]


#: Names checked before any work (transflow-run help depth_memory).
CHOICES = {"memory_gradients": library_names("control", "GRADIENTS")}


@dataclass
class Config:
    """Peak RSS of one gradient per mechanism (``task.<field>=...``)."""

    d: int = 32
    memory_depths: list[int] = field(default_factory=lambda: [16, 256])
    memory_batch: int = 1024
    # claimed: peak(N_max) <= max_memory_ratio * peak(N_min); "backprop" is the contrast
    memory_gradients: list[str] = field(
        default_factory=lambda: ["adjoint", "checkpointed", "backprop"]
    )
    max_memory_ratio: float = 2.0


def memory_table(memory: dict) -> str:
    """The peak RSS per mechanism and depth (MB, grad seconds) and the ratio, markdown."""
    if not memory:
        return "No gradient measured (task.memory_gradients=[])."
    depths = next(iter(memory.values()))["depths"]
    rows = [
        [g, *(f"{p:.0f} ({t:.1f})" for p, t in zip(m["peak_mb"], m["grad_seconds"]))]
        + [f"{m['ratio']:.2f}"]
        for g, m in memory.items()
    ]
    head = ["gradient", *(f"N={n}: MB (s)" for n in depths), "ratio"]
    return "Peak RSS of one gradient (fresh process each; grad seconds in brackets):\n\n" + (
        markdown_table(head, rows)
    )


def run(cfg: Config, ctx) -> dict:
    """Measure every (gradient, depth); claim the ratio of every mechanism but backprop."""
    from transflow.control import gradient_peak_rss

    depths = [int(n) for n in cfg.memory_depths]
    memory = {}
    for g in cfg.memory_gradients:
        runs = [
            gradient_peak_rss(n, gradient=g, batch_size=cfg.memory_batch, d=cfg.d) for n in depths
        ]
        for r in runs:
            ctx.log({"kind": "memory", **r})
        peaks = [r["peak_rss_bytes"] for r in runs]
        memory[g] = {
            "depths": depths,
            "peak_mb": [p / 2**20 for p in peaks],
            "grad_seconds": [r["grad_seconds"] for r in runs],
            "ratio": peaks[-1] / peaks[0],
        }
        if g != "backprop":  # backprop stores a state per step: the contrast, not a claim
            ctx.claim(f"peak_rss_ratio_{g}", memory[g]["ratio"], cfg.max_memory_ratio, op="<=")
    ctx.report("## Results\n\n" + memory_table(memory))
    return {f"peak_rss_ratio_{g}": m["ratio"] for g, m in memory.items()}
