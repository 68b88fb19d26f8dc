"""The convolutional pre-norm scheme (CvT): the pre-LN step with convolutional attention."""

from __future__ import annotations

import equinox as eqx

from .._errors import check_flag, check_number, check_temperature
from ._base import AbstractODEScheme
from ._prenorm import _pre_ln, pre_ln_substep_names

__all__ = ["ConvPreNormScheme"]


class ConvPreNormScheme(AbstractODEScheme):
    """Pre-LN step with convolutional attention (CvT), extension of docs/spec/continuous-model.md
    §4.2/§4.3.

        u¹ = u⁰ + Δt 𝒜_conv(P_{S1}(u⁰)),     u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹)),

    the pre-LN step of :class:`transflow.PreNormScheme` (the same code) with
    :func:`~transflow.vision.conv_attention` (the controls' ``attn.attend``) in place of
    the attention operator; the projections use the feature weights of ``grid``
    (``grid.y_weights``) when one is given. The token-grid geometry is part of the
    discretization and lives here: ``grid_shape`` = (rows, columns) of the token grid and
    ``n_prefix`` leading tokens off the grid (the class token). Controls
    (:class:`~transflow.vision.ConvLayerControls`) are translation-invariant kernels and
    do not depend on the grid size. Order 1; no masks, not causal, not sharded.

    Sub-step names: ``ln1``, ``attention``, ``ln2``, ``ffn1`` … ``ffnJ``, ``residual``.
    """

    grid_shape: tuple[int, int] | None = eqx.field(static=True, default=None)
    n_prefix: int = eqx.field(static=True, default=0)
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)

    order = 1
    nodes = (0.5,)

    def __check_init__(self):
        owner = "ConvPreNormScheme"
        if self.grid_shape is not None:
            if not isinstance(self.grid_shape, tuple | list) or len(self.grid_shape) != 2:
                raise TypeError(
                    f"{owner}: `grid_shape` must be (rows, columns) or None, got "
                    f"{self.grid_shape!r:.40}; pass e.g. grid_shape=(4, 4)."
                )
            for side in self.grid_shape:
                check_number("grid_shape", side, owner, lower=0, integer=True, example="(4, 4)")
        check_number("n_prefix", self.n_prefix, owner, lower=0, strict=False, integer=True)
        check_flag("hardmax", self.hardmax, owner)
        check_temperature(owner, self.temperature)

    def substep_names(self, controls) -> tuple[str, ...]:
        return pre_ln_substep_names(controls)

    def advance(self, u, controls, dt, *, ops):
        if ops.causal:
            raise ValueError(
                "`causal=True` is not supported by ConvPreNormScheme: strided convolutional "
                "keys have no token order. Use PreNormScheme for causal (decoder) layers."
            )
        grid = ops.grid
        if grid is not None and grid.n_features != controls.d_model:
            raise ValueError(
                f"`grid` has {grid.n_features} features, the controls {controls.d_model}."
            )

        def attend(p1):
            return controls.attn.attend(
                p1,
                grid_shape=self.grid_shape,
                n_prefix=self.n_prefix,
                hardmax=self.hardmax,
                temperature=self.temperature,
            )

        return _pre_ln(attend, u, controls, dt, ops)
