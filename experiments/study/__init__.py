"""Seeded studies: the declared design and claims (:mod:`.protocol`, JAX-free), the one
job loop (:mod:`.runner`: a record per (cell, seed) job, reused by digest) and the shared
report and summary pieces (:mod:`.report`). Import from the modules; :mod:`.runner`'s
docstring is the API a study task uses."""

__all__: list[str] = []
