"""The performance rows of README.md, rendered from ``benchmarks/results/summary.json``.

``make bench`` writes the results file; this script turns its headline keys into the
README's table (between ``<!-- performance:start -->`` and ``<!-- performance:end -->``),
so the README says what the committed results (plotted by ``make figures``, F-perf) say.

Usage::

    python benchmarks/readme_rows.py            # print the rows
    python benchmarks/readme_rows.py --write    # rewrite them in README.md
    python benchmarks/readme_rows.py --check    # exit 1 if README.md differs
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "benchmarks" / "results" / "summary.json"
README = ROOT / "README.md"
START, END = "<!-- performance:start -->", "<!-- performance:end -->"

#: (what, key with all threads, key with one thread, format): one README row each.
ROWS = (
    (
        "encoder forward, fraction of the XLA matmul rate",
        "flop_fraction",
        "flop_fraction_1thread",
        "{:.2f}",
    ),
    (
        "encoder forward, speed vs torch's fused fast path (torch time / transflow time)",
        "ratio_vs_torch",
        "ratio_vs_torch_1thread",
        "{:.2f}×",
    ),
    (
        "encoder forward, speed vs `torch.compile`",
        "ratio_vs_torch_compile",
        None,
        "{:.2f}×",
    ),
    (
        "training step (forward + backward), fraction of the XLA matmul rate",
        "fwdbwd_flop_fraction",
        "fwdbwd_flop_fraction_1thread",
        "{:.2f}",
    ),
    (
        "training step, speed vs torch eager autograd",
        "ratio_fwdbwd_vs_torch",
        "ratio_fwdbwd_vs_torch_1thread",
        "{:.2f}×",
    ),
    (
        "16k tokens, chunked attention forward + backward, speed vs torch SDPA",
        "longseq_fwdbwd_ratio_vs_sdpa",
        None,
        "{:.2f}×",
    ),
    (
        "16k tokens, causal, speed vs torch SDPA",
        "longseq_causal_fwdbwd_ratio_vs_sdpa",
        None,
        "{:.2f}×",
    ),
)


def _cell(summary: dict, key: str | None, fmt: str) -> str:
    if key is None:
        return "—"
    value = summary.get(key)
    if value is None:
        return "not measured"
    if not isinstance(value, int | float):
        raise ValueError(f"summary[{key!r}]: expected a number, got {value!r}")
    return fmt.format(value)


def _status(summary: dict, key: str | None) -> str:
    target = (summary.get("targets") or {}).get(key) if key else None
    if not target:
        return ""
    status = str(target.get("status", "met" if target.get("met") else "not met"))
    return f"{target.get('bound', '')}: {status}"


def render_rows(summary: dict) -> str:
    """The README's performance table (markdown) for a parsed ``summary.json``: the value
    with all threads and with one, each key's target and the run's verdict on it, and the
    run's validity notes (why a target was "not measured reliably").

    Example:
        >>> print(render_rows({"cpu_count": 2, "flop_fraction": 0.7369}).splitlines()[2])
        | encoder forward, fraction of the XLA matmul rate | 0.74 | not measured |  |  |
    """
    if not isinstance(summary, dict):
        raise TypeError(f"summary: expected the parsed summary.json dict, got {type(summary)}")
    cores = summary.get("cpu_count", "?")
    lines = [
        f"| quantity | {cores} threads | 1 thread | target: verdict ({cores} threads) "
        "| target: verdict (1 thread) |",
        "|---|---|---|---|---|",
    ]
    for what, key, key1, fmt in ROWS:
        lines.append(
            f"| {what} | {_cell(summary, key, fmt)} | {_cell(summary, key1, fmt)} "
            f"| {_status(summary, key)} | {_status(summary, key1)} |"
        )
    versions = ", ".join(
        f"{k.replace('_version', '')} {summary[k]}"
        for k in ("jax_version", "torch_version")
        if k in summary
    )
    notes = "; ".join(
        f"{part}: {', '.join(map(str, why))}"
        for part, why in (summary.get("validity") or {}).items()
    )
    lines += [
        "",
        f"Measured by `make bench` on `{summary.get('backend', '?')}` with {cores} cores "
        f"({versions}); validity of the parts: {notes or 'not recorded'}. Rendered from "
        "`benchmarks/results/summary.json` by `python benchmarks/readme_rows.py --write`.",
    ]
    return "\n".join(lines)


def replace_rows(readme: str, rows: str) -> str:
    """``readme`` with the text between the performance markers replaced by ``rows``."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md: expected one {START} and one {END} marker")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{rows}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", type=pathlib.Path, default=SUMMARY)
    parser.add_argument("--readme", type=pathlib.Path, default=README)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the rows in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if README.md differs")
    args = parser.parse_args(argv)
    rows = render_rows(json.loads(args.summary.read_text()))
    if not (args.write or args.check):
        print(rows)
        return 0
    readme = args.readme.read_text()
    new = replace_rows(readme, rows)
    if args.check:
        if new != readme:
            print(f"{args.readme}: performance rows differ; run {__file__} --write")
            return 1
        return 0
    args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
