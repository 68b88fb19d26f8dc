"""Safe loading of torch checkpoints (``.pt``/``.pth``) of ``nn.TransformerEncoder`` models.

A ``.pt`` file written by ``torch.save(module, path)`` is a pickle: unpickling it runs
whatever code the file names, so opening a file someone sent executes it. By default
:func:`load_torch_checkpoint` therefore reads files with ``torch.load(...,
weights_only=True)``, which only rebuilds tensors and plain containers: a **state dict**
(``torch.save(module.state_dict(), path)``) with the architecture taken from a small
sidecar JSON file beside it (``<path>.json``, e.g. ``encoder.pt.json``) or from the
caller's defaults. A whole pickled module loads only with ``trust_pickle=True``
(``task.trust_pickle=true`` in ``experiment=analyze``): say so only for files you trust.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from .._errors import CheckpointError, check_flag, check_path

__all__ = ["load_torch_checkpoint", "TORCH_ARCHITECTURE_KEYS"]

#: The keys of a sidecar JSON file (all optional; what is missing is inferred from the
#: state dict's shapes or taken from ``defaults``): ``num_layers``, ``d_model``, ``nhead``,
#: ``dim_feedforward``, ``activation`` ("relu" | "gelu"), ``layer_norm_eps``,
#: ``norm_first``, ``bias``, ``final_norm`` (a ``TransformerEncoder.norm``).
TORCH_ARCHITECTURE_KEYS = (
    "num_layers",
    "d_model",
    "nhead",
    "dim_feedforward",
    "activation",
    "layer_norm_eps",
    "norm_first",
    "bias",
    "final_norm",
)


def _untrusted(path, err) -> CheckpointError:
    return CheckpointError(
        f"load_torch_checkpoint: `path`={str(path)!r} is not a plain state dict: it needs "
        "unpickling of arbitrary objects, which can run code from the file, so it is refused "
        "by default "
        f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). Save the "
        "weights instead, `torch.save(module.state_dict(), path)` with the architecture in "
        "a sidecar `<path>.json`, or, only for a file you trust, opt in with "
        "`trust_pickle=True` (`task.trust_pickle=true` in experiment=analyze)."
    )


def _architecture(state: dict, sidecar: dict, defaults: dict, path) -> dict:
    prefix = "layers.0." if any(k.startswith("layers.") for k in state) else ""
    key = f"{prefix}self_attn.in_proj_weight"
    if key not in state:
        raise ValueError(
            f"load_torch_checkpoint: `path`={str(path)!r}: the state dict is not one of a "
            "torch.nn.TransformerEncoder(Layer) "
            f"(no `{key}`; keys start {sorted(state)[:4]})."
        )
    inferred: dict[str, Any] = {
        "d_model": int(state[key].shape[1]),
        "dim_feedforward": int(state[f"{prefix}linear1.weight"].shape[0]),
        "bias": f"{prefix}linear1.bias" in state,
        "final_norm": "norm.weight" in state,
    }
    if prefix:
        inferred["num_layers"] = 1 + max(
            int(k.split(".")[1]) for k in state if k.startswith("layers.")
        )
    arch = {"activation": "relu", "layer_norm_eps": 1e-5, "norm_first": False}
    arch |= {k: v for k, v in defaults.items() if v is not None}
    arch |= inferred | sidecar
    if "nhead" not in arch:
        raise ValueError(
            f"load_torch_checkpoint: `path`={str(path)!r}: the number of heads of a state dict "
            "cannot be read from its "
            f'shapes; write it in a sidecar `{str(path)}.json` (e.g. {{"nhead": 4}}) or '
            "pass it as a default."
        )
    arch["single_layer"] = not prefix
    return arch


def _build(arch: dict):
    import torch

    layer = lambda: torch.nn.TransformerEncoderLayer(  # noqa: E731
        int(arch["d_model"]),
        int(arch["nhead"]),
        int(arch["dim_feedforward"]),
        dropout=0.0,
        activation=str(arch["activation"]),
        layer_norm_eps=float(arch["layer_norm_eps"]),
        batch_first=True,
        norm_first=bool(arch["norm_first"]),
        bias=bool(arch["bias"]),
    )
    if arch["single_layer"]:
        return layer()
    norm = None
    if arch["final_norm"]:
        norm = torch.nn.LayerNorm(int(arch["d_model"]), eps=float(arch["layer_norm_eps"]))
    return torch.nn.TransformerEncoder(
        layer(), int(arch["num_layers"]), norm=norm, enable_nested_tensor=False
    )


def load_torch_checkpoint(path, *, trust_pickle: bool = False, defaults: dict | None = None) -> Any:
    """Read a torch checkpoint file into an eval-mode ``torch.nn.Module``, safely by default.

    - A **state dict** (``torch.save(encoder.state_dict(), path)``) of a
      ``TransformerEncoder`` or ``TransformerEncoderLayer`` is read with
      ``weights_only=True`` (no code runs). The architecture is inferred from the tensor
      shapes (``d_model``, ``dim_feedforward``, ``num_layers``, ``bias``, the final norm)
      and read from a sidecar JSON ``<path>.json`` (keys :data:`TORCH_ARCHITECTURE_KEYS`;
      ``nhead`` cannot be inferred), falling back on ``defaults`` and torch's defaults.
      The weights load with ``strict=True``: a mismatch raises naming the keys.
    - A **whole module** (``torch.save(module, path)``) is a pickle whose loading can run
      code; it is refused with a ``ValueError`` saying so unless ``trust_pickle=True``.

    Args:
        path: the ``.pt``/``.pth`` file.
        trust_pickle: unpickle arbitrary objects (only for files you trust).
        defaults: architecture values used where the sidecar has none (e.g. ``{"nhead":
            4}``).

    Raises:
        ValueError: a pickled object without ``trust_pickle``, an unreadable file, a state
            dict that is not an encoder's or does not fit the architecture; each message
            names the path.

    Example:
        >>> import tempfile, pathlib, json, torch
        >>> from transflow.interop import load_torch_checkpoint
        >>> enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16,
        ...     batch_first=True), 2, enable_nested_tensor=False)
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "encoder.pt"
        >>> torch.save(enc.state_dict(), p)
        >>> _ = pathlib.Path(str(p) + ".json").write_text(json.dumps({"nhead": 2}))
        >>> type(load_torch_checkpoint(p)).__name__
        'TransformerEncoder'
    """
    import pickle

    import torch

    where = "load_torch_checkpoint"
    check_path("path", path, where)
    check_flag("trust_pickle", trust_pickle, where)
    if defaults is not None and (
        not isinstance(defaults, dict) or set(defaults) - set(TORCH_ARCHITECTURE_KEYS)
    ):
        got = sorted(defaults) if isinstance(defaults, dict) else type(defaults).__name__
        raise ValueError(
            f"{where}: `defaults` must be a dict with keys from {list(TORCH_ARCHITECTURE_KEYS)} "
            f'or None, got {got}; pass e.g. defaults={{"nhead": 4}}.'
        )
    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{where}: `path`={str(p)!r} (a torch checkpoint) does not exist.")
    try:
        obj = torch.load(str(p), weights_only=not trust_pickle, map_location="cpu")
    except pickle.UnpicklingError as e:
        if not trust_pickle and "weights_only" in str(e).lower().replace(" ", "_"):
            raise _untrusted(p, e) from None
        raise CheckpointError(f"{where}: `path`={str(p)!r} cannot be read: {e}") from e
    except (RuntimeError, EOFError, OSError) as e:
        raise CheckpointError(f"{where}: `path`={str(p)!r} cannot be read: {e}") from e
    if isinstance(obj, torch.nn.Module):
        return obj.eval()
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ValueError(
            f"{where}: `path`={str(p)!r} holds a {type(obj).__name__}, neither a module nor a "
            "state dict of tensors (save `module.state_dict()`)."
        )
    sidecar_path = pathlib.Path(str(p) + ".json")
    sidecar = {}
    if sidecar_path.is_file():
        try:
            sidecar = json.loads(sidecar_path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{where}: the sidecar of `path`, {str(sidecar_path)!r}, is not valid JSON: {e}"
            ) from e
        unknown = sorted(set(sidecar) - set(TORCH_ARCHITECTURE_KEYS))
        if unknown:
            raise ValueError(
                f"{where}: the sidecar of `path`, {str(sidecar_path)!r}, has unknown keys "
                f"{unknown}; expected a subset "
                f"of {list(TORCH_ARCHITECTURE_KEYS)}."
            )
    arch = _architecture(obj, sidecar, dict(defaults or {}), p)
    dtype = next(iter(obj.values())).dtype
    module = _build(arch).to(dtype)
    try:
        module.load_state_dict(obj, strict=True)
    except RuntimeError as e:
        raise ValueError(
            f"{where}: the state dict in `path`={str(p)!r} does not fit the architecture "
            f"{ {k: v for k, v in arch.items() if k != 'single_layer'} } "
            f"(from the state dict's shapes, {str(sidecar_path)!r} and the defaults): {e}"
        ) from e
    return module.eval()
