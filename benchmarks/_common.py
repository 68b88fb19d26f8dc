"""Shared helpers of the benchmarks: environment, interleaved timing, JSON results.

Timings on a shared machine are noisy: every benchmark times its candidates *interleaved*
(one call of each per round, after warm-up) and reports the median with min and max, so a
burst of load hits all candidates alike and the ratios stay meaningful.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def pin_threads(threads: int | None) -> int:
    """Restrict this process to ``threads`` cores (both XLA and torch then use them).

    Must run before jax/torch start their thread pools. Returns the thread count used.
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    n = len(cores) or (os.cpu_count() or 1)
    if threads is not None and threads < n and cores:
        os.sched_setaffinity(0, cores[:threads])
        n = threads
    return n


def env_info() -> dict:
    import jax

    info = {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jax.lib, "__version__", None) or _version("jaxlib"),
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    try:
        import torch

        info["torch_version"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        info["torch_version"] = None
    return info


def _version(dist: str):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:  # pragma: no cover
        return None


def stats(samples: list[float]) -> dict:
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
        "samples": samples,
    }


def interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int,
    rounds: int,
    alternate: bool = True,
    inner: int = 1,
) -> dict:
    """Time each callable once per round after ``warmup`` untimed rounds.

    With ``alternate`` the order of the candidates is reversed every other round, so no
    candidate always runs right after the same neighbour (cache and frequency effects).
    ``inner > 1`` times ``inner`` back-to-back calls per measurement and records the mean
    (on a GPU one dispatch is too short to time alone).
    """
    for _ in range(warmup):
        for f in fns.values():
            f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    items = list(fns.items())
    for r in range(rounds):
        for k, f in items if not (alternate and r % 2) else items[::-1]:
            t0 = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t0) / inner)
    return {k: stats(v) for k, v in times.items()}


def per_round_ratio(timings: dict, num: str, den: str) -> dict | None:
    """Median, min and max over rounds of ``num time / den time`` (same-round pairs)."""
    a, b = timings[num]["samples"], timings[den]["samples"]
    r = [x / y for x, y in zip(a, b) if y > 0]
    if not r:
        return None
    return {"median": statistics.median(r), "min": min(r), "max": max(r), "n": len(r)}


def load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def validity(
    *,
    cores: int,
    load_before: float | None,
    load_after: float | None,
    speedup: float | None,
    spread: float | None = None,
) -> tuple[bool, list[str]]:
    """Whether a timing run counts as measured, and the reasons when it does not.

    Valid: the 1-minute load average before and after is below the number of cores of the
    machine; when the run used 2 or more threads, ``speedup`` (the same run's
    all-threads vs one-thread matmul rate) is at least 1.5; and, when given, ``spread``
    (the slowest over the median round of the run's fixed reference matmul) is at most
    1.25: another process taking the cores for part of the run shows up there even
    when the 1-minute load average does not.
    """
    why = []
    if spread is not None and spread > 1.25:
        why.append(
            f"reference matmul's slowest round {spread:.2f}x its median (> 1.25): "
            "the cores were shared during the run"
        )
    machine = os.cpu_count() or 1
    for name, load in (("before", load_before), ("after", load_after)):
        if load is None:
            why.append(f"no load average {name} the run")
        elif load >= machine:
            why.append(f"load average {name} the run {load:.2f} >= {machine} cores")
    if cores >= 2:
        if speedup is None:
            why.append("no matmul speedup measured")
        elif speedup < 1.5:
            why.append(f"{cores}-thread matmul only {speedup:.2f}x the 1-thread rate (< 1.5)")
    return not why, why


def write_result(name: str, result: dict, out_dir: pathlib.Path | None = None) -> pathlib.Path:
    out_dir = RESULTS if out_dir is None else pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def fmt(s: dict, unit: float = 1e3, suffix: str = "ms") -> str:
    return (
        f"{s['median'] * unit:8.2f} {suffix} (min {s['min'] * unit:.2f}, "
        f"max {s['max'] * unit:.2f}, n={s['n']})"
    )


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, bytes: ``VmHWM`` of
    ``/proc/self/status`` (the address space's high-water mark, fresh after ``exec``).
    ``ru_maxrss`` is the fallback off Linux only: on Linux it survives ``execve`` and would
    report the peak of the process that spawned the worker (e.g. a test session)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
