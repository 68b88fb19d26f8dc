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
from .context import (
    ClaimsFailed,
    RunContext,
    RunLog,
    claim_line,
    claims_markdown,
    release_compiled,
    summary_markdown,
    to_jsonable,
)
from .tasks import discover, register_tasks
from .validate import ConfigValueError, validate

__all__ = [
    "CONFIG_DIR",
    "check_config",
    "compose",
    "describe",
    "front_page",
    "main",
    "register_configs",
    "run_in_process",
    "run_job",
]


def _config_dir() -> pathlib.Path:
    """The config tree shipped in the package (``transflow.configs``), as a directory.

    An installed wheel unpacks it into site-packages; an editable install maps the package
    onto the repository's ``configs/`` folder. Either way it is a real directory.
    """
    import importlib.resources

    return pathlib.Path(str(importlib.resources.files("transflow.configs")))


CONFIG_DIR = _config_dir()

_REGISTERED = False

#: Seconds without a progress line after which run.log and the console get a
#: "'<task>' running, elapsed ..." line.
HEARTBEAT_S = 10.0


def describe(config_dir: str | pathlib.Path = CONFIG_DIR) -> dict[str, str]:
    """Experiment name → its one-line description (the ``# About:`` comment line of
    ``configs/experiment/<name>.yaml``; empty when the file has none).

    Example:
        >>> "clustering" in describe()
        True
    """
    out = {}
    for path in sorted((pathlib.Path(config_dir) / "experiment").glob("*.yaml")):
        about = ""
        for line in path.read_text().splitlines():
            if line.startswith("# About:"):
                about = line.removeprefix("# About:").strip()
                break
        out[path.stem] = about
    return out


def register_configs(*, warn: bool = True) -> dict[str, str]:
    """Register the schemas and every discovered task in Hydra's ConfigStore.

    Returns the task import errors (name → message); with ``warn`` they are printed to
    stderr, so a broken task of another experiment is reported but does not stop this one.
    """
    global _REGISTERED
    register_schemas()
    from omegaconf import OmegaConf as _OC

    if not _OC.has_resolver("transflow_help"):
        # configs/hydra/default.yaml: hydra.help.template = ${transflow_help:}
        _OC.register_new_resolver("transflow_help", lambda: front_page(hydra_help=True))
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


