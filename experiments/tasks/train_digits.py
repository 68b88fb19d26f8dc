"""Task ``train_digits``: the scikit-learn handwritten digits (8×8) with a small
continuous ViT (patches on a 2-D token grid).

Training as optimal control (docs/spec/continuous-model.md §5) of the continuous model (patch
embedding + position embedding → N_t steps of the split scheme → mean-pool/class-token read-out),
with :func:`transflow.control.run_training` of ``TRAINING_TASKS["digits"]`` (the same code as
``python -m transflow.control digits``).
Checkpoints, resuming, files written: experiments/tasks/_training.py. The fields are in
:class:`transflow.control.DigitsConfig`; this ``Config`` derives from it and adds the claim
thresholds. Claims (a failure marks the run FAILED): the run reaches its last step and
the training loss falls (every size); ``test_accuracy ≥ min_test_accuracy`` (0.95) at full size.
"""

from __future__ import annotations

from dataclasses import dataclass

from transflow.control import DigitsConfig

from ._training import run_task

__all__ = ["Config", "run"]


@dataclass
class Config(DigitsConfig):
    """Digits classification with a small continuous ViT (defaults reach ≥ 95 %).

    The fields of :class:`transflow.control.DigitsConfig` and the claim thresholds.
    """

    min_test_accuracy: float = 0.95  # claim: test_accuracy ≥ this (full size)


def run(cfg: Config, ctx) -> dict:
    """Run the ``train_digits`` experiment (the module docstring says what it does)."""
    return run_task("digits", "digits", cfg, ctx, claims={"test_accuracy": cfg.min_test_accuracy})
