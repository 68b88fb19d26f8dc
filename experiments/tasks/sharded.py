"""Task ``sharded``: sharded evolution on 8 CPU host devices equals the single-device one.

For every axis assignment of ``parallel.assignments`` (default on a (2, 4) mesh with axes
``("a", "b")``: tokens only, features only, tokens × features, batch × tokens) and every
method of ``parallel.methods`` (``gspmd``: ``jax.jit`` + ``NamedSharding``; ``ring``:
``shard_map`` ring attention with an online softmax; ``gspmd+chunked``: the chunked
attention operator), :func:`transflow.parallel.shard_evolve` evolves a random batch and
``max_rel_diff_vs_single_device = max |sharded − single| / max |single|`` is logged per
(dtype, assignment, method) to ``metrics.jsonl``; it must be ≤ 1e-12 in float64 and
≤ 1e-5 in float32. A second part compiles the token-sharded program for P = 1, 2, 4, 8
token devices, logs the per-device memory from ``compiled.memory_analysis()`` and draws it
(``memory.png``, :func:`transflow.plotting.plot_sharded_memory`; figure F90).

Claims (a failure marks the run FAILED): at every size, ``n_failed == 0`` and
``max_rel_diff_<dtype> ≤ tol_<dtype>``; with the memory part (not in smoke mode), the
per-device temporaries at the largest P are ≤ ``memory_ratio_factor``/P of those at P = 1.

JAX fixes the number of CPU devices when its backend starts, and the job's process has
already started JAX with one device; so the checks run in a child process
(``python -m transflow.parallel._selftest``) with
``XLA_FLAGS=--xla_force_host_platform_device_count=<parallel.devices>`` set — this task
sets it itself. The child process is bounded by ``timeout_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..context import markdown_table
from ..validate import Constraint

__all__ = ["CHOICES", "CONSTRAINTS", "Config", "ParallelConfig", "run"]

#: Names checked before any work, smoke runs included (transflow-run help sharded).
CHOICES = {
    "scheme": ("lie", "prenorm"),
    "grid": ("gauss", "index"),
    "parallel.methods": ("gspmd", "ring", "gspmd+chunked"),
    "memory_methods": ("gspmd", "ring", "gspmd+chunked"),
}
#: Cross-option constraints, checked before any work (experiments/validate.py).
CONSTRAINTS = (
    Constraint(
        ("task.assignment_labels", "task.parallel.assignments"),
        lambda labels, assignments: set(labels) <= set(assignments),
        "every task.assignment_labels entry a label of task.parallel.assignments",
    ),
)


def _default_assignments() -> dict[str, Any]:
    return {
        "tokens": {"tokens": ["a", "b"]},
        "features": {"features": ["a", "b"]},
        "tokens_x_features": {"tokens": "a", "features": "b"},
        "batch_x_tokens": {"batch": "a", "tokens": "b"},
    }


@dataclass
class ParallelConfig:
    """The device mesh (``configs/parallel/default.yaml``, ``task.parallel.*``)."""

    devices: int = 8  # CPU host devices of the child process (XLA_FLAGS)
    mesh: list[int] = field(default_factory=lambda: [2, 4])  # devices per mesh axis
    axis_names: list[str] = field(default_factory=lambda: ["a", "b"])
    # label -> {batch|tokens|features: mesh axis name, list of names, or null}
    assignments: dict[str, Any] = field(default_factory=_default_assignments)
    methods: list[str] = field(default_factory=lambda: ["gspmd", "ring", "gspmd+chunked"])


@dataclass
class Config:
    """Parameters of the sharded-evolution check (``task.<field>=...``)."""

    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    batch: int = 4
    n_tokens: int = 64
    d_model: int = 32
    n_heads: int = 8
    d_ff: int | None = 64  # None: the paper's square FFN (residual form)
    n_layers: int = 2
    grid: str = "gauss"  # "gauss": Gauss–Legendre weights on Ω_x and Ω_y; "index": Δx=Δy=1
    scheme: str = "lie"  # "lie" | "prenorm"
    causal: bool = False
    query_block: int = 16  # block sizes of the chunked operator
    key_block: int = 16
    # memory part: token sharding over these device counts (0-length list: skip)
    memory_n_tokens: int = 1024
    memory_token_devices: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    memory_methods: list[str] = field(default_factory=lambda: ["gspmd", "ring"])
    tol_fp64: float = 1e-12
    tol_fp32: float = 1e-5
    # claim: temp(P) / temp(P=1) ≤ memory_ratio_factor / P for the largest P (1/P is ideal)
    memory_ratio_factor: float = 2.0
    timeout_s: int = 1200
    # run only these labels of parallel.assignments (empty: all of them)
    assignment_labels: list[str] = field(default_factory=list)


def _table(records) -> str:
    lines = [
        "| dtype | assignment | method | out sharding | max rel diff vs 1 device | |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['dtype']} | {r['assignment']} | {r['method']} | `{r['out_spec']}` | "
            f"{r['max_rel_diff_vs_single_device']:.2e} | {'PASS' if r['passed'] else 'FAIL'} |"
        )
    return "\n".join(lines)


#: The fields of Config passed as they are to the child process (its options).
_OPTIONS = (
    "batch", "n_tokens", "d_model", "n_heads", "d_ff", "n_layers", "grid", "scheme", "causal",
    "query_block", "key_block",
)  # fmt: skip


def _memory(cfg: Config, ctx, opts: dict, mem_devices: list[int]) -> dict:
    """Per-device memory with the token axis sharded over ``mem_devices``: its table, the
    figure ``memory`` and the claim that temporaries fall like 1/P; the summary fields."""
    from transflow.parallel._selftest import run_subprocess
    from transflow.plotting import plot_sharded_memory

    summary: dict[str, Any] = {}
    mem = run_subprocess(
        "memory",
        dict(
            opts,
            n_tokens=cfg.memory_n_tokens,
            grid="index",
            dtype="float32",
            methods=list(cfg.memory_methods),
            token_devices=mem_devices,
            n_heads=2,
            d_ff=None,
        ),
        timeout=cfg.timeout_s,
    )
    base = {r["method"]: r for r in mem if r["token_devices"] == mem_devices[0]}
    rows = []
    for r in mem:
        r["temp_ratio"] = r["temp"] / base[r["method"]]["temp"]
        ctx.log({"kind": "memory", **r})
        ideal = mem_devices[0] / r["token_devices"]
        ratio = f"{r['temp_ratio']:.3f}"
        rows.append([r["method"], r["token_devices"], r["temp"], ratio, f"{ideal:.3f}"])
    ctx.report(
        f"## Per-device memory, token axis sharded ({cfg.memory_n_tokens} tokens, "
        "float32, compiled memory_analysis)\n\n"
        + markdown_table(["method", "P", "temp bytes", "temp ratio vs P=1", "1/P"], rows)
    )
    ctx.save_figure(
        plot_sharded_memory(
            mem, title=f"token-sharded evolution, n = {cfg.memory_n_tokens}, float32"
        ),
        "memory",
    )
    pmax = max(mem_devices)
    for m in cfg.memory_methods:
        top = next(r for r in mem if r["method"] == m and r["token_devices"] == pmax)
        summary[f"temp_ratio_P{pmax}_{m}"] = top["temp_ratio"]
        if pmax > mem_devices[0]:
            # per-device temporaries fall at least like 2/P (1/P is ideal)
            bound = cfg.memory_ratio_factor * mem_devices[0] / pmax
            ctx.claim(f"temp_ratio_P{pmax}_{m}", top["temp_ratio"], bound)
    return summary


def run(cfg: Config, ctx) -> dict:
    """Run the ``sharded`` experiment (the module docstring says what it does)."""
    from omegaconf import OmegaConf

    from transflow.parallel._selftest import run_subprocess

    par = cfg.parallel
    assignments = OmegaConf.to_container(OmegaConf.create(dict(par.assignments)))
    opts = dict(
        devices=par.devices,
        mesh=list(par.mesh),
        axis_names=list(par.axis_names),
        assignments=assignments,
        methods=list(par.methods),
        dtypes=list(ctx.dtypes),
        seed=ctx.seed,
        **{k: getattr(cfg, k) for k in _OPTIONS},
    )
    mem_devices = [p for p in cfg.memory_token_devices if p <= par.devices]
    if cfg.assignment_labels:  # a subset of the mesh assignments, by label
        opts["assignments"] = {k: assignments[k] for k in cfg.assignment_labels}
    tol = {"float64": cfg.tol_fp64, "float32": cfg.tol_fp32}

    records = run_subprocess("check", opts, timeout=cfg.timeout_s)
    for r in records:
        r["tolerance"] = tol[r["dtype"]]
        r["passed"] = r["max_rel_diff_vs_single_device"] <= r["tolerance"]
        ctx.log({"kind": "equivalence", **r})
    ctx.report(
        f"## Results\n\nSharded vs single-device evolution ({par.devices} CPU host devices, mesh "
        f"{dict(zip(par.axis_names, par.mesh))}).\n\n"
        f"batch {opts['batch']}, {opts['n_tokens']} tokens, d = {opts['d_model']}, "
        f"{opts['n_heads']} heads, d_ff = {opts['d_ff']}, {opts['n_layers']} "
        f"{opts['scheme']} steps, grid {opts['grid']}, causal {opts['causal']}.\n\n"
        + _table(records)
    )

    summary: dict[str, Any] = {
        "n_checks": len(records),
        "n_passed": sum(r["passed"] for r in records),
    }
    for dt in sorted({r["dtype"] for r in records}):
        summary[f"max_rel_diff_{dt}"] = max(
            r["max_rel_diff_vs_single_device"] for r in records if r["dtype"] == dt
        )

    if mem_devices:
        summary |= _memory(cfg, ctx, opts, mem_devices)
    # Claims, at every size: each sharded run equals the single-device one to round-off.
    ctx.claim("n_failed", summary["n_checks"] - summary["n_passed"], 0, op="==")
    for dt in sorted({r["dtype"] for r in records}):
        ctx.claim(f"max_rel_diff_{dt}", summary[f"max_rel_diff_{dt}"], tol[dt])
    return summary
