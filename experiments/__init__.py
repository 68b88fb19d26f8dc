"""transflow's experiments: the Hydra entry point ``transflow-run`` (:mod:`experiments.run`),
the run context handed to tasks (:mod:`experiments.context`), the config schemas
(:mod:`experiments.config`), builders from config groups (:mod:`experiments.builders`)
and the tasks (:mod:`experiments.tasks`). See ``docs/experiments.md``.

Importing this package imports neither JAX nor torch.
"""
