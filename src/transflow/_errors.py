"""Input checks shared by the public API.

Every check raises with the argument's name, what was expected, what was got, and how to
fix it. Static checks (rank, shape, dtype) run in Python, before any compilation; the
value check for non-finite entries uses :func:`equinox.error_if` so that it survives
``jax.jit`` and ``jax.vmap``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np


def check_array(
    name: str,
    x: Any,
    *,
    ndim: int | None = None,
    shape: tuple[int | None, ...] | None = None,
    floating: bool = True,
) -> None:
    """Raise a clear error if ``x`` is not an array of the expected rank/shape/dtype."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(
            f"`{name}` must be an array (jax.Array or numpy.ndarray); got {type(x).__name__}. "
            "Convert it with `jnp.asarray(...)`."
        )
    if ndim is not None and len(x.shape) != ndim:
        hint = ""
        if ndim == 2 and len(x.shape) == 3:
            hint = " transflow acts on one sequence; batch with `jax.vmap(model)(u)`."
        raise ValueError(
            f"`{name}` must have rank {ndim}, got shape {tuple(x.shape)} "
            f"(rank {len(x.shape)}).{hint}"
        )
    if shape is not None:
        for axis, (want, got) in enumerate(zip(shape, x.shape)):
            if want is not None and want != got:
                raise ValueError(
                    f"`{name}` has shape {tuple(x.shape)}; expected size {want} on axis {axis} "
                    f"(expected shape {tuple('*' if s is None else s for s in shape)})."
                )
    if floating and not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"`{name}` must have a floating dtype (float32 or float64), got {x.dtype}. "
            f"Cast it first, e.g. `{name}.astype(jnp.float32)`."
        )


def check_finite(name: str, x):
    """Return ``x``, raising at run time (also under jit) if it holds NaN or Inf."""
    if isinstance(x, np.ndarray):
        if not np.all(np.isfinite(x)):
            raise ValueError(f"`{name}` contains NaN or Inf; expected finite values.")
        return x
    return eqx.error_if(
        x, ~jnp.all(jnp.isfinite(x)), f"`{name}` contains NaN or Inf; expected finite values."
    )


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not (isinstance(value, int | float) and ok and np.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"`{name}` must be a finite number {bound}, got {value!r}.")
