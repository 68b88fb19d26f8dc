"""Sharded evolution over device meshes and hosts, on JAX's own distributed runtime.

- :func:`make_mesh`: a :class:`jax.sharding.Mesh` with auto (compiler-propagated) axes.
- :class:`ShardAxes`: which mesh axes split the batch, the token grid and the feature grid.
- :func:`shard_evolve`: the scheme's evolution of a batch, sharded (``method="gspmd"``:
  ``jax.jit`` + ``NamedSharding``; ``method="ring"``: ``jax.shard_map`` ring attention).
- :func:`memory_report`: per-device bytes from ``compiled.memory_analysis()``.
- :func:`to_host`, :func:`max_rel_diff`: gather a (multi-process) result; compare.

Multi-host: call ``jax.distributed.initialize(...)`` first in every process (see
``docs/parallel.md``); the mesh then spans every process's devices.
"""

from ._evolve import (
    controls_specs as controls_specs,
    lower_shard_evolve as lower_shard_evolve,
    max_rel_diff as max_rel_diff,
    memory_report as memory_report,
    shard_evolve as shard_evolve,
    to_host as to_host,
)
from ._mesh import ShardAxes as ShardAxes, as_axes as as_axes, make_mesh as make_mesh
