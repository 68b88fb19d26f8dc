"""Structured configs (schemas) of ``transflow-run``, registered in Hydra's ConfigStore.

The YAML files under ``configs/`` are merged *into* these dataclasses, so a misspelt key
(``grid.n_tokns=4``) or a value of the wrong type (``grid.n_tokens=abc``) stops the run at
composition time, before any compute, with an error that names the key.

Top level (``configs/config.yaml`` composes, in order)::

    base_config (RunConfig) → _self_ → grid → model → scheme → task → experiment → debug

- ``grid`` (:class:`GridConfig`): the quadrature grid (:class:`transflow.Grid`).
- ``model`` (:class:`ModelConfig`): the reference layer(s): shapes and where the weights
  come from (a seeded random PyTorch init).
- ``scheme`` (:class:`SchemeConfig`): the splitting scheme and its options.
- ``task``: the task's own ``Config`` dataclass (``experiments/tasks/<name>.py``),
  registered automatically as ``task/<name>``.

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from omegaconf import II, MISSING

__all__ = [
    "Activation",
    "ClaimsMode",
    "GridConfig",
    "GridKind",
    "ModelConfig",
    "Precision",
    "QuadRule",
    "RunConfig",
    "SchemeConfig",
    "WeightSource",
    "register_schemas",
]


class Precision(enum.Enum):
    """Floating-point mode of a job: x64 is enabled inside the job for ``fp64``/``both``."""

    fp32 = "fp32"
    fp64 = "fp64"
    both = "both"


class ClaimsMode(enum.Enum):
    """What a failing claim check does (top-level ``claims=...``).

    ``enforce``: the job is marked FAILED (no ``DONE``) and ``transflow-run`` exits
    non-zero. ``record``: the failure is recorded (``summary.json``, ``report.md``,
    ``status.json`` and the sweep summary say FAILED) but the job completes, so a sweep
    goes on. ``auto`` (the default): ``enforce`` for a single run, ``record`` in a sweep
    (``-m``).
    """

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
class SchemeConfig:
    """A splitting scheme of :mod:`transflow` and its options.

    ``name`` is the scheme's short name (``lie`` → :class:`transflow.LieScheme`,
    ``prenorm`` → :class:`transflow.PreNormScheme`; any ``transflow.<Name>Scheme`` is
    found the same way). Options a scheme does not have are ignored; ``options`` passes
    further keyword arguments to schemes added later.
    """

    name: str = "lie"
    dt: float = 1.0
    # LieScheme: "dt" (paper-literal) or "2dt" (docs/spec/continuous-model.md Q10)
    ffn_branch_dt: str = "dt"
    hardmax: bool = False
    temperature: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunConfig:
    """The top-level config of one job."""

    seed: int = 0
    precision: Precision = Precision.both
    smoke: bool = False  # debug=smoke: the task shrinks itself to run in seconds
    claims: ClaimsMode = ClaimsMode.auto  # enforce | record | auto (enforce; record in sweeps)
    grid: GridConfig = field(default_factory=GridConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    scheme: SchemeConfig = field(default_factory=SchemeConfig)
    task: Any = MISSING


def register_schemas() -> None:
    """Store :class:`RunConfig` in Hydra's ConfigStore as ``base_config``.

    ``configs/config.yaml`` lists ``base_config`` first in its defaults, so every group
    file is merged into the typed fields (``grid``, ``model``, ``scheme``) and validated.
    """
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=RunConfig)
