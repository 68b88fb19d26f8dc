"""Saved trained models (issue 48): the models of the trained-regions study kept with the
run, reloadable without retraining.

A model is two files in a directory, named by what identifies it in the study
(``<target>_D<depth>_<kind>_seed<seed>``): ``.eqx``, the parameter leaves written by
:func:`equinox.tree_serialise_leaves`, and ``.json``, the hyperparameters that rebuild the
parameter skeleton (:func:`init_transformer` or :func:`init_mlp`; read off the parameters'
shapes when saving) with the dtype and the parameter count. :func:`save_model` writes
them, :func:`load_model` reads them back, bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import numpy as np

from ._trained import _check_int, _check_kind, init_mlp, init_transformer, n_params

__all__ = ["SavedModel", "load_model", "save_model"]

_FORMAT = 1
_TRANSFORMER_KEYS = {"embedding", "positional", "blocks", "readout_weight", "readout_bias"}


@dataclasses.dataclass(frozen=True)
class SavedModel:
    """A model reloaded by :func:`load_model`.

    Attributes:
        kind: ``"transformer"`` or ``"mlp"`` (:data:`MODEL_KINDS`).
        params: the parameter pytree (as :func:`train_model` returned it), for
            :func:`certified_regions`, :func:`model_apply`, :func:`hardmax_reading`, ….
        target: the name of the target it was trained on.
        depth: D, the number of blocks (transformer) or hidden layers (MLP).
        seed: the seed of the study's cell.
        dim: the input dimension (1 or 2).
        arch: the remaining hyperparameters of the skeleton (transformer: ``n_tokens``,
            ``width``, ``n_heads``, ``head_dim``, ``ffn_width``; MLP: ``width``).
        path: the ``.eqx`` file it was read from.
    """

    kind: str
    params: dict
    target: str
    depth: int
    seed: int
    dim: int
    arch: dict
    path: pathlib.Path


def _stem(target: str, depth: int, kind: str, seed: int) -> str:
    return f"{target}_D{depth}_{kind}_seed{seed}"


def _check_target(where: str, target) -> str:
    if not isinstance(target, str) or not target or not target.replace("_", "").isalnum():
        raise ValueError(
            f"{where}: `target` must be the target's name (letters, digits, '_'), got "
            f"{target!r}; pass e.g. target='sawtooth'."
        )
    return target


def _check_seed(where: str, seed) -> int:
    return _check_int(where, "seed", seed, 0)


def _architecture(kind: str, params) -> dict:
    """``dim``, ``depth`` and the other hyperparameters of the skeleton, read off the
    parameters' shapes; raises naming ``params`` when they are not those of ``kind``."""
    want = "init_transformer" if kind == "transformer" else "init_mlp"
    bad = ValueError(
        f"save_model: `params` must be the parameter dict of {want} (kind={kind!r}), got "
        f"{type(params).__name__}"
        + (f" with keys {sorted(map(str, params))}" if isinstance(params, dict) else "")
        + "; pass the params that train_model returned for that kind."
    )
    seq = "blocks" if kind == "transformer" else "layers"
    layers = params.get(seq) if isinstance(params, dict) else None
    if not isinstance(layers, list | tuple) or len(layers) < (1 if seq == "blocks" else 2):
        raise bad
    depth = len(layers) if seq == "blocks" else len(layers) - 1
    # the structure and the ranks do not depend on the sizes: compare with a small model
    small = _skeleton(kind, {"dim": 1, "depth": depth, "arch": _SMALL[kind]}, "float32")
    ranks = [np.ndim(a) for a in jax.tree.leaves(params)]
    if jax.tree.structure(small) != jax.tree.structure(params) or ranks != [
        np.ndim(a) for a in jax.tree.leaves(small)
    ]:
        raise bad
    if kind == "transformer":
        n_tokens, dim, width = np.shape(params["embedding"])
        n_heads, head_dim = np.shape(layers[0]["q"])
        ffn_width = np.shape(layers[0]["w1"])[1]
        arch = dict(n_tokens=n_tokens, width=width, n_heads=n_heads, head_dim=head_dim)
        arch["ffn_width"] = ffn_width
    else:
        width, dim = np.shape(layers[0]["w"])
        arch = dict(width=width)
    meta = {"dim": int(dim), "depth": depth, "arch": {k: int(v) for k, v in arch.items()}}
    skeleton = _skeleton(kind, meta, str(np.asarray(jax.tree.leaves(params)[0]).dtype))
    if any(
        a.shape != np.shape(b) for a, b in zip(jax.tree.leaves(skeleton), jax.tree.leaves(params))
    ):
        raise bad
    return meta


