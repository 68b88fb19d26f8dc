"""Structured configs (schemas) of ``transflow-run``, registered in Hydra's ConfigStore.

The YAML files under ``configs/`` are merged *into* these dataclasses, so a misspelt key
(``grid.n_tokns=4``) or a value of the wrong type (``grid.n_tokens=abc``) stops the run at
composition time, before any compute, with an error that names the key.

Top level (``configs/config.yaml`` composes, in order)::

    base_config (RunConfig) → _self_ → grid → model → task → experiment → debug → sizes

- ``sizes`` (``configs/sizes/<debug>/<task>.yaml``, optional): with ``debug=smoke`` the
  task's smoke sizes (``task.*`` values and ``not_enforced`` claims). Hydra applies the
  command line after every config file, so a value the user gives always wins.

- ``grid`` (:class:`GridConfig`): the quadrature grid (:class:`transflow.Grid`).
- ``model`` (:class:`ModelConfig`): the reference layer(s): shapes and where the weights
  come from (a seeded random PyTorch init).
- ``task``: the task's own ``Config`` dataclass (``experiments/tasks/<name>.py``),
  registered automatically as ``task/<name>``.

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import II, MISSING

__all__ = [
    "Activation",
    "complete",
    "options_without",
    "ClaimsMode",
    "GridConfig",
    "GridKind",
    "ModelConfig",
    "Precision",
    "QuadRule",
    "RunConfig",
    "WeightSource",
    "register_schemas",
]


class Precision(enum.Enum):
    """Floating-point mode of a job: x64 is enabled inside the job for ``fp64``/``both``."""

    fp32 = "fp32"
    fp64 = "fp64"
    both = "both"


class ClaimsMode(enum.Enum):
    """What a failing claim check does (top-level ``claims=...``): ``enforce`` fails the job
    (``transflow-run`` exits non-zero), ``record`` records the failure and completes it;
    ``auto`` (the default): ``enforce`` for a single run, ``record`` in a sweep (``-m``).
    The table in ``docs/experiments.md`` says what each writes."""

    auto = "auto"
    enforce = "enforce"
    record = "record"


class GridKind(enum.Enum):
    """Which :class:`transflow.Grid` constructor builds the grid."""

    index = "index"  # Grid.index: the paper's Δx = Δy = 1
    uniform = "uniform"  # Grid.uniform(dx, dy)
    interval = "interval"  # Grid.interval: Ω_x = Ω_y = [0, 1] with a quadrature rule
    image = "image"  # Grid.image(height, width): 2-D tokens


class QuadRule(enum.Enum):
    midpoint = "midpoint"
    trapezoid = "trapezoid"
    gauss = "gauss"


class WeightSource(enum.Enum):
    """Where the reference layer's weights come from."""

    torch_random = "torch_random"  # torch.nn.TransformerEncoderLayer's own init, seeded


class Activation(enum.Enum):
    relu = "relu"
    gelu = "gelu"


@dataclass
class GridConfig:
    """The grid on Ω_x × Ω_y (see :class:`transflow.Grid`)."""

    kind: GridKind = GridKind.index
    n_tokens: int = 8
    n_features: int = 16
    dx: float = 1.0  # kind=uniform
    dy: float = 1.0  # kind=uniform
    x_rule: QuadRule = QuadRule.midpoint  # kind=interval
    y_rule: QuadRule = QuadRule.midpoint  # kind=interval
    height: int = 2  # kind=image (n_tokens = height * width)
    width: int = 4  # kind=image


@dataclass
class ModelConfig:
    """A reference ``torch.nn.TransformerEncoderLayer`` / ``TransformerEncoder`` stack."""

    source: WeightSource = WeightSource.torch_random
    d_model: int = II("grid.n_features")
    nhead: int = 2
    dim_feedforward: int = 32
    num_layers: int = 1
    norm_first: bool = False
    activation: Activation = Activation.relu
    bias: bool = True
    layer_norm_eps: float = 1e-5
    final_norm: bool = False  # TransformerEncoder(norm=LayerNorm) after the last layer
    init_seed: int = II("seed")  # torch.manual_seed before building the layers
    # Draw LayerNorm gains/biases and all biases at random (torch starts them at 1 and 0),
    # so a comparison exercises every parameter.
    randomize_affine: bool = True


