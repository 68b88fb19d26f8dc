"""The equivalence study: random PyTorch encoder layers reproduced by the split scheme.

Library functions that return records (one dict per configuration or sub-step); the task
``experiment=equivalence`` and the figure scripts F1/F2 only wire a config to them, write
the records and plot them (:func:`transflow.plotting.plot_agreement`,
:func:`transflow.plotting.plot_substeps`).

- :func:`build_torch_reference`: a seeded random ``torch.nn.TransformerEncoderLayer`` (or
  ``TransformerEncoder`` stack) from a ``model`` description;
- :func:`equivalence_configurations`: the product of the layer options of an
  :class:`EquivalenceConfig` (plus encoder stacks);
- :func:`agreement_rows`: transflow vs torch for each configuration, in float64 (max abs
  difference) and float32 (max relative difference);
- :func:`substep_rows`: the sub-step states of one Lie/pre-LN step beside the torch
  layer's own intermediates;
- :func:`torch_slow_path`, :func:`fast_eager`: the execution context of these comparisons.

torch is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EQUIVALENCE_AXES",
    "EquivalenceConfig",
    "agreement_rows",
    "build_torch_reference",
    "equivalence_configurations",
    "fast_eager",
    "substep_rows",
    "torch_slow_path",
]

#: The layer options whose product :func:`equivalence_configurations` enumerates.
EQUIVALENCE_AXES = (
    "norm_first",
    "activation",
    "nhead",
    "dim_feedforward",
    "bias",
    "layer_norm_eps",
)


@dataclass
class EquivalenceConfig:
    """Options of the equivalence study (the ``task`` node of ``experiment=equivalence``).

    The product ``norm_first × activation × nhead × dim_feedforward × bias ×
    layer_norm_eps`` of layer options; ``encoder_layers > 0`` adds two
    ``torch.nn.TransformerEncoder`` stacks (post-/pre-LN, final LayerNorm) of that depth.
    """

    norm_first: list[bool] = field(default_factory=lambda: [False, True])
    activation: list[str] = field(default_factory=lambda: ["relu", "gelu"])
    nhead: list[int] = field(default_factory=lambda: [1, 4])
    # None: dim_feedforward = d_model (square FFN, the paper's residual form W_j = W̃_j − I).
    dim_feedforward: list[int | None] = field(default_factory=lambda: [None, 32])
    bias: list[bool] = field(default_factory=lambda: [True, False])
    layer_norm_eps: list[float] = field(default_factory=lambda: [1e-5, 0.0])
    encoder_layers: int = 3  # also compare TransformerEncoder stacks of this depth (0: off)
    batch: int = 2  # sequences per comparison
    tol_fp64: float = 1e-10  # on max |Δ| in float64
    tol_fp32: float = 1e-5  # on max |Δ| / max |torch| in float32


# --------------------------------------------------------------------------- contexts
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


@contextlib.contextmanager
def fast_eager():
    """Run many small, differently-structured models quickly: JAX op by op
    (``jax.disable_jit``: every primitive is compiled once per shape and reused, instead
    of one XLA compilation per configuration) and torch on one thread (tiny tensors)."""
    import jax
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with jax.disable_jit():
            yield
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- the reference
_MODEL_FIELDS = (
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


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def model_dict(model_cfg: Any, seed: int | None = None) -> dict[str, Any]:
    """A ``model`` description (mapping, config node or dataclass) as a plain dict.

    Enum values become their values; ``init_seed`` is replaced by ``seed`` if given.
    """
    if dataclasses.is_dataclass(model_cfg) and not isinstance(model_cfg, type):
        d = {f.name: getattr(model_cfg, f.name) for f in dataclasses.fields(model_cfg)}
    elif isinstance(model_cfg, Mapping):
        d = {k: model_cfg[k] for k in model_cfg}
    else:
        raise TypeError(
            f"`model_cfg` must be a mapping, a config node or a dataclass, got "
            f"{type(model_cfg).__name__}."
        )
    d = {str(k): _plain(v) for k, v in d.items()}
    if seed is not None:
        d["init_seed"] = seed
    return d


def build_torch_reference(model_cfg: Any, *, dtype: str = "float32", **overrides: Any):
    """A random ``torch.nn.TransformerEncoderLayer`` (``num_layers == 1``, no final norm)
    or ``torch.nn.TransformerEncoder`` from a ``model`` description.

    ``model_cfg`` has the fields of ``transflow.experiments.config.ModelConfig`` (a
    mapping, an OmegaConf node or a dataclass): ``source`` (``"torch_random"``),
    ``d_model``, ``nhead``, ``dim_feedforward`` (``None``: ``d_model``), ``num_layers``,
    ``norm_first``, ``activation``, ``bias``, ``layer_norm_eps``, ``final_norm``,
    ``init_seed``, ``randomize_affine``. The weights are torch's own initialisation after
    ``torch.manual_seed(init_seed)`` (with ``randomize_affine`` the LayerNorm
    gains/biases and all biases are then drawn at random too: torch starts them at 1 and
    0), created in float32 and cast to ``dtype``; ``batch_first=True``, ``dropout=0`` and
    eval mode. Keyword ``overrides`` replace fields of ``model_cfg`` (e.g. ``nhead=4``).

    Example:
        >>> from transflow.interop import build_torch_reference
        >>> model = dict(source="torch_random", d_model=8, nhead=2, dim_feedforward=16,
        ...              num_layers=1, norm_first=False, activation="relu", bias=True,
        ...              layer_norm_eps=1e-5, final_norm=False, init_seed=0,
        ...              randomize_affine=True)
        >>> type(build_torch_reference(model)).__name__
        'TransformerEncoderLayer'
    """
    import torch

    given = model_dict(model_cfg)
    missing = [k for k in _MODEL_FIELDS if k not in given]
    if missing:
        raise ValueError(
            f"build_torch_reference: `model_cfg` lacks the fields {missing}; the fields are "
            f"{list(_MODEL_FIELDS)}."
        )
    p = {k: given[k] for k in _MODEL_FIELDS}
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(
            f"build_torch_reference: unknown model fields {sorted(unknown)}; "
            f"the fields are {sorted(p)}."
        )
    p.update({k: _plain(v) for k, v in overrides.items()})
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


# --------------------------------------------------------------------------- the study
def configuration_label(c: Mapping[str, Any]) -> str:
    """A short label of one configuration, e.g. ``post-LN relu h=1 ff=d bias=1 eps=1e-05``."""
    ff = "d" if c["dim_feedforward"] is None else str(c["dim_feedforward"])
    return (
        f"{'pre' if c['norm_first'] else 'post'}-LN {c['activation']} h={c['nhead']} "
        f"ff={ff} bias={int(c['bias'])} eps={c['layer_norm_eps']:g}"
        + (
            f" L={c['num_layers']}" + ("+norm" if c.get("final_norm") else "")
            if c.get("num_layers", 1) > 1
            else ""
        )
    )


def equivalence_configurations(
    cfg: EquivalenceConfig, *, smoke: bool = False, num_layers: int = 1, final_norm: bool = False
) -> list[dict[str, Any]]:
    """The list of reference-layer configurations of the study.

    The product rows have ``num_layers``/``final_norm`` of the ``model`` description (one
    layer by default); ``cfg.encoder_layers > 0`` appends two stacks (post-/pre-LN) of
    that depth with a final LayerNorm (``stack=True``). In smoke mode only ``norm_first ×
    activation`` (the first value of the other axes) and one post-LN stack of two layers.

    Example:
        >>> from transflow.interop import EquivalenceConfig, equivalence_configurations
        >>> len(equivalence_configurations(EquivalenceConfig()))  # 2^6 + two stacks
        66
        >>> len(equivalence_configurations(EquivalenceConfig(), smoke=True))
        5
    """
    values = {ax: list(getattr(cfg, ax)) for ax in EQUIVALENCE_AXES}
    for ax, vals in values.items():
        if not vals:
            raise ValueError(f"`task.{ax}` must list at least one value, got [].")
    if smoke:
        values = {
            ax: (v if ax in ("norm_first", "activation") else v[:1]) for ax, v in values.items()
        }
    out = [
        dict(
            zip(EQUIVALENCE_AXES, combo),
            num_layers=int(num_layers),
            final_norm=bool(final_norm),
            stack=False,
        )
        for combo in itertools.product(*values.values())
    ]
    depth = min(cfg.encoder_layers, 2) if smoke else cfg.encoder_layers
    if depth > 0:
        for nf in [False] if smoke else [False, True]:
            base = {ax: values[ax][0] for ax in EQUIVALENCE_AXES}
            out.append(dict(base, norm_first=nf, num_layers=depth, final_norm=True, stack=True))
    return out


def _compare(
    ref_cfg, c: dict, x64, *, tol_fp64: float, tol_fp32: float, dtypes: tuple[str, ...]
) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from ._torch import from_torch

    fields = {k: c[k] for k in (*EQUIVALENCE_AXES, "num_layers", "final_norm")}
    row: dict[str, Any] = {
        "config": configuration_label(c),
        **fields,
        "stack": bool(c.get("stack")),
    }
    row["max_abs_fp64"] = row["max_rel_fp32"] = row["max_abs_fp32"] = math.nan
    with torch_slow_path():
        ref32 = build_torch_reference(ref_cfg, dtype="float32", **fields)
        for dt in dtypes:
            ref = ref32 if dt == "float32" else copy.deepcopy(ref32).double()
            x = x64 if dt == "float64" else x64.float()
            with torch.no_grad():
                want = ref(x).numpy()
            model = from_torch(ref, dtype=getattr(jnp, dt))
            got = np.asarray(jax.vmap(model)(jnp.asarray(x.numpy())))
            if got.dtype != np.dtype(dt):
                raise RuntimeError(f"transflow returned {got.dtype}, expected {dt}.")
            err = float(np.max(np.abs(got - want)))
            if dt == "float64":
                row["max_abs_fp64"] = err
            else:
                row["max_abs_fp32"] = err
                row["max_rel_fp32"] = err / float(np.max(np.abs(want)))
    ok64 = math.isnan(row["max_abs_fp64"]) or row["max_abs_fp64"] <= tol_fp64
    ok32 = math.isnan(row["max_rel_fp32"]) or row["max_rel_fp32"] <= tol_fp32
    row["pass"] = bool(ok64 and ok32)
    return row


def agreement_rows(
    cfg: EquivalenceConfig,
    model_cfg: Any,
    n_tokens: int,
    *,
    seed: int = 0,
    smoke: bool = False,
    dtypes: tuple[str, ...] = ("float32", "float64"),
    progress: Callable[..., Iterable] | None = None,
    log: Callable[[dict], None] | None = None,
) -> list[dict[str, Any]]:
    """Compare transflow with torch for every configuration; one dict per configuration.

    Each row has the configuration's fields, ``config`` (a label), ``max_abs_fp64``,
    ``max_abs_fp32``, ``max_rel_fp32`` (NaN when that dtype is not run) and ``pass``
    (within ``cfg.tol_fp64``/``cfg.tol_fp32``). ``model_cfg`` is the ``model``
    description (d_model, init seed, ...; see :func:`build_torch_reference`); the
    configuration i is built with ``init_seed * 1000 + i``. float64 needs x64 enabled.
    ``progress`` wraps the iteration (e.g. a tqdm bar), ``log`` receives each row.
    """
    import torch

    m = model_dict(model_cfg)
    cfgs = equivalence_configurations(
        cfg, smoke=smoke, num_layers=int(m["num_layers"]), final_norm=bool(m["final_norm"])
    )
    d_model = int(m["d_model"])
    gen = torch.Generator().manual_seed(int(seed))
    batch = 1 if smoke else int(cfg.batch)
    x64 = torch.randn(batch, int(n_tokens), d_model, generator=gen, dtype=torch.float64)
    it = progress(cfgs, total=len(cfgs), desc="equivalence") if progress else cfgs
    rows = []
    for i, c in enumerate(it):
        row = _compare(
            dict(m, init_seed=int(m["init_seed"]) * 1000 + i),
            c,
            x64,
            tol_fp64=cfg.tol_fp64,
            tol_fp32=cfg.tol_fp32,
            dtypes=tuple(dtypes),
        )
        rows.append(row)
        if log is not None:
            log(row)
    return rows


def substep_rows(
    model_cfg: Any, n_tokens: int, *, seed: int = 0, dtype: str = "float64"
) -> list[dict[str, Any]]:
    """Sub-step states of one Lie step (first layer of ``model_cfg``) beside torch's.

    For each sub-step of :meth:`transflow.SplitTransformer.substeps` (post-LN:
    ``attention, ln1, ffn1..ffnJ, relax, ln2``; pre-LN: ``ln1, attention, ln2,
    ffn1..ffnJ, residual``) the row holds statistics of the transflow state (Frobenius
    norm ``fro``, mean and spread of the per-token means, mean of the per-token standard
    deviations) and of the torch intermediate it corresponds to (``torch_*``), and
    ``max_abs`` = max |transflow − torch|. The torch intermediates are computed with the
    layer's own modules (:func:`transflow.interop.torch_substeps`; ``ffn1`` =
    ``activation(linear1(·))``; ``relax`` ↔ ½(ln1 + ffn), half torch's residual sum).
    Intermediate FFN sub-steps without a torch counterpart have NaN ``torch_*``/``max_abs``.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from ._torch import from_torch, torch_substeps

    d = model_dict(model_cfg)
    d.update(num_layers=1, final_norm=False)
    with torch_slow_path():
        ref = build_torch_reference(d, dtype=dtype)
        gen = torch.Generator().manual_seed(int(seed))
        x = torch.randn(
            int(n_tokens), int(d["d_model"]), generator=gen, dtype=getattr(torch, dtype)
        )
        model = from_torch(ref, dtype=getattr(jnp, dtype))
        # vmap over a batch of one: the same primitive shapes as the smoke agreement run
        # (batch 1), so eager mode reuses their compilations.
        batched = jax.vmap(model.substeps)(jnp.asarray(x.numpy())[None])
        order = model.scheme.substep_names(model.layer(0))  # vmap sorts dict keys
        ours = {k: np.asarray(batched[k][0]) for k in order}
        theirs = {k: v.numpy() for k, v in torch_substeps(ref, x).items()}
        with torch.no_grad():
            pre_ffn = theirs["ln2" if ref.norm_first else "ln1"]
            theirs_ffn1 = ref.activation(ref.linear1(torch.as_tensor(pre_ffn))).numpy()
    names = list(ours)
    J = sum(n.startswith("ffn") for n in names)
    rows = []
    for name in names:
        if name == f"ffn{J}":
            ref_state = theirs["ffn"]
        elif name == "ffn1" and J > 1:
            ref_state = theirs_ffn1
        elif name.startswith("ffn"):
            ref_state = None  # intermediate FFN sub-steps have no torch counterpart
        elif name == "relax":
            ref_state = 0.5 * (theirs["ln1"] + theirs["ffn"])
        else:
            ref_state = theirs[name]
        row = {"substep": name, **_stats(ours[name])}
        if ref_state is not None:
            row.update({f"torch_{k}": v for k, v in _stats(ref_state).items()})
            row["max_abs"] = float(np.max(np.abs(ours[name] - ref_state)))
        else:
            row.update({f"torch_{k}": math.nan for k in _stats(ours[name])})
            row["max_abs"] = math.nan
        rows.append(row)
    return rows


def _stats(u) -> dict[str, float]:
    import numpy as np

    u = np.asarray(u, dtype=np.float64)
    means = u.mean(axis=-1)
    return {
        "fro": float(np.linalg.norm(u)),
        "token_mean": float(means.mean()),
        "token_mean_spread": float(means.std()),
        "token_std": float(u.std(axis=-1).mean()),
    }
