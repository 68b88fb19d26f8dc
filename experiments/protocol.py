"""Moved to :mod:`transflow.experiments.study.protocol`; kept for ``tasks/schemes.py``
until it runs on :mod:`transflow.experiments.study.runner`."""

from .study.protocol import *  # noqa: F403
from .study.protocol import __all__  # noqa: F401