def _describe_overrides(cfg: DictConfig) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return " ".join(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - informative only
        pass
    return ""


def _report_header(task_name: str, cfg: DictConfig, overrides: str, multirun: bool) -> str:
    about = describe().get(task_name, "")
    cmd = "transflow-run " + ("-m " if multirun else "") + (overrides or f"task={task_name}")
    return (
        f"# {task_name}" + (f": {about}" if about else "") + "\n\n"
        f"Command: `{cmd}` · seed {cfg.get('seed', 0)} · precision {_value(cfg.get('precision'))}"
        f" · smoke {bool(cfg.get('smoke', False))} · claims {_claims_mode(cfg, multirun)} · "
        f"started {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


def _value(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def _claims_mode(cfg: DictConfig, multirun: bool) -> str:
    mode = str(_value(cfg.get("claims", "auto")) or "auto")
    if mode == "auto":
        return "record" if multirun else "enforce"
    return mode


def check_config(cfg: DictConfig, task_name: str):
    """Validate a composed config before any compute; returns ``(module, task object)``.

    Raises :class:`~omegaconf.errors.ConfigKeyError` for a key the task's ``Config`` does
    not have (``+task.typo=1``, which Hydra lets through because ``task`` is open in
    :class:`RunConfig`) and :class:`~transflow.experiments.validate.ConfigValueError` for
    a value out of range (``task.n_tokens=-3``); both name the key. Writes nothing.
    """
    tasks, errors = discover()
    if task_name not in tasks:
        why = errors.get(task_name, "no such file")
        raise RuntimeError(
            f"task '{task_name}' (experiments/tasks/{task_name}.py) is not available:\n{why}"
        )
    module = tasks[task_name]
    fields = {f.name for f in dataclasses.fields(module.Config)}
    extra = sorted(set(cfg.task.keys()) - fields)
    if extra:
        raise ConfigKeyError(
            f"task.{extra[0]}: not a field of task '{task_name}' "
            f"(experiments/tasks/{task_name}.py::Config); its fields are {sorted(fields)}."
        )
    task_cfg = OmegaConf.merge(OmegaConf.structured(module.Config), cfg.task)
    task_obj = OmegaConf.to_object(task_cfg)
    validate(cfg, task_name, task_obj)
    return module, task_obj


def run_job(
    cfg: DictConfig,
    *,
    run_dir: str | pathlib.Path,
    task_name: str,
    multirun: bool = False,
    overrides: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run one composed job: the task ``task_name`` with ``cfg.task`` in ``run_dir``.

    First validates the config (:func:`check_config`: unknown task keys, values out of
    range); an invalid config raises before anything is written into ``run_dir``. Then
    writes ``status.json`` (RUNNING, then COMPLETED or FAILED with the traceback),
    ``report.md`` (a header naming the task and the command, the task's sections, the
    summary table and the claim checks), ``summary.json`` (the dict returned by the task),
    ``run.log`` (the run's log: what it printed, progress lines, claim verdicts) and, last,
    an empty ``DONE`` marker.

    Claims (``cfg.claims``): under ``enforce`` a failing enforced claim raises
    :class:`ClaimsFailed` after everything is written (status FAILED, no ``DONE``); under
    ``record`` it is recorded (``status.json`` has ``claims: FAILED`` and
    ``failed_claims``) and the job completes. ``auto`` is ``record`` when ``multirun`` is
    true (a sweep), else ``enforce``. Exceptions are re-raised after ``status.json`` says
    FAILED. ``overrides`` (the command-line overrides, for the header of ``report.md``)
    default to Hydra's.
    """
    # Hydra's job logging is at INFO; JAX's backend probing would fill run.log with noise.
    logging.getLogger("jax").setLevel(logging.WARNING)
    module, task_obj = check_config(cfg, task_name)
    mode = _claims_mode(cfg, multirun)
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("DONE", "summary.json", "report.md"):
        (run_dir / stale).unlink(missing_ok=True)
    status: dict[str, Any] = {
        "status": "RUNNING",
        "task": task_name,
        "claims_mode": mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(run_dir / "status.json", status)
    t0 = time.perf_counter()
    overrides = " ".join(overrides) if overrides is not None else _describe_overrides(cfg)
    with RunLog(run_dir, task=task_name, heartbeat=HEARTBEAT_S) as runlog:
        log = runlog.logger
        log.info(
            "task '%s' in %s%s (claims=%s)",
            task_name,
            run_dir,
            f"; overrides: {overrides}" if overrides else "",
            mode,
        )
        try:
            # Hydra's .hydra/config.yaml keeps interpolations (model.d_model:
            # ${grid.n_features}); write the values the job actually used next to it.
            (run_dir / ".hydra").mkdir(exist_ok=True)
            (run_dir / ".hydra" / "resolved.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            ctx = RunContext(
                run_dir=run_dir,
                smoke=bool(cfg.smoke),
                seed=int(cfg.seed),
                precision=Precision(_value(cfg.precision)).value,
                cfg=cfg,
            )
            ctx.report(_report_header(task_name, cfg, overrides, multirun))
            with _Precision(_value(cfg.precision)):
                try:
                    result = module.run(task_obj, ctx)
                finally:
                    release_compiled()  # a sweep runs its jobs in this one process
            if result is None:
                result = {}
            if not isinstance(result, dict):
                raise TypeError(
                    f"task '{task_name}': run(cfg, ctx) must return a dict of headline "
                    f"numbers, got {type(result).__name__}."
                )
            if ctx.claims:
                result["claims"] = ctx.claims
                result["claims_pass"] = not ctx.failed_claims
            _write_json(run_dir / "summary.json", result)
            ctx.report(summary_markdown({k: v for k, v in result.items() if k != "claims"}))
            if ctx.claims:
                ctx.report(claims_markdown(ctx.claims, mode=mode))
                for c in ctx.claims:
                    log.info("claim %s", claim_line(c, mode), extra={"console": False})
                n_pass = sum(c["pass"] for c in ctx.claims)
                log.info(
                    "claims: %d of %d PASS%s",
                    n_pass,
                    len(ctx.claims),
                    "".join(f"; {claim_line(c, mode)}" for c in ctx.claims if not c["pass"]),
                )
            if ctx.failed_claims:
                msg = (
                    f"task '{task_name}': claim checks failed: {', '.join(ctx.failed_claims)} "
                    f"(see {run_dir / 'summary.json'}, key 'claims')"
                )
                if mode == "enforce":
                    raise ClaimsFailed(msg + "; claims=record records them without failing.")
                log.warning("%s; recorded, not enforced (claims=record)", msg)
                status.update(claims="FAILED", failed_claims=ctx.failed_claims)
            elif ctx.claims:
                status.update(claims="PASS")
        except BaseException as e:
            status.update(
                status="FAILED",
                seconds=round(time.perf_counter() - t0, 3),
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(),
            )
            _write_json(run_dir / "status.json", status)
            log.error("FAILED: %s: %s\n%s", type(e).__name__, e, status["traceback"].rstrip())
            raise
        status.update(status="COMPLETED", seconds=round(time.perf_counter() - t0, 3))
        _write_json(run_dir / "status.json", status)
        (run_dir / "DONE").write_text("")
        files = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
        log.info(
            "'%s' finished in %.1f s%s; results in %s\n  %s",
            task_name,
            status["seconds"],
            " (claims FAILED, recorded)" if status.get("claims") == "FAILED" else "",
            run_dir,
            " ".join(files),
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
    return run_job(cfg, run_dir=run_dir, task_name=task_name, overrides=overrides), cfg


def front_page(*, hydra_help: bool = False) -> str:
    """The text of ``transflow-run --help`` / ``transflow-run list``: usage, the experiments
    (one line each, from the ``# About:`` line of ``configs/experiment/<name>.yaml``) and
    what ``experiment=`` and ``task=`` mean.

    With ``hydra_help`` the text ends with Hydra's list of config groups (a
    ``string.Template`` placeholder Hydra fills in).
    """
    about = describe()
    width = max(len(n) for n in about) + 2 if about else 20
    lines = [
        "transflow-run: run transflow's experiments (Hydra). One run directory per job, with",
        "report.md, summary.json (claim checks), metrics.jsonl, figures, run.log.",
        "",
        "Usage:",
        "  transflow-run experiment=NAME                 one run  -> outputs/TASK/DATE_TIME/",
        "  transflow-run experiment=NAME debug=smoke     the same shrunk to seconds",
        "  transflow-run -m experiment=NAME seed=0,1     a sweep  -> multirun/TASK/DATE_TIME/JOB/",
        "                                                plus sweep_summary.md/.csv/.json",
        "  transflow-run experiment=NAME task.FIELD=V    change one parameter of the task",
        "  transflow-run experiment=NAME --cfg job       print the composed config, run nothing",
        "  transflow-run list                            the experiments, one line each",
        "",
        "Experiments (experiment=NAME; configs/experiment/NAME.yaml; the file's comment says",
        "the runtime and the expected result):",
        *(f"  {name:<{width}}{text}" for name, text in sorted(about.items())),
        "",
        "experiment= or task=?  Use experiment=NAME. An experiment is a complete setup: it",
        "selects the task (the code, experiments/tasks/TASK.py) AND sets the precision, model,",
        "grid and task options its documented results hold for. task=NAME only swaps the code",
        "and keeps config.yaml's defaults for everything else; it is for writing new",
        "experiments. Change parameters with task.FIELD=VALUE on top of experiment=NAME.",
        "",
        "Options:",
        "  debug=smoke                   every experiment in seconds (reduced sizes)",
        "  seed=N                        the job's seed (>= 0)",
        "  precision=fp32|fp64|both      x64 is enabled inside the job for fp64/both",
        "  claims=auto|enforce|record    a failing claim check: enforce = the run FAILS and",
        "                                exits non-zero; record = recorded in report.md,",
        "                                summary.json and the sweep summary, the job completes;",
        "                                auto (default) = enforce for one run, record in sweeps",
        "  hydra.run.dir=DIR / hydra.sweep.dir=DIR   where the results go",
        "",
        "Values are checked before any compute (unknown keys, types, ranges such as",
        "task.n_tokens > 0); the error names the key. Docs: docs/experiments.md.",
    ]
    if hydra_help:
        lines += ["", "Config groups:", "$APP_CONFIG_GROUPS", "Hydra's own options: --hydra-help"]
    return "\n".join(lines)


def _remove_invalid_run_dir(run_dir: pathlib.Path) -> None:
    """Remove what Hydra created for a job whose config was rejected before compute
    (``.hydra/`` and an empty ``run.log``), so no FAILED-looking directory is left."""
    import shutil

    if not run_dir.is_dir():
        return
    names = {p.name for p in run_dir.iterdir()}
    if names <= {".hydra", "run.log"}:
        shutil.rmtree(run_dir, ignore_errors=True)
        # Then the directories above it that are left empty (outputs/<task>/, a sweep
        # directory holding only Hydra's multirun.yaml), up to the working directory.
        cwd = pathlib.Path.cwd().resolve()
        parent = run_dir.resolve().parent
        while parent != cwd and cwd in parent.parents and parent.is_dir():
            if {p.name for p in parent.iterdir()} - {"multirun.yaml"}:
                break
            shutil.rmtree(parent, ignore_errors=True)
            parent = parent.parent


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = pathlib.Path(hc.runtime.output_dir)
    try:
        run_job(
            cfg,
            run_dir=run_dir,
            task_name=str(hc.runtime.choices["task"]),
            multirun=multirun,
        )
    except (ConfigValueError, ConfigKeyError) as e:
        _remove_invalid_run_dir(run_dir)
        if multirun:
            raise
        # One clear line instead of a traceback; nothing was computed or kept.
        raise SystemExit(f"transflow-run: invalid config: {e}") from None


def main() -> None:
    """Console script ``transflow-run``: register configs and tasks, then run Hydra.

    ``transflow-run list`` prints the experiments and exits; ``--help`` shows the same
    front page (:func:`front_page`) with the config groups.
    """
    if sys.argv[1:] == ["list"]:
        print(front_page())
        return
    register_configs()
    _hydra_main()


if __name__ == "__main__":
    main()
