"""Build library objects from the config groups ``grid``, ``model`` and ``scheme``.

Tasks call these from inside ``run`` (they import JAX/torch lazily), e.g.::

    grid = build_grid(ctx.cfg.grid)
    layer = build_torch_reference(ctx.cfg.model, dtype="float64")
    model = transflow.interop.from_torch(layer)
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any

__all__ = [
    "build_grid",
    "build_scheme",
    "build_torch_reference",
    "scheme_class",
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


def scheme_class(name: str) -> type:
    """The :class:`transflow.AbstractScheme` subclass called ``name``.

    ``"lie"`` → ``LieScheme``, ``"prenorm"`` → ``PreNormScheme``; any other
    ``transflow.<Name>Scheme`` (e.g. ``"strang"`` → ``StrangScheme``) is found by name.
    """
    import transflow

    known = {}
    for attr in dir(transflow):
        obj = getattr(transflow, attr)
        if (
            isinstance(obj, type)
            and issubclass(obj, transflow.AbstractScheme)
            and attr.endswith("Scheme")
            and not attr.startswith("Abstract")
        ):
            known[attr.removesuffix("Scheme").lower()] = obj
    key = str(name).lower().replace("_", "").removesuffix("scheme")
    if key not in known:
        raise ValueError(
            f"`scheme.name` must be one of {sorted(known)} (transflow.<Name>Scheme), got {name!r}."
        )
    return known[key]


def build_scheme(scheme_cfg: Any):
    """A scheme instance from a ``scheme`` config node (:class:`SchemeConfig`).

    Options the scheme class does not define are ignored, except those given in
    ``scheme.options``, which must exist.
    """
    import dataclasses

    cls = scheme_class(_get(scheme_cfg, "name", "lie"))
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key in ("ffn_branch_dt", "hardmax", "temperature"):
        if key in fields:
            kwargs[key] = _get(scheme_cfg, key)
    options = _get(scheme_cfg, "options", None) or {}
    for key, value in dict(options).items():
        if key not in fields:
            raise ValueError(
                f"`scheme.options.{key}`: {cls.__name__} has no option {key!r}; its options "
                f"are {sorted(fields)}."
            )
        kwargs[key] = value
    return cls(**kwargs)


@contextlib.contextmanager
def torch_slow_path():
    """Disable PyTorch's fused MHA/encoder fast path (so eval mode runs the Python path)."""
    import torch

    get = getattr(torch.backends.mha, "get_fastpath_enabled", None)
    old = get() if get is not None else True
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(old)


def build_torch_reference(model_cfg: Any, *, dtype: str = "float32", **overrides: Any):
    """A random ``torch.nn.TransformerEncoderLayer`` (``num_layers == 1``, no final norm)
    or ``torch.nn.TransformerEncoder`` from a ``model`` config node (:class:`ModelConfig`).

    The weights are torch's own initialisation after ``torch.manual_seed(init_seed)``
    (with ``randomize_affine`` the LayerNorm gains/biases and all biases are then drawn
    at random too: torch starts them at 1 and 0), created in float32 and cast to
    ``dtype``; ``batch_first=True``, ``dropout=0`` and eval mode. Keyword ``overrides``
    replace fields of ``model_cfg`` (e.g. ``nhead=4``).

    Example:
        >>> from transflow.experiments.config import ModelConfig
        >>> layer = build_torch_reference(ModelConfig(d_model=8, init_seed=0), nhead=2)
        >>> type(layer).__name__
        'TransformerEncoderLayer'
    """
    import torch

    p = {
        key: _get(model_cfg, key)
        for key in (
            "source",
            "d_model",
            "nhead",
            "dim_feedforward",
            "num_layers",
            "norm_first",
            "activation",
            "bias",
            "layer_norm_eps",
            "final_norm",
            "init_seed",
            "randomize_affine",
        )
    }
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(
            f"build_torch_reference: unknown model fields {sorted(unknown)}; "
            f"the fields are {sorted(p)}."
        )
    p.update({k: (v.value if isinstance(v, enum.Enum) else v) for k, v in overrides.items()})
    if p["source"] != "torch_random":
        raise ValueError(f"`model.source` must be 'torch_random', got {p['source']!r}.")
    if p["dim_feedforward"] is None:
        p["dim_feedforward"] = p["d_model"]
    if p["d_model"] % p["nhead"]:
        raise ValueError(
            f"`model.d_model` ({p['d_model']}) must be divisible by `model.nhead` ({p['nhead']})."
        )
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}.get(str(dtype))
    if torch_dtype is None:
        raise ValueError(f"`dtype` must be 'float32' or 'float64', got {dtype!r}.")
    torch.manual_seed(int(p["init_seed"]))

    def make_layer():
        return torch.nn.TransformerEncoderLayer(
            int(p["d_model"]),
            int(p["nhead"]),
            int(p["dim_feedforward"]),
            dropout=0.0,
            activation=str(p["activation"]),
            layer_norm_eps=float(p["layer_norm_eps"]),
            batch_first=True,
            norm_first=bool(p["norm_first"]),
            bias=bool(p["bias"]),
            dtype=torch.float32,
        )

    if int(p["num_layers"]) == 1 and not p["final_norm"]:
        module = make_layer()
    else:
        norm = (
            torch.nn.LayerNorm(
                int(p["d_model"]),
                eps=float(p["layer_norm_eps"]),
                bias=bool(p["bias"]),
                dtype=torch.float32,
            )
            if p["final_norm"]
            else None
        )
        module = torch.nn.TransformerEncoder(
            make_layer(), int(p["num_layers"]), norm=norm, enable_nested_tensor=False
        )
        # TransformerEncoder deep-copies one layer: re-draw the matrices so the layers differ.
        with torch.no_grad():
            for sub in module.layers[1:]:
                for prm in sub.parameters():
                    if prm.ndim > 1:
                        torch.nn.init.xavier_uniform_(prm)
    if p["randomize_affine"]:
        # torch initialises LayerNorm gains to 1 and the attention biases to 0: draw them at
        # random so that the comparison exercises every parameter.
        with torch.no_grad():
            for name, prm in module.named_parameters():
                if prm.ndim != 1:
                    continue
                if "norm" in name and name.endswith("weight"):
                    prm.copy_(1.0 + 0.2 * torch.randn_like(prm))
                else:
                    prm.copy_(0.1 * torch.randn_like(prm))
    return module.to(torch_dtype).eval()
