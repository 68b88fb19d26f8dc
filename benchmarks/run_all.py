"""The headline benchmark (``make bench``, ≤ 10 minutes on 2 cores) → ``results/summary.json``.

What it runs, each benchmark in its own process (clean thread pools and memory counters):

1. waits up to ``--wait`` seconds (default 120) for a quiet machine: a 1-minute load
   average below half the core count. If the machine never gets quiet, everything still
   runs but every timing target reads "not measured reliably";
2. ``bench_layer.py`` on all cores (2 threads here), with torch.compile as a second
   reference (reported, no target), then on one thread;
3. ``bench_longseq.py --tokens 16384`` on all cores (with the fresh-process peak RSS) and on
   one thread (time only): the chunked attention's thread scaling, its ratio to torch SDPA
   and its causal speed-up.

The targets are fractions of the same run's XLA matmul rate (they hold on any machine);
ratios to torch are reported beside them with both matmul rates. ``--memory`` adds the
32k-token memory case (``bench_chunked.py``), ``--all`` every other ``bench_*.py``.

    .venv/bin/python benchmarks/run_all.py            # the ten-minute run
    .venv/bin/python benchmarks/run_all.py --quick    # fewer rounds (a look, not a result)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
HEADLINE = ("bench_layer.py", "bench_longseq.py")
LONG_TOKENS = 16384
# key -> (op, bound, which runs must be valid for the target to count)
TARGETS = {
    "fwdbwd_flop_fraction": (">=", 0.75, ("layer",)),
    "fwdbwd_flop_fraction_1thread": (">=", 0.75, ("layer", "layer1")),
    "flop_fraction": (">=", 0.9, ("layer",)),
    "flop_fraction_1thread": (">=", 0.9, ("layer", "layer1")),
    "ratio_vs_torch": (">=", 1.0, ("layer",)),
    "ratio_vs_torch_1thread": (">=", 1.0, ("layer", "layer1")),
    "ratio_fwdbwd_vs_torch": (">=", 1.0, ("layer",)),
    "ratio_fwdbwd_vs_torch_1thread": (">=", 1.0, ("layer", "layer1")),
    "longseq_fwdbwd_thread_scaling": (">=", 1.6, ("long", "long1")),
    "longseq_fwdbwd_ratio_vs_sdpa": (">=", 1.0, ("long",)),
    "longseq_fwdbwd_peak_rss_ratio": ("<=", 1.0, ()),
    "longseq_causal_speedup_fwdbwd": (">=", 1.8, ("long",)),
    "wall_s": ("<=", 600.0, ()),
}


def wait_for_quiet(max_wait: float, poll: float = 5.0) -> dict:
    """Wait until the 1-minute load average is below half the core count (or give up)."""
    cores = os.cpu_count() or 1
    limit = cores / 2
    t0 = time.perf_counter()
    first = os.getloadavg()[0]
    load = first
    while load >= limit and time.perf_counter() - t0 < max_wait:
        print(f"[bench] waiting for a quiet machine: load {load:.2f} >= {limit:g}", flush=True)
        time.sleep(poll)
        load = os.getloadavg()[0]
    return {
        "quiet": load < limit,
        "limit": limit,
        "load_at_start": first,
        "load_when_started": load,
        "waited_s": time.perf_counter() - t0,
    }


def _run(script: str, args: list[str]) -> None:
    cmd = [sys.executable, str(HERE / script), *args]
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True)


def _read(path: pathlib.Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _row(long: dict, causal: bool, mode: str = "fwdbwd") -> dict:
    for r in long.get("rows", []):
        if r["tokens"] == LONG_TOKENS and r["causal"] == causal and r["mode"] == mode:
            return r
    return {}


def _longseq_figures(long2: dict, long1: dict) -> dict:
    """The 16k-token headline figures from the two- and one-thread longseq runs."""
    full2, full1 = _row(long2, False), _row(long1, False)
    t2 = full2.get("transflow_seconds", {}).get("median")
    t1 = full1.get("transflow_seconds", {}).get("median")
    s2 = full2.get("torch_seconds", {}).get("median")
    s1 = full1.get("torch_seconds", {}).get("median")
    targets = long2.get("targets", {})
    rss = [
        targets.get(f"fwdbwd_{c}_peak_rss_ratio_16k", {}).get("value") for c in ("full", "causal")
    ]
    rss = [v for v in rss if v is not None]
    return {
        "longseq_fwdbwd_thread_scaling": t1 / t2 if t1 and t2 else None,
        "longseq_sdpa_fwdbwd_thread_scaling": s1 / s2 if s1 and s2 else None,
        "longseq_fwdbwd_ratio_vs_sdpa": full2.get("time_ratio_torch_over_transflow", {}).get(
            "median"
        ),
        "longseq_causal_fwdbwd_ratio_vs_sdpa": _row(long2, True)
        .get("time_ratio_torch_over_transflow", {})
        .get("median"),
        "longseq_fwdbwd_peak_rss_ratio": max(rss) if rss else None,
        "longseq_causal_speedup_fwdbwd": long2.get("causal_speedup", {})
        .get(f"transflow_fwdbwd_{LONG_TOKENS}", {})
        .get("median"),
        "longseq_fwdbwd_s": {"threads2": t2, "threads1": t1},
    }


def summarize(out: pathlib.Path, quiet: dict, wall_s: float, quick: bool, others: dict) -> dict:
    layer, layer1 = _read(out / "layer.json"), _read(out / "threads1" / "layer.json")
    long2, long1 = _read(out / "longseq.json"), _read(out / "threads1" / "longseq.json")
    summary = {
        "quiet_machine": quiet,
        "wall_s": wall_s,
        "quick": quick,
        # the machine's own limits, same run
        "xla_matmul_gflops": layer.get("xla_matmul_gflops"),
        "xla_matmul_gflops_1thread": layer1.get("xla_matmul_gflops"),
        "torch_matmul_gflops": layer.get("torch_matmul_gflops"),
        "torch_matmul_gflops_1thread": layer1.get("torch_matmul_gflops"),
        "matmul_speedup_all_vs_1thread": layer.get("matmul_speedup_all_vs_1thread"),
        # transflow against those limits
        "flop_fraction": layer.get("flop_fraction"),
        "flop_fraction_1thread": layer1.get("flop_fraction"),
        "fwdbwd_flop_fraction": layer.get("fwdbwd_flop_fraction"),
        "fwdbwd_flop_fraction_1thread": layer1.get("fwdbwd_flop_fraction"),
        "fwdbwd_flop_fraction_scan": layer.get("fwdbwd_flop_fraction_scan"),
        "fwdbwd_flop_fraction_scan_1thread": layer1.get("fwdbwd_flop_fraction_scan"),
        "torch_flop_fraction": layer.get("torch_flop_fraction"),
        # ratios to torch (> 1: transflow faster)
        "ratio_vs_torch": layer.get("ratio_vs_torch"),
        "ratio_vs_torch_1thread": layer1.get("ratio_vs_torch"),
        "ratio_fwdbwd_vs_torch": layer.get("ratio_fwdbwd_vs_torch"),
        "ratio_fwdbwd_vs_torch_1thread": layer1.get("ratio_fwdbwd_vs_torch"),
        "ratio_vs_torch_compile": layer.get("ratio_vs_torch_compile"),
        "ratio_fwdbwd_vs_torch_compile": layer.get("ratio_fwdbwd_vs_torch_compile"),
        "torch_compile_s": layer.get("torch_compile_s"),
        "torch_fast_path": layer.get("torch_fast_path"),
        **_longseq_figures(long2, long1),
        "load_average": {
            "layer": [layer.get("load_average_before"), layer.get("load_average_after")],
            "layer1": [layer1.get("load_average_before"), layer1.get("load_average_after")],
            "longseq": [long2.get("load_average_before"), long2.get("load_average_after")],
            "longseq1": [long1.get("load_average_before"), long1.get("load_average_after")],
        },
        "validity": {
            name: (d.get("validity") if d else ["not run"])
            for name, d in (("layer", layer), ("layer1", layer1), ("long", long2), ("long1", long1))
        },
        "jax_version": layer.get("jax_version"),
        "jaxlib_version": layer.get("jaxlib_version"),
        "torch_version": layer.get("torch_version"),
        "backend": layer.get("backend"),
        "cpu_count": layer.get("cpu_count"),
        "other_benchmarks": others,
    }
    valid = {
        "layer": bool(layer.get("valid")),
        "layer1": bool(layer1.get("valid")),
        "long": bool(long2.get("valid")),
        "long1": bool(long1.get("valid")),
    }
    status = {}
    for key, (op, bound, runs) in TARGETS.items():
        v = summary.get(key)
        if v is None:
            status[key] = "not measured"
        elif runs and not (quiet["quiet"] and not quick and all(valid[r] for r in runs)):
            status[key] = "not measured reliably"
        else:
            status[key] = "met" if (v >= bound if op == ">=" else v <= bound) else "NOT met"
    summary["valid"] = valid
    summary["targets"] = {
        k: {"bound": f"{op} {b:g}", "value": summary.get(k), "status": status[k]}
        for k, (op, b, _) in TARGETS.items()
    }
    return summary


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds, no torch.compile")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--wait", type=float, default=120.0, help="max seconds to wait for quiet")
    ap.add_argument("--memory", action="store_true", help="add the 32k-token memory case")
    ap.add_argument("--all", action="store_true", help="also every other bench_*.py")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    (out / "threads1").mkdir(parents=True, exist_ok=True)
    quiet = wait_for_quiet(args.wait)
    print(
        f"[bench] load {quiet['load_when_started']:.2f} after {quiet['waited_s']:.0f} s: "
        + ("quiet" if quiet["quiet"] else "NOT quiet, timings will not count"),
        flush=True,
    )
    t0 = time.perf_counter()
    layer_rounds = ["--rounds", "5" if args.quick else "8"]
    compile_ = [] if (args.quick or args.no_torch_compile) else ["--torch-compile"]
    _run("bench_layer.py", ["--out", str(out), *layer_rounds, *compile_])
    _run("bench_layer.py", ["--out", str(out / "threads1"), "--threads", "1", *layer_rounds])
    long_common = ["--tokens", str(LONG_TOKENS)]
    _run(
        "bench_longseq.py",
        ["--out", str(out), *long_common, "--rounds", "2" if args.quick else "3"],
    )
    _run(
        "bench_longseq.py",
        [
            "--out",
            str(out / "threads1"),
            "--threads",
            "1",
            "--no-memory",
            *long_common,
            "--rounds",
            "2",
        ],
    )
    others = {}
    extra = (["bench_chunked.py"] if args.memory else []) + (
        sorted(p.name for p in HERE.glob("bench_*.py") if p.name not in HEADLINE)
        if args.all
        else []
    )
    for script in dict.fromkeys(extra):
        try:
            _run(script, ["--out", str(out)] if script == "bench_chunked.py" else [])
            others[script] = "ok"
        except subprocess.CalledProcessError as e:
            others[script] = f"failed (exit {e.returncode})"
    wall = time.perf_counter() - t0
    summary = summarize(out, quiet, wall, args.quick, others)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"\n[summary] jax {summary['jax_version']}, torch {summary['torch_version']}, "
        f"{summary['cpu_count']} cores, {wall:.0f} s (+{quiet['waited_s']:.0f} s waiting)"
    )
    print(
        f"  matmul GFLOP/s: XLA {summary['xla_matmul_gflops']:.0f} (1 thread "
        f"{summary['xla_matmul_gflops_1thread']:.0f}), torch {summary['torch_matmul_gflops']:.0f}"
        f"; load average {summary['load_average']}"
    )
    for name, why in summary["validity"].items():
        print(f"  {name:7s} valid={summary['valid'].get(name)} ({'; '.join(why)})")
    for key, t in summary["targets"].items():
        v = t["value"]
        vs = "n/a" if v is None else f"{v:.3g}"
        print(f"  {key:34s} {vs:>8s}   target {t['bound']:>7s}: {t['status']}")
    for key in (
        "ratio_vs_torch_compile",
        "ratio_fwdbwd_vs_torch_compile",
        "longseq_sdpa_fwdbwd_thread_scaling",
    ):
        v = summary.get(key)
        print(f"  {key:34s} {'n/a' if v is None else f'{v:.3g}':>8s}   (reported, no target)")
    print(f"  -> {out / 'summary.json'}")
    return summary


if __name__ == "__main__":
    main()