#: the smallest hyperparameters of each kind (the structure of a model of a given depth)
_SMALL = {
    "transformer": dict(n_tokens=2, width=1, n_heads=1, head_dim=1, ffn_width=1),
    "mlp": dict(width=1),
}


def _skeleton(kind: str, meta: dict, dtype: str):
    """The shapes and dtypes of the parameters (:class:`jax.ShapeDtypeStruct` leaves)."""
    key = jax.random.PRNGKey(0)  # the values are dropped: only the structure counts
    if kind == "transformer":
        p = init_transformer(key, dim=meta["dim"], depth=meta["depth"], **meta["arch"])
    else:
        p = init_mlp(key, dim=meta["dim"], depth=meta["depth"], **meta["arch"])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.dtype(dtype)), p)


def save_model(directory, kind: str, params, *, target: str, seed: int) -> pathlib.Path:
    """Save a trained model of :func:`init_transformer` / :func:`init_mlp` into
    ``directory`` (created if missing) as ``<target>_D<depth>_<kind>_seed<seed>.eqx``
    (the leaves, :func:`equinox.tree_serialise_leaves`) and ``.json`` (the
    hyperparameters that rebuild the skeleton, read off the shapes). Returns the ``.eqx``
    path; :func:`load_model` reads it back.

    Example:
        >>> import jax, tempfile
        >>> from transflow.expressivity import init_mlp, load_model, save_model
        >>> d = tempfile.mkdtemp()
        >>> p = init_mlp(jax.random.PRNGKey(0), dim=1, depth=2, width=4)
        >>> save_model(d, "mlp", p, target="sawtooth", seed=0).name
        'sawtooth_D2_mlp_seed0.eqx'
        >>> m = load_model(d, target="sawtooth", depth=2, kind="mlp", seed=0)
        >>> m.arch, bool((m.params["layers"][0]["w"] == p["layers"][0]["w"]).all())
        ({'width': 4}, True)
    """
    import equinox as eqx

    _check_kind("save_model", kind)
    _check_target("save_model", target)
    seed = _check_seed("save_model", seed)
    meta = _architecture(kind, params)
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = _stem(target, meta["depth"], kind, seed)
    path = directory / f"{stem}.eqx"
    eqx.tree_serialise_leaves(path, params)
    record = {
        "format": _FORMAT,
        "kind": kind,
        "target": target,
        "seed": seed,
        **meta,
        "dtype": str(np.asarray(jax.tree.leaves(params)[0]).dtype),
        "n_params": n_params(params),
    }
    (directory / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_model(directory, *, target: str, depth: int, kind: str, seed: int) -> SavedModel:
    """Reload the model that :func:`save_model` (the ``trained_regions`` experiment: its
    run directory's ``models/``) saved for ``target``, depth ``depth``, ``kind`` and
    ``seed``: the skeleton is rebuilt from the ``.json`` hyperparameters and the leaves
    are read into it, bit for bit. Raises ``FileNotFoundError`` naming the models the
    directory holds when there is none of that name.

    Example:
        >>> import jax, tempfile
        >>> from transflow.expressivity import (init_transformer, load_model, save_model,
        ...     certified_regions)
        >>> d = tempfile.mkdtemp()
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=2)
        >>> _ = save_model(d, "transformer", p, target="sawtooth", seed=0)
        >>> m = load_model(d, target="sawtooth", depth=2, kind="transformer", seed=0)
        >>> (certified_regions(m.kind, m.params, dim=m.dim).linear
        ...  == certified_regions("transformer", p, dim=1).linear)
        True
    """
    import equinox as eqx

    where = "load_model"
    _check_target(where, target)
    depth = _check_int(where, "depth", depth, 1)
    _check_kind(where, kind)
    seed = _check_seed(where, seed)
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"load_model: `directory` {str(directory)!r} is not a directory; pass the "
            "`models` directory of a trained_regions run (or where save_model wrote)."
        )
    stem = _stem(target, depth, kind, seed)
    eqx_path, json_path = directory / f"{stem}.eqx", directory / f"{stem}.json"
    if not (eqx_path.is_file() and json_path.is_file()):
        held = sorted(p.stem for p in directory.glob("*.eqx"))
        raise FileNotFoundError(
            f"load_model: no model {stem} (`target`, `depth`, `kind`, `seed`) in "
            f"{str(directory)!r}; it holds {held or 'no model'}."
        )
    meta = json.loads(json_path.read_text())
    params = eqx.tree_deserialise_leaves(eqx_path, _skeleton(kind, meta, meta["dtype"]))
    return SavedModel(
        kind=kind,
        params=params,
        target=target,
        depth=depth,
        seed=seed,
        dim=int(meta["dim"]),
        arch=dict(meta["arch"]),
        path=eqx_path,
    )