@dataclass
class RunConfig:
    """The top-level config of one job."""

    seed: int = 0
    precision: Precision = Precision.both
    # debug=smoke: a label (report, output directory); the smoke sizes themselves are
    # configuration, configs/sizes/smoke/<task>.yaml, merged below the command line
    smoke: bool = False
    claims: ClaimsMode = ClaimsMode.auto  # enforce | record | auto (enforce; record in sweeps)
    # claims recorded but not enforced in this run (names or fnmatch patterns; set by
    # configs/sizes/smoke/<task>.yaml for the claims that do not hold at smoke size)
    not_enforced: list[str] = field(default_factory=list)
    grid: GridConfig = field(default_factory=GridConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: Any = MISSING


def library_names(module: str, name: str) -> Any:
    """A ``CHOICES`` entry: the names in ``transflow[.<module>].<name>`` as a tuple, imported
    only when a check asks for them (importing a task imports no JAX).

    Example:
        >>> library_names("continuous", "READINGS")()
        ('right', 'left', 'average')
    """

    path = f"transflow.{module}" if module else "transflow"

    def names() -> tuple:
        import importlib

        return tuple(vars(importlib.import_module(path))[name])

    names.__qualname__ = f"{path}.{name}"
    return names


def register_schemas() -> None:
    """Store :class:`RunConfig` in Hydra's ConfigStore as ``base_config``.

    ``configs/config.yaml`` lists ``base_config`` first in its defaults, so every group
    file is merged into the typed fields (``grid``, ``model``) and validated.
    """
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=RunConfig)


def options_without(
    base: type,
    set_by_task: typing.Iterable[str],
    *,
    name: str,
    defaults: dict | None = None,
    hints: dict[str, str] | None = None,
) -> type:
    """A dataclass with the fields of ``base`` except ``set_by_task`` (one name per option).

    A task that builds a library config (``DepthDigitsConfig``) from its own fields
    (``task.steps``, ``task.d``, the scheme of each model) exposes the remaining fields
    under this class, so ``task.digits.steps`` does not exist beside ``task.steps`` and
    ``task.digits.scheme=foo`` is an unknown key instead of a value silently ignored.
    ``defaults`` replace defaults of ``base``; ``hints`` say, per dropped field, which
    option sets it (for the error message). :func:`complete` builds the ``base`` instance
    back.

    Example:
        >>> @dataclass
        ... class Base:
        ...     steps: int = 10
        ...     lr: float = 0.1
        >>> Opts = options_without(Base, ["steps"], name="Opts")
        >>> [f.name for f in dataclasses.fields(Opts)]
        ['lr']
        >>> complete(Opts(lr=0.5), steps=3)
        Base(steps=3, lr=0.5)
    """
    drop = set(set_by_task)
    unknown = drop - {f.name for f in dataclasses.fields(base)}
    if unknown:
        raise ValueError(
            f"options_without: {sorted(unknown)} are not fields of {base.__name__}; its "
            f"fields are {[f.name for f in dataclasses.fields(base)]}."
        )
    types = typing.get_type_hints(base)
    defaults = dict(defaults or {})
    spec = []
    for f in dataclasses.fields(base):
        if f.name in drop:
            continue
        if f.name in defaults:
            value = defaults.pop(f.name)
            kw = (
                {"default_factory": (lambda v=value: type(v)(v))}
                if isinstance(value, list | dict)
                else {"default": value}
            )
        elif f.default is not dataclasses.MISSING:
            kw = {"default": f.default}
        elif f.default_factory is not dataclasses.MISSING:
            kw = {"default_factory": f.default_factory}
        else:
            kw = {}
        spec.append((f.name, types[f.name], field(**kw)))
    if defaults:
        raise ValueError(f"options_without: `defaults` names unknown fields {sorted(defaults)}.")
    cls = dataclasses.make_dataclass(name, spec)
    cls.__doc__ = (
        f"The options of {base.__name__} that the task does not set itself (it sets "
        f"{', '.join(sorted(drop))})."
    )
    cls.base = base
    cls.set_by_task = tuple(sorted(drop))
    cls.set_by_task_hints = dict(hints or {})
    return cls


def complete(options: Any, **set_by_task: Any) -> Any:
    """The ``base`` config of an :func:`options_without` instance: its fields plus
    ``set_by_task`` (fields the task sets and does not give keep ``base``'s defaults)."""
    cls = type(options)
    values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    return cls.base(**values, **set_by_task)
