"""Experiment tasks: every ``experiments/tasks/<name>.py`` with ``Config`` and ``run``.

The protocol (see ``docs/experiments.md``)::

    @dataclass
    class Config:            # the task's parameters, typed, with defaults
        n_steps: int = 100

    def run(cfg, ctx) -> dict:   # cfg: the task node; ctx: experiments.context.RunContext
        import jax               # JAX is imported inside run, never at module import
        ...
        return {"headline": 1.0}

:func:`discover` imports every such module and registers its ``Config`` in Hydra's
ConfigStore as ``task/<name>``. A module that fails to import, or lacks ``Config``/``run``,
is reported (:func:`discover` returns the error text) instead of breaking the others.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import traceback
from types import ModuleType

__all__ = ["TASKS_DIR", "discover", "register_tasks"]

TASKS_DIR = pathlib.Path(__file__).resolve().parent

_CACHE: tuple[dict[str, ModuleType], dict[str, str]] | None = None


def _check_task(name: str, module: ModuleType) -> str | None:
    cfg = getattr(module, "Config", None)
    if cfg is None or not (isinstance(cfg, type) and dataclasses.is_dataclass(cfg)):
        return (
            f"experiments/tasks/{name}.py must define `@dataclass class Config` (the task's "
            f"parameters); got Config={cfg!r}."
        )
    if not callable(getattr(module, "run", None)):
        return f"experiments/tasks/{name}.py must define `def run(cfg, ctx) -> dict`."
    return None


def discover(*, refresh: bool = False) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Import every task module; returns ``(tasks, errors)``.

    ``tasks`` maps a task name to its module; ``errors`` maps the name of every module that
    could not be used to a message (the traceback of a failed import, or what is missing).
    Files starting with ``_`` are skipped. The result is cached (``refresh=True`` redoes it).
    """
    global _CACHE
    if _CACHE is not None and not refresh:
        return _CACHE
    tasks: dict[str, ModuleType] = {}
    errors: dict[str, str] = {}
    for path in sorted(TASKS_DIR.glob("*.py")):
        name = path.stem
        if name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__name__}.{name}")
            if refresh:
                module = importlib.reload(module)
        except BaseException as e:  # noqa: BLE001 - a broken task must not stop the others
            if isinstance(e, KeyboardInterrupt):
                raise
            errors[name] = "".join(traceback.format_exception(e)).rstrip()
            continue
        problem = _check_task(name, module)
        if problem is None:
            tasks[name] = module
        else:
            errors[name] = problem
    _CACHE = (tasks, errors)
    return _CACHE


def register_tasks() -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Discover the tasks and store each ``Config`` in Hydra's ConfigStore as ``task/<name>``."""
    from hydra.core.config_store import ConfigStore

    tasks, errors = discover()
    cs = ConfigStore.instance()
    for name, module in tasks.items():
        cs.store(group="task", name=name, node=module.Config)
    return tasks, errors
