"""The Hydra config tree of ``transflow-run``, shipped as package data (``transflow.configs``).

This file only makes the folder an importable package so that the installed toolkit finds
its configs with :mod:`importlib.resources`; the configs are the YAML files beside it.
"""
