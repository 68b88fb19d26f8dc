"""``python -m transflow.control {digits,sequence} --run-dir DIR [field=value ...]``.

A minimal command line for the training tasks, independent of Hydra: it writes
``metrics.jsonl``, ``report.md``, ``summary.json`` and the final model ``final.eqx``
(``equinox.tree_serialise_leaves``) into ``--run-dir`` and keeps checkpoints in
``<run-dir>/checkpoints`` unless ``checkpoint_dir=...`` is given. Rerunning the same
command resumes from the last valid checkpoint. Used by the resumption test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys


def _parse_value(field: dataclasses.Field, text: str):
    t = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if t == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"{field.name} must be true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if t == "int":
        return int(text)
    if t == "float":
        return float(text)
    return text


def main(argv: list[str] | None = None) -> int:
    from ._tasks import TRAINING_TASKS, run_training

    parser = argparse.ArgumentParser(prog="python -m transflow.control", description=__doc__)
    parser.add_argument("task", choices=sorted(TRAINING_TASKS))
    parser.add_argument("--run-dir", required=True, type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("overrides", nargs="*", help="field=value, e.g. steps=100 d=16")
    args = parser.parse_intermixed_args(argv)
    task = TRAINING_TASKS[args.task]
    cls = task.config
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {"checkpoint_dir": str(args.run_dir / "checkpoints")}
    for item in args.overrides:
        name, sep, text = item.partition("=")
        if not sep or name not in fields:
            parser.error(
                f"override {item!r}: expected field=value with a field of "
                f"{cls.__name__}: {sorted(fields)}"
            )
        values[name] = _parse_value(fields[name], text)
    cfg = cls(**values)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    metrics = args.run_dir / "metrics.jsonl"

    def log(rec):
        with metrics.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    def report(text):
        with (args.run_dir / "report.md").open("a") as f:
            f.write(text + "\n\n")

    summary, result = run_training(
        task, cfg, run_dir=args.run_dir, seed=args.seed, smoke=args.smoke, log=log, report=report
    )
    import equinox as eqx

    eqx.tree_serialise_leaves(args.run_dir / "final.eqx", result.model)
    (args.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        json.dumps(
            {k: summary[k] for k in ("test_accuracy", "cpu_seconds", "steps", "resumed_from")}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
