"""Build library objects from the config groups ``grid`` and ``model``.

Tasks call these from inside ``run`` (they import JAX/torch lazily), e.g.::

    grid = build_grid(ctx.cfg.grid)
    layer = build_torch_reference(ctx.cfg.model, dtype="float64")
    model = transflow.interop.from_torch(layer)
"""

from __future__ import annotations

import enum
from typing import Any

# The torch reference of the equivalence study lives in the library (one definition);
# re-exported here for tasks that build references from the ``model`` group.
from transflow.interop import build_torch_reference, torch_slow_path

__all__ = [
    "build_grid",
    "build_torch_reference",
    "torch_slow_path",
]


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return value.value if isinstance(value, enum.Enum) else value


def build_grid(grid_cfg: Any, *, dtype: Any = None):
    """A :class:`transflow.Grid` from a ``grid`` config node (:class:`GridConfig`).

    Example:
        >>> from transflow.experiments.config import GridConfig
        >>> build_grid(GridConfig(n_tokens=4, n_features=8)).n_tokens
        4
    """
    from transflow import Grid

    kind = _get(grid_cfg, "kind", "index")
    n, d = int(_get(grid_cfg, "n_tokens")), int(_get(grid_cfg, "n_features"))
    if kind == "index":
        return Grid.index(n, d, dtype=dtype)
    if kind == "uniform":
        return Grid.uniform(
            n, d, dx=float(_get(grid_cfg, "dx")), dy=float(_get(grid_cfg, "dy")), dtype=dtype
        )
    if kind == "interval":
        return Grid.interval(
            n, d, x_rule=_get(grid_cfg, "x_rule"), y_rule=_get(grid_cfg, "y_rule"), dtype=dtype
        )
    if kind == "image":
        h, w = int(_get(grid_cfg, "height")), int(_get(grid_cfg, "width"))
        if h * w != n:
            raise ValueError(
                f"grid.kind=image needs grid.n_tokens == grid.height * grid.width; got "
                f"n_tokens={n}, height*width={h}*{w}={h * w}."
            )
        return Grid.image(h, w, d, dtype=dtype)
    raise ValueError(
        f"`grid.kind` must be 'index', 'uniform', 'interval' or 'image', got {kind!r}."
    )
