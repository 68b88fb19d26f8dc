"""Experiment tasks: every ``experiments/tasks/<name>.py`` with ``Config`` and ``run``.

The protocol (see ``docs/experiments.md``); a task module may import ``transflow`` (and
derive its ``Config`` from a library dataclass), but must not start a JAX backend or import
torch at import time: discovery imports every task::

    @dataclass
    class Config:            # the task's parameters, typed, with defaults
        n_steps: int = 100

    def run(cfg, ctx) -> dict:   # cfg: the task node; ctx: transflow.experiments.context.RunContext
        import jax               # use devices (and import torch) inside run only
        ...
        return {"headline": 1.0}

:func:`discover` imports every such module and registers its ``Config`` in Hydra's
ConfigStore as ``task/<name>``. A module that fails to import, or lacks ``Config``/``run``,
is reported (:func:`discover` returns the error text) instead of breaking the others.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys
import traceback
from types import ModuleType

__all__ = ["TASKS_DIR", "discover", "register_tasks"]

TASKS_DIR = pathlib.Path(__file__).resolve().parent

_CACHE: tuple[dict[str, ModuleType], dict[str, str]] | None = None


def _import_task(path: pathlib.Path, *, reload: bool) -> ModuleType:
    name = f"{__name__}.{path.stem}"
    if not reload and name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def discover(
    tasks_dir: pathlib.Path | None = None, *, refresh: bool = False
) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Import every task module; returns ``(tasks, errors)``.

    ``tasks`` maps a task name to its module; ``errors`` maps the name of every module that
    could not be used to a message (the traceback of a failed import, or what is missing).
    Files starting with ``_`` are skipped. Modules are imported as
    ``transflow.experiments.tasks.<name>``. The result for the default directory is cached
    (``refresh=True`` re-imports).

    Example:
        >>> tasks, errors = discover()
        >>> "equivalence" in tasks
        True
    """
    global _CACHE
    default = tasks_dir is None
    if default and _CACHE is not None and not refresh:
        return _CACHE
    tasks_dir = TASKS_DIR if default else pathlib.Path(tasks_dir)
    tasks: dict[str, ModuleType] = {}
    errors: dict[str, str] = {}
    for path in sorted(tasks_dir.glob("*.py")):
        name = path.stem
        if name.startswith("_"):
            continue
        try:
            module = _import_task(path, reload=refresh or not default)
        except Exception as e:  # noqa: BLE001 - a broken task must not stop the others
            errors[name] = "".join(traceback.format_exception(e)).rstrip()
            continue
        cfg = getattr(module, "Config", None)
        if not (isinstance(cfg, type) and dataclasses.is_dataclass(cfg)):
            errors[name] = (
                f"experiments/tasks/{name}.py must define `@dataclass class Config` (the "
                f"task's parameters); got Config={cfg!r}."
            )
        elif not callable(getattr(module, "run", None)):
            errors[name] = f"experiments/tasks/{name}.py must define `def run(cfg, ctx) -> dict`."
        else:
            tasks[name] = module
    if default:
        _CACHE = (tasks, errors)
    return tasks, errors


def register_tasks() -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Discover the tasks and store each ``Config`` in Hydra's ConfigStore as ``task/<name>``."""
    from hydra.core.config_store import ConfigStore

    tasks, errors = discover()
    cs = ConfigStore.instance()
    for name, module in tasks.items():
        cs.store(group="task", name=name, node=module.Config)
    return tasks, errors
