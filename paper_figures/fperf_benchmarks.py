"""F-perf: performance of transflow vs PyTorch, compile time vs depth, chunked attention memory.

Reads ``benchmarks/results/{layer,compile,chunked,summary}.json`` written by ``make bench``
(it never runs a benchmark itself: timings need a quiet machine and minutes). Three panels:
(a) 6-layer encoder forward time, transflow vs torch's fused fast path (median, min–max);
(b) trace+lower+compile time of ``evolve`` at 1 and 48 steps; (c) peak RSS of the chunked
attention at 32 768 tokens against the JAX-runtime floor and the 4 GiB a dense score
matrix would need. Without results it draws a placeholder saying "run make bench" and
still writes F-perf.png/.pdf/.json.
"""

from __future__ import annotations

import json
import pathlib

FIGURE = {
    "id": "FPERF",
    "title": "Performance: transflow vs torch fast path, compile time vs depth, chunked memory",
    "command": "make bench && make figures  (python paper_figures/make_all.py FPERF)",
    "config": "library call (benchmarks/run_all.py; reads benchmarks/results/*.json)",
}

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _load(results: pathlib.Path) -> dict:
    out = {}
    for name in ("layer", "compile", "chunked", "summary", "threads1/layer"):
        path = results / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def make(out_dir: pathlib.Path, results: pathlib.Path = RESULTS) -> dict:
    from transflow.plotting import BENCHMARK_PARTS, plot_benchmarks, save_figure

    fid = FIGURE["id"]
    out_dir = pathlib.Path(out_dir)
    res = _load(pathlib.Path(results))
    fig = plot_benchmarks(res)
    if not set(BENCHMARK_PARTS) <= res.keys():
        save_figure(
            fig,
            out_dir,
            fid,
            {
                "placeholder": True,
                "missing": sorted(set(BENCHMARK_PARTS) - res.keys()),
                "results_dir": str(results),
            },
        )
        return {"placeholder": True}

    layer, comp, chunk = res["layer"], res["compile"], res["chunked"]
    t = layer["timings_s"]
    one = res.get("threads1/layer")
    forward_ms = {"transflow": t["transflow"]["median"] * 1e3, "torch": t["torch"]["median"] * 1e3}
    if one is not None:
        forward_ms.update(
            {
                "transflow 1 thread": one["timings_s"]["transflow"]["median"] * 1e3,
                "torch 1 thread": one["timings_s"]["torch"]["median"] * 1e3,
            }
        )
    rss = {
        "JAX runtime (baseline)": chunk["baseline_rss_gib"],
        "chunked forward": chunk["chunked_peak_rss_gib"],
    }
    if chunk.get("chunked_grad_peak_rss_gib") is not None:
        rss["chunked gradient"] = chunk["chunked_grad_peak_rss_gib"]
    numbers = {
        "ratio_vs_torch": layer["ratio_vs_torch"],
        "flop_fraction": layer["flop_fraction"],
        "compile_ratio_48_vs_1": comp["compile_ratio"],
        "chunked_peak_rss_gib": chunk["chunked_peak_rss_gib"],
        "chunked_agreement_rel_err": chunk["agreement_rel_err"],
    }
    data = {
        **numbers,
        "forward_ms": forward_ms,
        "ratio_vs_torch_1thread": None if one is None else one["ratio_vs_torch"],
        "layer_timings_s": {k: {q: v[q] for q in ("median", "min", "max")} for k, v in t.items()},
        "compile_s": {str(s): comp["timings_s"][str(s)]["total"]["median"] for s in comp["steps"]},
        "rss_gib": rss,
        "jax_version": layer["jax_version"],
        "torch_version": layer["torch_version"],
    }
    save_figure(fig, out_dir, fid, data)
    return numbers
