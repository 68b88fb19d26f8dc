"""``transflow-run``: the one Hydra entry point of transflow's experiments.

Usage::

    transflow-run                                   # the default experiment (equivalence)
    transflow-run experiment=equivalence debug=smoke
    transflow-run -m experiment=equivalence seed=0,1,2      # a sweep: one dir per job
    transflow-run experiment=equivalence task.norm_first=[false] precision=fp64

The entry point only composes the config, builds a
:class:`~transflow.experiments.context.RunContext` for the job's directory and calls the
selected task's ``run(cfg, ctx)`` (``experiments/tasks/<name>.py``). JAX is imported and
configured *inside* the job (x64 for ``precision=fp64|both``), never at import of this
module, so launchers that start worker processes are safe.

Run directories: ``outputs/<task>/<date>_<time>/`` for single runs and
``multirun/<task>/<date>_<time>/<job number>/`` for sweeps (``configs/hydra/default.yaml``);
the layout of a run directory is described in :mod:`transflow.experiments.context`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from .config import Precision, register_schemas
from .context import ClaimsFailed, RunContext, claims_markdown, summary_markdown, to_jsonable
from .tasks import discover, register_tasks

__all__ = ["CONFIG_DIR", "compose", "main", "register_configs", "run_in_process", "run_job"]


def _config_dir() -> pathlib.Path:
    """The config tree shipped in the package (``transflow.configs``), as a directory.

    An installed wheel unpacks it into site-packages; an editable install maps the package
    onto the repository's ``configs/`` folder. Either way it is a real directory.
    """
    import importlib.resources

    return pathlib.Path(str(importlib.resources.files("transflow.configs")))


CONFIG_DIR = _config_dir()

_REGISTERED = False


def register_configs(*, warn: bool = True) -> dict[str, str]:
    """Register the schemas and every discovered task in Hydra's ConfigStore.

    Returns the task import errors (name → message); with ``warn`` they are printed to
    stderr, so a broken task of another experiment is reported but does not stop this one.
    """
    global _REGISTERED
    register_schemas()
    _, errors = register_tasks()
    if warn and errors and not _REGISTERED:
        for name, msg in errors.items():
            last = msg.strip().splitlines()[-1]
            print(
                f"transflow-run: WARNING: task '{name}' (experiments/tasks/{name}.py) is not "
                f"available: {last}",
                file=sys.stderr,
            )
    _REGISTERED = True
    return errors


def _write_json(path: pathlib.Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(obj), indent=2, allow_nan=True) + "\n")
    tmp.replace(path)


class _Precision:
    """Enable x64 inside a job and restore the previous setting afterwards."""

    def __init__(self, precision: Precision | str):
        self.precision = Precision(
            precision.value if isinstance(precision, Precision) else precision
        )

    def __enter__(self):
        import jax

        self._old = bool(jax.config.jax_enable_x64)
        jax.config.update("jax_enable_x64", self.precision is not Precision.fp32)
        return self

    def __exit__(self, *exc):
        import jax

        jax.config.update("jax_enable_x64", self._old)
        return False


def run_job(cfg: DictConfig, *, run_dir: str | pathlib.Path, task_name: str) -> dict[str, Any]:
    """Run one composed job: the task ``task_name`` with ``cfg.task`` in ``run_dir``.

    Writes ``status.json`` (RUNNING, then COMPLETED or FAILED with the traceback),
    ``summary.json`` (the dict returned by the task), the summary table at the end of
    ``report.md`` and, last, an empty ``DONE`` marker. Exceptions are re-raised after
    ``status.json`` says FAILED.
    """
    # Hydra's job logging is at INFO; JAX's backend probing would fill run.log with noise.
    logging.getLogger("jax").setLevel(logging.WARNING)
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("DONE", "summary.json"):
        (run_dir / stale).unlink(missing_ok=True)
    status: dict[str, Any] = {
        "status": "RUNNING",
        "task": task_name,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(run_dir / "status.json", status)
    t0 = time.perf_counter()
    try:
        # Hydra's .hydra/config.yaml keeps interpolations (model.d_model: ${grid.n_features});
        # write the values the job actually used next to it.
        (run_dir / ".hydra").mkdir(exist_ok=True)
        (run_dir / ".hydra" / "resolved.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        tasks, errors = discover()
        if task_name not in tasks:
            why = errors.get(task_name, "no such file")
            raise RuntimeError(
                f"task '{task_name}' (experiments/tasks/{task_name}.py) is not available:\n{why}"
            )
        module = tasks[task_name]
        # Validate against the task's schema (also `+task.typo=1`, which Hydra lets through
        # because `task` is open in RunConfig), then build the dataclass the task receives.
        fields = {f.name for f in dataclasses.fields(module.Config)}
        extra = sorted(set(cfg.task.keys()) - fields)
        if extra:
            raise ConfigKeyError(
                f"task.{extra[0]}: not a field of task '{task_name}' "
                f"(experiments/tasks/{task_name}.py::Config); its fields are {sorted(fields)}."
            )
        task_cfg = OmegaConf.merge(OmegaConf.structured(module.Config), cfg.task)
        task_obj = OmegaConf.to_object(task_cfg)
        ctx = RunContext(
            run_dir=run_dir,
            smoke=bool(cfg.smoke),
            seed=int(cfg.seed),
            precision=Precision(cfg.precision).value,
            cfg=cfg,
        )
        with _Precision(cfg.precision):
            result = module.run(task_obj, ctx)
        if result is None:
            result = {}
        if not isinstance(result, dict):
            raise TypeError(
                f"task '{task_name}': run(cfg, ctx) must return a dict of headline numbers, "
                f"got {type(result).__name__}."
            )
        if ctx.claims:
            result["claims"] = ctx.claims
            result["claims_pass"] = not ctx.failed_claims
        _write_json(run_dir / "summary.json", result)
        ctx.report(summary_markdown({k: v for k, v in result.items() if k != "claims"}))
        if ctx.claims:
            ctx.report(claims_markdown(ctx.claims))
        if ctx.failed_claims:
            raise ClaimsFailed(
                f"task '{task_name}': claim checks failed: {', '.join(ctx.failed_claims)} "
                f"(see {run_dir / 'summary.json'}, key 'claims')"
            )
    except BaseException as e:
        status.update(
            status="FAILED",
            seconds=round(time.perf_counter() - t0, 3),
            error=f"{type(e).__name__}: {e}",
            traceback=traceback.format_exc(),
        )
        _write_json(run_dir / "status.json", status)
        raise
    status.update(status="COMPLETED", seconds=round(time.perf_counter() - t0, 3))
    _write_json(run_dir / "status.json", status)
    (run_dir / "DONE").write_text("")
    files = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
    print(
        f"transflow-run: '{task_name}' finished in {status['seconds']:.1f} s; results in "
        f"{run_dir}\n  {' '.join(files)}"
    )
    return result


def compose(overrides: Sequence[str] = (), *, config_dir: str | pathlib.Path = CONFIG_DIR):
    """Compose the config as ``transflow-run <overrides>`` would (Hydra compose API).

    Returns ``(cfg, task_name)``; ``cfg`` has no ``hydra`` node. Raises Hydra's
    composition errors (unknown keys, wrong types) like the command line does.

    Example:
        >>> cfg, task = compose(["experiment=equivalence", "debug=smoke"])
        >>> task, cfg.smoke
        ('equivalence', True)
    """
    from hydra import compose as hydra_compose, initialize_config_dir

    register_configs(warn=False)
    with initialize_config_dir(str(pathlib.Path(config_dir).resolve()), version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    task_name = str(cfg.hydra.runtime.choices["task"])
    with _open_dict(cfg):
        del cfg["hydra"]
    return cfg, task_name


def _open_dict(cfg):
    from omegaconf import open_dict

    return open_dict(cfg)


def run_in_process(
    overrides: Sequence[str], run_dir: str | pathlib.Path
) -> tuple[dict[str, Any], DictConfig]:
    """Compose ``overrides`` and run the job in this process, writing into ``run_dir``.

    For tests and figure scripts. Also writes ``.hydra/config.yaml`` (the composed config)
    and ``.hydra/overrides.yaml`` as ``transflow-run`` does. Returns ``(summary, cfg)``.
    """
    cfg, task_name = compose(overrides)
    run_dir = pathlib.Path(run_dir)
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(list(overrides)))
    return run_job(cfg, run_dir=run_dir, task_name=task_name), cfg


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    run_job(cfg, run_dir=hc.runtime.output_dir, task_name=str(hc.runtime.choices["task"]))


def main() -> None:
    """Console script ``transflow-run``: register configs and tasks, then run Hydra."""
    register_configs()
    _hydra_main()


if __name__ == "__main__":
    main()
