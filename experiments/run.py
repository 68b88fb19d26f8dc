"""``transflow-run``: the one Hydra entry point of transflow's experiments.

Usage: ``transflow-run --help`` (:func:`front_page`) and ``docs/experiments.md``. The
entry point only composes the config, builds a
:class:`~transflow.experiments.context.RunContext` for the job's directory and calls the
selected task's ``run(cfg, ctx)`` (``experiments/tasks/<name>.py``). JAX is imported and
configured *inside* the job (x64 for ``precision=fp64|both``), never at import of this
module, so launchers that start worker processes are safe.

Run directories: ``outputs/<task>/<date>_<time>/`` for single runs and
``multirun/<task>/<date>_<time>/<job number>/`` for sweeps (``configs/hydra/default.yaml``);
the layout of a run directory is described in :mod:`transflow.experiments.context`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.resources
import json
import logging
import pathlib
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError

from .config import ClaimsMode, Precision, RunConfig, register_schemas
from .context import (
    FAILED,
    PASS,
    ClaimsFailed,
    ClaimsOutcome,
    RunContext,
    RunLog,
    claim_line,
    claim_verdict,
    release_compiled,
    summary_markdown,
    to_jsonable,
    write_atomic,
)
from .tasks import discover, register_tasks
from .validate import (
    ConfigValueError,
    Rule,
    check_constraints,
    option_check,
    option_values,
    plain,
    rule_for,
    validate,
    writable_dir_problem,
)

__all__ = [
    "CONFIG_DIR",
    "GROUPS",
    "check_config",
    "check_output_dirs",
    "check_overrides",
    "check_task_keys",
    "top_level_names",
    "list_experiments",
    "precheck",
    "compose",
    "describe",
    "expand_sweep",
    "experiment_help",
    "parse_command",
    "prune",
    "task_reads",
    "front_page",
    "main",
    "register_configs",
    "run_in_process",
    "run_job",
]


#: The config tree shipped in the package (``transflow.configs``), as a directory: an
#: installed wheel unpacks it into site-packages; an editable install maps the package onto
#: the repository's ``configs/`` folder. Either way it is a real directory.
CONFIG_DIR = pathlib.Path(str(importlib.resources.files("transflow.configs")))

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
    paths = sorted((pathlib.Path(config_dir) / "experiment").glob("*.yaml"))
    return {path.stem: _header(path)[0] for path in paths}


def _header(path: pathlib.Path) -> tuple[str, list[str]]:
    """The ``# About:`` text of an experiment file and the other lines of its leading
    comment (``# @package`` left out)."""
    about, comment = "", []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# About:"):
            about = line.removeprefix("# About:").strip()
        elif not line.startswith("# @package"):
            comment.append(line.lstrip("#").strip())
    return about, comment


def register_configs(*, warn: bool = True) -> dict[str, str]:
    """Register the schemas and every discovered task in Hydra's ConfigStore.

    Returns the task import errors (name → message); with ``warn`` they are printed to
    stderr, so a broken task of another experiment is reported but does not stop this one.
    """
    global _REGISTERED
    register_schemas()
    if not OmegaConf.has_resolver("transflow_help"):
        # configs/hydra/default.yaml: hydra.help.template = ${transflow_help:}
        OmegaConf.register_new_resolver("transflow_help", lambda: front_page(hydra_help=True))
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
    write_atomic(path, json.dumps(to_jsonable(obj), indent=2, allow_nan=True) + "\n")


@contextlib.contextmanager
def _Precision(precision: Precision | str):
    """Enable x64 inside a job (``fp64``/``both``) and restore the previous setting after."""
    import jax

    x64 = Precision(_value(precision)) is not Precision.fp32
    old = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", x64)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


#: The command line of this process (``main`` sets it), quoted in ``report.md``.
_COMMAND: list[str] | None = None


def _command(overrides: str, multirun: bool) -> str:
    """The command that ran: ``transflow-run`` and its arguments as typed (``main``), else
    (a job run in-process) ``transflow-run`` with the job's overrides."""
    import shlex

    if _COMMAND is not None:
        cmd = " ".join(["transflow-run", *map(shlex.quote, _COMMAND)])
        if multirun and overrides:
            cmd += f"` · this job: `{overrides}"
        return cmd
    return f"transflow-run {'-m ' if multirun else ''}{overrides}" if overrides else "transflow-run"


def _report_header(task_name: str, cfg: DictConfig, overrides: str, multirun: bool) -> str:
    about = describe().get(task_name, "")
    cmd = _command(overrides, multirun).strip()
    return (
        f"# {task_name}" + (f": {about}" if about else "") + "\n\n"
        f"Command: `{cmd}` · seed {cfg.get('seed', 0)} · precision {_value(cfg.get('precision'))}"
        f" · smoke {bool(cfg.get('smoke', False))} · claims {_claims_mode(cfg, multirun)} · "
        f"started {time.strftime('%Y-%m-%d %H:%M:%S')}"
        + (f"\n\n{_not_enforced_text(cfg, task_name)}" if _not_enforced(cfg) else "")
    )


def _not_enforced(cfg: DictConfig) -> list[str]:
    return [str(c) for c in cfg.get("not_enforced", ())]


def _not_enforced_text(cfg: DictConfig, task_name: str) -> str:
    """The claims declared not enforced in this run, in one line (report and console)."""
    where = f", configs/sizes/smoke/{task_name}.yaml" if cfg.get("smoke", False) else ""
    return (
        f"Claims not enforced in this run (not_enforced{where}; recorded, never failing the "
        f"run): {'; '.join(_not_enforced(cfg))}"
    )


def _value(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def _claims_mode(cfg: DictConfig, multirun: bool) -> str:
    mode = str(_value(cfg.get("claims", "auto")) or "auto")
    if mode == "auto":
        return "record" if multirun else "enforce"
    return mode


#: The top-level config groups; a task reads those it names in its module's ``READS``.
GROUPS = ("grid", "model")

#: Top-level keys every task reads (through ``ctx``) besides ``task.*``.
COMMON_KEYS = ("seed", "precision", "claims", "smoke", "not_enforced")


def _task_module(task_name: str):
    tasks, errors = discover()
    if task_name not in tasks:
        why = errors.get(task_name, "no such file")
        raise RuntimeError(
            f"task '{task_name}' (experiments/tasks/{task_name}.py) is not available:\n{why}"
        )
    return tasks[task_name]


def task_reads(task_name: str) -> tuple[str, ...]:
    """The parts of the top-level groups (``grid``, ``model``) task
    ``task_name`` reads: its module's ``READS`` (a group, ``"model"``, or one key,
    ``"grid.n_tokens"``); ``()`` for a task that reads none.

    Example:
        >>> task_reads("equivalence")
        ('grid.n_tokens', 'grid.n_features', 'model')
        >>> task_reads("clustering")
        ()
    """
    reads = tuple(str(r) for r in getattr(_task_module(task_name), "READS", ()))
    for r in reads:
        if r.split(".")[0] not in GROUPS:
            raise ValueError(
                f"experiments/tasks/{task_name}.py: READS entry {r!r} is not in a top-level "
                f"group {GROUPS}."
            )
    return reads


def override_key(item: str) -> str:
    """The config key of one command-line override: ``+grid.n_tokens=4,8`` → ``grid.n_tokens``,
    ``grid=uniform`` → ``grid``, ``hydra/launcher=x`` → ``hydra/launcher``.

    Example:
        >>> override_key("+grid.n_tokens=4,8"), override_key("~model")
        ('grid.n_tokens', 'model')
    """
    key = str(item).split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[0]


def _reads_key(key: str, reads: Sequence[str]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in reads)


def _what_it_reads(task_name: str, reads: Sequence[str]) -> str:
    fields = [f.name for f in dataclasses.fields(_task_module(task_name).Config)]
    parts = [f"task.* ({', '.join(fields)})", ", ".join(COMMON_KEYS)]
    if reads:
        parts.append(", ".join(reads))
    return "; ".join(parts)


def top_level_names() -> set[str]:
    """The keys and config groups a command-line override may name at the top level: the
    fields of :class:`~transflow.experiments.config.RunConfig` and the group folders of
    ``configs/`` (``experiment``, ``debug``, ``hydra``, …).

    Example:
        >>> sorted(top_level_names() & {"grid", "seed", "experiment", "scheme"})
        ['experiment', 'grid', 'seed']
    """
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    groups = {p.name for p in pathlib.Path(CONFIG_DIR).iterdir() if p.is_dir()}
    return fields | {g for g in groups if not g.startswith("_")} | {"hydra"}


def _unknown_message(unknown: Sequence[str], names: set[str]) -> str:
    return (
        f"{', '.join(unknown)}: no such config key or group (the top level has "
        f"{', '.join(sorted(names))}; a task's own options are task.*)."
    )


def check_overrides(overrides: Sequence[str], task_name: str) -> None:
    """Refuse overrides of the top-level groups task ``task_name`` does not read, and of
    top-level names that do not exist (``scheme=lie``: there is no top-level scheme group).

    ``model=torch_layer`` or ``grid.n_tokens=8`` for a task that reads no ``model``/``grid``
    would change nothing: raises :class:`ConfigValueError` naming every such key and
    listing what the task reads. Composition only; writes nothing.

    Example:
        >>> check_overrides(["task.t1=2", "seed=1"], "clustering")
        >>> check_overrides(["model.nhead=2", "grid.n_tokens=4"], "clustering")
        Traceback (most recent call last):
        ...
        transflow.experiments.validate.ConfigValueError: model.nhead, grid.n_tokens: not read ...
    """
    reads = task_reads(task_name)
    bad, unknown = [], []
    names = top_level_names()
    for item in overrides:
        key = override_key(item)
        top = key.split(".")[0].split("/")[0]
        if top not in names and not str(item).startswith("+") and key not in unknown:
            unknown.append(key)
        if top not in GROUPS or key in bad:
            continue
        # choosing another file of a group (grid=uniform) needs the whole group read
        if not (top in reads if key == top else _reads_key(key, reads)):
            bad.append(key)
    if unknown and not bad:
        raise ConfigValueError(_unknown_message(unknown, names))
    if bad:
        partly = [
            f"only {', '.join(r for r in reads if r.startswith(k + '.'))} of {k}"
            for k in bad
            if k in GROUPS and any(r.startswith(k + ".") for r in reads)
        ]
        raise ConfigValueError(
            (_unknown_message(unknown, names) + " " if unknown else "")
            + f"{', '.join(bad)}: not read by task '{task_name}', so the override would change "
            f"nothing{' (it reads ' + '; '.join(partly) + ')' if partly else ''}. It reads: "
            f"{_what_it_reads(task_name, reads)}. Remove the override "
            f"(`transflow-run help {task_name}` lists the options)."
        )


def prune(cfg: DictConfig, task_name: str) -> DictConfig:
    """A copy of ``cfg`` holding only what task ``task_name`` reads: the top-level groups
    (or keys of them) in its ``READS``, ``task`` and the common keys.

    Example:
        >>> cfg, task = compose(["experiment=clustering"])
        >>> sorted(prune(cfg, task))
        ['claims', 'not_enforced', 'precision', 'seed', 'smoke', 'task']
    """
    reads = task_reads(task_name)
    out = OmegaConf.create({})
    for key in cfg.keys():
        if key not in GROUPS:
            out[key] = cfg._get_node(key)
        elif key in reads:
            out[key] = cfg._get_node(key)  # the whole group, typed
        else:
            keep = [r.split(".", 1)[1] for r in reads if r.startswith(key + ".")]
            if keep:
                node = OmegaConf.to_container(cfg[key], resolve=False, enum_to_str=True)
                out[key] = {k: v for k, v in node.items() if k in keep}
    OmegaConf.set_struct(out, True)
    return out


def _name_the_key(task_cfg: Any, line: str) -> str:
    """``task.<key> = <value> is not allowed: <reason>`` for the field (nested configs
    included) that the library's one-line refusal ``line`` names in backticks."""
    import re

    named, reason = re.search(r"`(\w+)`", line), re.sub(r"^\w+: ", "", line)
    for key, name, value in option_values(task_cfg, "task"):
        if named is not None and name == named.group(1):
            return f"{key} = {plain(value)} is not allowed: {reason}"
    return f"task: {line}"


def check_config(cfg: DictConfig, task_name: str):
    """Validate a composed config before any compute; returns ``(module, task object)``.

    Raises :class:`~omegaconf.errors.ConfigKeyError` for a key the task's ``Config`` does
    not have (``+task.typo=1``, which Hydra lets through because ``task`` is open in
    :class:`RunConfig`) and :class:`~transflow.experiments.validate.ConfigValueError` for
    a value out of range (``task.n_tokens=-3``, ``task.t1=inf``; the rules of
    :mod:`~transflow.experiments.validate`), a name not among the task's ``CHOICES``
    (``task.schemes=[lie,foo]``), a path that cannot be written (``task.checkpoint_dir``),
    a violated cross-option ``CONSTRAINTS`` entry (``task.dt <= task.t1``) or a value the
    task's ``check(cfg)`` refuses (a missing ``task.model_path``); each names the key.
    Writes nothing.
    """
    module = _task_module(task_name)
    extra = set(cfg.task.keys()) - {f.name for f in dataclasses.fields(module.Config)}
    try:
        check_task_keys([f"task.{key}" for key in sorted(extra)], task_name)
    except ConfigValueError as e:
        raise ConfigKeyError(str(e)) from None
    task_cfg = OmegaConf.merge(OmegaConf.structured(module.Config), cfg.task)
    pruned = prune(cfg, task_name)
    try:
        task_obj = OmegaConf.to_object(task_cfg)
    except (ValueError, TypeError) as e:
        # the library's config refused a field (TrainConfig.__post_init__): the rules of
        # validate name the key as the command line wrote it, so they speak first
        validate(pruned, task_name, None, choices=getattr(module, "CHOICES", {}))
        cause = e.__cause__ if isinstance(e.__cause__, ValueError | TypeError) else e
        line = str(cause).splitlines()[0]
        raise ConfigValueError(_name_the_key(task_cfg, line)) from None
    validate(pruned, task_name, task_obj, choices=getattr(module, "CHOICES", {}))
    check_constraints(getattr(module, "CONSTRAINTS", ()), pruned, task_obj)
    check = getattr(module, "check", None)
    if check is not None:
        try:
            check(task_obj)
        except ConfigValueError:
            raise
        except (ValueError, TypeError, FileNotFoundError) as e:
            raise ConfigValueError(str(e)) from None
    return module, task_obj


class Killed(BaseException):
    """SIGTERM during a job (raised by ``transflow-run``'s handler; SIGINT raises
    ``KeyboardInterrupt``): ``status.json`` records KILLED with the time."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _sigterm_raises():
    """Turn SIGTERM into :class:`Killed` inside the block (main thread only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Killed(signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _job_overrides(overrides: Sequence[str] | None) -> list[str]:
    if overrides is not None:
        return [str(o) for o in overrides]
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return [str(o) for o in HydraConfig.get().overrides.task]
    except Exception:  # noqa: BLE001 - informative only
        pass
    return []


def run_job(
    cfg: DictConfig,
    *,
    run_dir: str | pathlib.Path,
    task_name: str,
    multirun: bool = False,
    overrides: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run one composed job: the task ``task_name`` with ``cfg.task`` in ``run_dir``.

    First checks the config (:func:`check_overrides`, :func:`check_config`): an invalid
    one raises :class:`ConfigValueError` (or ``ConfigKeyError``) before anything is
    written, as does one the task itself refuses with :class:`ConfigValueError` before
    writing any result (its files are removed again). The job sees only what its task reads
    (:func:`prune`; ``.hydra/config.yaml`` is rewritten to say so). It writes the run
    directory of ``docs/experiments.md`` (``status.json``, ``report.md``, ``summary.json``,
    ``run.log``, last ``DONE``). Under ``claims=enforce`` (``auto`` without ``multirun``) a
    failing enforced claim raises :class:`ClaimsFailed` after everything is written;
    under ``record`` it is recorded and the job completes. Other exceptions are re-raised
    after ``status.json`` says FAILED (KILLED on SIGTERM/SIGINT). ``overrides`` (the
    command-line overrides) default to Hydra's.
    """
    # Hydra's job logging is at INFO; JAX's backend probing would fill run.log with noise.
    logging.getLogger("jax").setLevel(logging.WARNING)
    ov_list = _job_overrides(overrides)
    check_overrides(ov_list, task_name)
    module, task_obj = check_config(cfg, task_name)
    cfg = prune(cfg, task_name)
    mode = _claims_mode(cfg, multirun)
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("DONE", "summary.json", "report.md"):
        (run_dir / stale).unlink(missing_ok=True)
    if (run_dir / ".hydra" / "config.yaml").exists():  # Hydra's copy holds every group
        (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    status: dict[str, Any] = {
        "status": "RUNNING",
        "task": task_name,
        "claims_mode": mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(run_dir / "status.json", status)
    t0 = time.perf_counter()
    overrides = " ".join(ov_list)
    with RunLog(run_dir, task=task_name, heartbeat=HEARTBEAT_S) as runlog, _sigterm_raises():
        log = runlog.logger
        log.info(
            "task '%s' in %s%s (claims=%s)",
            task_name,
            run_dir,
            f"; overrides: {overrides}" if overrides else "",
            mode,
        )
        if _not_enforced(cfg):
            log.info("%s", _not_enforced_text(cfg, task_name))
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
                overrides=tuple(ov_list),
                not_enforced=tuple(str(c) for c in cfg.get("not_enforced", ())),
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
            # the claims' verdicts, computed once: summary.json, report.md and the console
            # say the same (ClaimsOutcome)
            outcome = ClaimsOutcome(ctx.claims)
            if ctx.claims:
                result.update(outcome.summary())
                if _not_enforced(cfg):  # the declared ones (their verdict: not enforced)
                    result["claims_not_enforced"] = [
                        c["name"] for c in ctx.claims if ctx.declared_not_enforced(c["name"])
                    ]
            _write_json(run_dir / "summary.json", result)
            ctx.report(summary_markdown({k: v for k, v in result.items() if k != "claims"}))
            if ctx.claims:
                ctx.report(outcome.markdown(mode))
                for c in ctx.claims:
                    log.info("claim %s", claim_line(c, mode), extra={"console": False})
                log.info(
                    "claims: %s%s",
                    outcome.line,
                    "".join(
                        f"; {claim_line(c, mode)}" for c in ctx.claims if claim_verdict(c) != PASS
                    ),
                )
                status.update(claims=outcome.verdict)
            if outcome.failed:
                msg = (
                    f"task '{task_name}': claim checks failed: {', '.join(outcome.failed)} "
                    f"(see {run_dir / 'summary.json'}, key 'claims')"
                )
                if mode == "enforce":
                    failed = [c for c in ctx.claims if claim_verdict(c) == FAILED]
                    raise ClaimsFailed(
                        msg + "; claims=record records them without failing.", failed, run_dir
                    )
                log.warning("%s; recorded, not enforced (claims=record)", msg)
                status.update(failed_claims=outcome.failed)
        except ConfigValueError as e:
            # The task refused an option before producing anything: a config error, not
            # a failed run. Remove what this job wrote (the caller removes the directory).
            written = {p.name for p in run_dir.iterdir()}
            if written <= {".hydra", "run.log", "status.json", "report.md"}:
                for name in ("status.json", "report.md", ".hydra/resolved.yaml"):
                    (run_dir / name).unlink(missing_ok=True)
            else:
                _fail(status, run_dir, t0, log, e)
            raise
        except (KeyboardInterrupt, Killed) as e:
            name = "SIGINT" if isinstance(e, KeyboardInterrupt) else str(e)
            status.update(
                status="KILLED",
                signal=name,
                killed=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                seconds=round(time.perf_counter() - t0, 3),
            )
            _write_json(run_dir / "status.json", status)
            log.error("KILLED (%s) after %.1f s", name, status["seconds"])
            raise
        except BaseException as e:
            _fail(status, run_dir, t0, log, e)
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


def _fail(status: dict, run_dir: pathlib.Path, t0: float, log: Any, e: BaseException) -> None:
    status.update(
        status="FAILED",
        seconds=round(time.perf_counter() - t0, 3),
        error=f"{type(e).__name__}: {e}",
        traceback=traceback.format_exc(),
    )
    _write_json(run_dir / "status.json", status)
    log.error("FAILED: %s: %s\n%s", type(e).__name__, e, status["traceback"].rstrip())


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
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, task_name


def run_in_process(
    overrides: Sequence[str], run_dir: str | pathlib.Path
) -> tuple[dict[str, Any], DictConfig]:
    """Compose ``overrides`` and run the job in this process, writing into ``run_dir``.

    For tests and figure scripts. Also writes ``.hydra/config.yaml`` (the composed config)
    and ``.hydra/overrides.yaml`` as ``transflow-run`` does. Returns ``(summary, cfg)``.
    """
    cfg, task_name = compose(overrides)
    check_overrides(overrides, task_name)  # before anything is written
    check_config(cfg, task_name)
    run_dir = pathlib.Path(run_dir)
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(prune(cfg, task_name)))
    (run_dir / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(list(overrides)))
    return run_job(cfg, run_dir=run_dir, task_name=task_name, overrides=overrides), cfg


def front_page(*, hydra_help: bool = False) -> str:
    """The text of ``transflow-run --help`` / ``transflow-run list``: usage, the experiments
    (one line each, from the ``# About:`` line of ``configs/experiment/<name>.yaml``) and
    what ``experiment=`` and ``task=`` mean.

    With ``hydra_help`` the text ends with Hydra's list of config groups (a
    ``string.Template`` placeholder Hydra fills in).
    """
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
        "  transflow-run help NAME                       one experiment's options: default,",
        "  transflow-run experiment=NAME --help          type, allowed range, meaning",
        "",
        "Experiments (experiment=NAME; configs/experiment/NAME.yaml; the file's comment says",
        "the runtime and the expected result):",
        *("  " + line for line in list_experiments().splitlines()),
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
        "Every job is checked before any compute or directory (unknown keys, types, ranges",
        "such as task.n_tokens > 0, names such as task.schemes, and overrides of the groups",
        "grid/model the task does not read); the error names the key. Groups read:",
        *(f"  {t}: {', '.join(task_reads(t))}" for t in sorted(discover()[0]) if task_reads(t)),
        "Docs: docs/experiments.md.",
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


def _field_comments(cls: type) -> dict[str, str]:
    """Field name → its comment in the dataclass source (the ``# ...`` on the field's line,
    else the comment lines right above it), over the class and its dataclass bases."""
    import inspect
    import re

    out: dict[str, str] = {}
    base = getattr(cls, "base", None)  # an options_without class: its base's comments
    for klass in [*reversed(base.__mro__ if base else ()), *reversed(cls.__mro__)]:
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in lines[1:]:
            stripped = line.strip()
            if stripped.startswith("#"):
                above.append(stripped.lstrip("#").strip())
                continue
            m = re.match(r"\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$", line)
            if m and not stripped.startswith(("def ", "@", '"""')):
                text = m.group(2) or " ".join(above)
                if text:
                    out[m.group(1)] = text
            above = []
    return out


def _type_name(tp: Any) -> str:
    name = getattr(tp, "__name__", None) or str(tp)
    return str(name).replace("typing.", "")


def _option_lines(cls: type, obj: Any, task_name: str, choices: dict, prefix: str) -> list[str]:
    """One line per field of ``cls`` (its value ``obj``): default, type and what is
    allowed, from the check :func:`~transflow.experiments.validate.option_check` applies."""
    import typing

    comments = _field_comments(cls)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - help text only
        hints = {}
    lines = []
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name, None)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            lines.append(f"  {key}.*  ({type(value).__name__}: its fields below)")
            lines += _option_lines(type(value), value, task_name, choices, key + ".")
            continue
        rule = option_check(task_name, key, f.name, value, choices)
        if isinstance(value, bool):
            allowed = "true | false"
        elif isinstance(value, enum.Enum):
            allowed = " | ".join(m.value for m in type(value))
        elif rule is None or (isinstance(rule, Rule) and isinstance(value, str)):
            allowed = ""
        else:
            each = "each " if isinstance(value, list | tuple) and value else ""
            allowed = each + rule.describe()
        tp = _type_name(hints.get(f.name, f.type))
        lines.append(f"  {key}={plain(value)}  [{tp}{'; ' + allowed if allowed else ''}]")
        if f.name in comments:
            lines.append(f"      {comments[f.name]}")
    return lines


def experiment_help(name: str) -> str:
    """The help of one experiment (``transflow-run experiment=NAME --help`` or
    ``transflow-run help NAME``): its description, runtime and expected result, and every
    option with its default, type, allowed range and meaning.

    Example:
        >>> text = experiment_help("clustering")
        >>> "task.t1=20.0" in text and "> 0" in text
        True
    """
    about = describe()
    if name not in about:
        raise ConfigValueError(
            f"experiment={name}: no such experiment; choose from {', '.join(sorted(about))} "
            "(transflow-run list)."
        )
    cfg, task_name = compose([f"experiment={name}"])
    module = _task_module(task_name)
    task_obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(module.Config), cfg.task))
    reads = task_reads(task_name)
    lines = [
        f"transflow-run experiment={name}: {about[name]}",
        "",
        *("  " + line for line in _header(CONFIG_DIR / "experiment" / f"{name}.yaml")[1]),
        "",
        f"Options of task '{task_name}' (experiments/tasks/{task_name}.py; set with "
        "task.FIELD=VALUE, lists as task.FIELD=[a,b]); default [type; allowed]:",
        *_option_lines(module.Config, task_obj, task_name, getattr(module, "CHOICES", {}), "task."),
        "",
        "Common options:",
        "  debug=smoke                   the sizes of configs/sizes/smoke/"
        f"{task_name}.yaml (below; a value given",
        "                                on the command line always wins)",
        *_smoke_lines(task_name),
        f"  seed={cfg.seed}  [int; {rule_for('', 'seed').describe()}]",
        f"  precision={_value(cfg.precision)}  [{' | '.join(p.value for p in Precision)}]",
        f"  claims=auto  [{' | '.join(c.value for c in ClaimsMode)}]",
    ]
    if reads:
        pruned = prune(cfg, task_name)
        lines += ["", "Top-level groups it reads:"]
        for g in GROUPS:
            if g in pruned:
                for k, v in pruned[g].items_ex(resolve=False):
                    rule = rule_for("", str(k))
                    lines.append(
                        f"  {g}.{k}={plain(_value(v))}"
                        + (f"  [{rule.describe()}]" if isinstance(rule, Rule) else "")
                    )
    else:
        lines += ["", "It reads no group grid or model (overriding one is an error)."]
    return "\n".join(lines)


def _smoke_lines(task_name: str) -> list[str]:
    """The lines of ``configs/sizes/smoke/<task>.yaml`` that set a value, indented."""
    path = CONFIG_DIR / "sizes" / "smoke" / f"{task_name}.yaml"
    if not path.exists():
        return ["      (no smoke sizes: the full-size values)"]
    return ["      " + ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def list_experiments() -> str:
    """``transflow-run list``: one line per experiment (name and description).

    Example:
        >>> any(line.startswith("clustering") for line in list_experiments().splitlines())
        True
    """
    about = describe()
    width = max(len(n) for n in about) + 2
    return "\n".join(f"{n:<{width}}{text}" for n, text in sorted(about.items()))


#: Hydra's command-line flags: what ``parse_command`` calls each → (its spellings, whether
#: it takes a value: ``--cfg job``); ``--info`` (``-i``) may take one.
_FLAGS = {
    "help": ("--help -h", False),
    "hydra_help": ("--hydra-help", False),
    "resolve": ("--resolve", False),
    "run": ("--run -r", False),
    "multirun": ("--multirun -m", False),
    "cfg": ("--cfg -c", True),
    "package": ("--package -p", True),
    "config_path": ("--config-path -cp", True),
    "config_name": ("--config-name -cn", True),
    "config_dir": ("--config-dir -cd", True),
    "rerun": ("--experimental-rerun", True),
    "shell_completion": ("--shell-completion -sc", True),
}
_SPELLINGS = {spelling: dest for dest, (names, _) in _FLAGS.items() for spelling in names.split()}


def parse_command(argv: Sequence[str]) -> dict[str, Any]:
    """Split ``transflow-run`` arguments into Hydra's flags and the overrides.

    Example:
        >>> c = parse_command(["-m", "experiment=depth", "--cfg", "job", "seed=0,1"])
        >>> c["overrides"], c["cfg"], c["multirun"], c["help"]
        (['experiment=depth', 'seed=0,1'], 'job', True, False)
    """
    out: dict[str, Any] = {dest: None if valued else False for dest, (_, valued) in _FLAGS.items()}
    out.update(info=None, overrides=[])
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        dest = _SPELLINGS.get(name)
        if dest is not None and not _FLAGS[dest][1]:
            out[dest] = True
        elif dest is not None:
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            out[dest] = value
        elif name in ("--info", "-i"):
            out["info"] = value or "all"
            if not eq and i + 1 < len(args) and "=" not in args[i + 1]:
                if not args[i + 1].startswith("-"):
                    i += 1
                    out["info"] = args[i]
        else:
            out["overrides"].append(a)
        i += 1
    return out


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """The jobs of a sweep: every combination of the swept values (``seed=0,1``).

    Example:
        >>> expand_sweep(["experiment=clustering", "seed=0,1"])
        [['experiment=clustering', 'seed=0'], ['experiment=clustering', 'seed=1']]
    """
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        if o.is_sweep_override():
            key = o.get_key_element()
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    return [list(job) for job in itertools.product(*choices)]


#: Sweeps with more jobs than this are checked on their first jobs only before starting.
PRECHECK_MAX_JOBS = 256


def check_task_keys(overrides: Sequence[str], task_name: str) -> None:
    """Refuse ``task.A.B=...`` overrides naming no option of task ``task_name``.

    Hydra's own message for these ("Could not override 'task.digits.scheme'") does not
    say why; this one names the key and the options at that level, and for a field the
    task sets itself (:func:`~transflow.experiments.config.options_without`) the name to
    use instead.

    Example:
        >>> check_task_keys(["task.digits.scheme=foo"], "depth")
        Traceback (most recent call last):
        ...
        transflow.experiments.validate.ConfigValueError: task.digits.scheme: not an option ...
    """
    import typing

    root = _task_module(task_name).Config
    for item in overrides:
        key = override_key(item)
        if not key.startswith("task.") or str(item).startswith("~"):
            continue
        cls, seen = root, "task"
        for part in key.split(".")[1:]:
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                break  # below a dict/list field (task.parallel.assignments.x): not typed
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                why = ""
                if part in getattr(cls, "set_by_task", ()):
                    top = [f.name for f in dataclasses.fields(root)]
                    hint = getattr(cls, "set_by_task_hints", {}).get(part)
                    if hint is None and part in top:
                        hint = f"task.{part}"
                    why = f" The task sets {part} itself" + (
                        f" from {hint}; set that instead." if hint else "."
                    )
                raise ConfigValueError(
                    f"{seen}.{part}: not an option of task '{task_name}'.{why} The options "
                    f"of {seen} are: {', '.join(names)}."
                )
            try:
                cls = typing.get_type_hints(cls).get(part)
            except Exception:  # noqa: BLE001 - untyped below this point
                break
            seen = f"{seen}.{part}"


def check_output_dirs(overrides: Sequence[str]) -> None:
    """Refuse a run or sweep directory that cannot be created (``hydra.run.dir=/proc/x``)
    before Hydra creates anything: the literal part of the path (up to the first
    ``${...}``) is checked with :func:`~transflow.experiments.validate.writable_dir_problem`;
    without an override, the working directory (``outputs/``, ``multirun/`` go there).

    Example:
        >>> check_output_dirs(["hydra.run.dir=/proc/nope"])
        Traceback (most recent call last):
        ...
        transflow.experiments.validate.ConfigValueError: hydra.run.dir = /proc/nope: ...
    """
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        given = [str(o) for o in overrides if override_key(o) == key and "=" in str(o)]
        value = given[-1].split("=", 1)[1].strip("'\"") if given else "outputs/"
        problem = writable_dir_problem(key, value.split("${", 1)[0] or ".")
        if problem is not None:
            raise ConfigValueError(
                problem.replace(" = " + value.split("${", 1)[0], f" = {value}", 1)
            )


def precheck(overrides: Sequence[str]) -> list[tuple[list[str], DictConfig, str]]:
    """Check every job of ``transflow-run [-m] <overrides>`` before Hydra creates anything.

    Expands sweeps (``a=1,2``) into their jobs and checks each: the task it selects, no
    override of a group the task does not read (:func:`check_overrides`), no unknown
    ``task.*`` key (:func:`check_task_keys`), then the composed config
    (:func:`check_config`). Returns ``(job overrides, cfg, task)`` per job checked;
    raises the first config error.

    Example:
        >>> [task for _, _, task in precheck(["experiment=clustering", "seed=0,1"])]
        ['clustering', 'clustering']
    """
    check_output_dirs(overrides)
    jobs = expand_sweep(overrides)
    tasks: dict[tuple[str, ...], str] = {}
    out = []
    for job in jobs[:PRECHECK_MAX_JOBS]:
        job = [o for o in job if not override_key(o).startswith(("hydra.", "hydra/"))]
        select = tuple(o for o in job if override_key(o) in ("experiment", "task"))
        if select not in tasks:
            tasks[select] = compose(select)[1]
        check_overrides(job, tasks[select])
        check_task_keys(job, tasks[select])
        cfg, task_name = compose(job)
        check_config(cfg, task_name)
        out.append((job, cfg, task_name))
    return out


def _config_cause(e: BaseException):
    """The OmegaConf error behind a Hydra composition error (it names the key), or None."""
    from omegaconf.errors import OmegaConfBaseException

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OmegaConfBaseException) and getattr(e, "full_key", None):
            return e
        e = e.__cause__ or e.__context__
    return None


def _say_error(e: BaseException) -> str:
    """One line for a config error: the key, the cause and what is allowed.

    Hydra's merge errors (``precision=fp16``, ``task.n_tokens=abc``) say only "Error
    merging override ..."; the OmegaConf error behind them names the key and the reason,
    and the rule of the key (:mod:`~transflow.experiments.validate`) what is allowed.
    """
    cause = _config_cause(e) if not isinstance(e, ConfigValueError) else None
    if cause is not None:
        key = str(cause.full_key)
        why = str(getattr(cause, "msg", None) or cause).strip().splitlines()[0].rstrip(".")
        for word, text in (("Integer", "an integer"), ("Float", "a number")):
            why = why.replace(f"could not be converted to {word}", f"is not {text}")
        rule = rule_for("", key.rsplit(".", 1)[-1].split("[", 1)[0])  # task.sizes[0]
        allowed = ""
        if "expected one of" not in why and rule is not None:
            kind = "an integer " if "an integer" in why else "a finite number "
            allowed = f"; allowed: {kind if isinstance(rule, Rule) else ''}{rule.describe()}"
        return f"transflow-run: invalid config: {key}: {why}{allowed}."
    text = " ".join(str(e).split())
    if isinstance(e, ConfigKeyError | ConfigValueError):
        return f"transflow-run: invalid config: {text}"
    return f"transflow-run: {type(e).__name__}: {text}"


def _claims_failed_exit(e: ClaimsFailed, sweep_dir: pathlib.Path | None = None) -> SystemExit:
    lines = [f"transflow-run: claim FAILED: {claim_line(c)}" for c in e.claims]
    lines.append(f"transflow-run: summary: {pathlib.Path(e.run_dir) / 'summary.json'} (report.md)")
    if sweep_dir is not None:
        from .sweep import write_sweep_summary

        s = write_sweep_summary(sweep_dir)
        lines.append(
            f"transflow-run: sweep stopped (claims=enforce) after {s['n_jobs']} job(s); summary "
            f"in {sweep_dir / 'sweep_summary.md'} (.csv, .json)"
        )
    print("\n".join(lines), file=sys.stderr, flush=True)
    return SystemExit(1)


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
        # One clear line instead of a traceback; nothing was computed or kept.
        print(_say_error(e), file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except ClaimsFailed as e:
        raise _claims_failed_exit(
            e, pathlib.Path(str(hc.sweep.dir)) if multirun else None
        ) from None
    except (KeyboardInterrupt, Killed) as e:
        name = "SIGINT" if isinstance(e, KeyboardInterrupt) else str(e)
        print(
            f"transflow-run: KILLED ({name}); status.json says KILLED; partial results in "
            f"{run_dir}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(130 if name == "SIGINT" else 143) from None


def main() -> None:
    """Console script ``transflow-run``.

    ``transflow-run list`` prints one line per experiment; ``transflow-run help NAME`` and
    ``transflow-run experiment=NAME --help`` print that experiment's options;
    ``--help`` alone the front page (:func:`front_page`). Otherwise every job of the
    command is composed and checked (:func:`precheck`) before Hydra creates a directory:
    a config error is one line on stderr, exit status 2. ``--cfg job`` prints the config
    the task sees (:func:`prune`). Then Hydra runs the jobs.
    """
    global _COMMAND
    argv = sys.argv[1:]
    if argv == ["list"]:
        print(list_experiments())
        return
    register_configs()
    try:
        if len(argv) == 2 and argv[0] == "help":
            print(experiment_help(argv[1]))
            return
        flags = parse_command(argv)
        if flags["help"] or flags["hydra_help"] or flags["info"] or flags["shell_completion"]:
            ovs = flags["overrides"]
            exp = [o.split("=", 1)[1] for o in ovs if override_key(o) == "experiment"]
            if flags["help"] and exp:
                print(experiment_help(exp[-1]))
                return
            _hydra_main()
            return
        if flags["config_path"] or flags["config_name"] or flags["config_dir"] or flags["rerun"]:
            _hydra_main()  # another config tree: Hydra checks it
            return
        jobs = precheck(flags["overrides"])
    except Exception as e:  # noqa: BLE001 - config errors and Hydra's, in one line
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(e, ConfigValueError | HydraException | OmegaConfBaseException):
            print(_say_error(e), file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        raise
    if flags["cfg"] == "job" and not flags["package"] and len(jobs) == 1:
        _, cfg, task_name = jobs[0]
        print(OmegaConf.to_yaml(prune(cfg, task_name), resolve=flags["resolve"]), end="")
        return
    _COMMAND = list(argv)
    _hydra_main()


if __name__ == "__main__":
    main()
