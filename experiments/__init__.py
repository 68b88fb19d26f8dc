"""transflow's experiments (installed as ``transflow.experiments``; in the repository the
folder ``experiments/``): the Hydra entry point ``transflow-run`` (:mod:`.run`), the run
context handed to tasks (:mod:`.context`), the config schemas (:mod:`.config`), builders
from config groups (:mod:`.builders`) and the tasks (:mod:`.tasks`). See ``docs/experiments.md``.

Importing this package imports neither JAX nor torch.
"""
