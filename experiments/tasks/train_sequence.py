"""Task ``train_sequence``: sorting (or reversing) a short random sequence, a
synthetic task where every output token needs attention over all tokens.

Training as optimal control (docs/spec/continuous-model.md §5) of the continuous model (token +
position embedding on a 1-D token grid → N_t steps of the split scheme → per-token read-out), with
:func:`transflow.control.run_training` of ``TRAINING_TASKS["sequence"]`` (the same code as
``python -m transflow.control sequence``).
Checkpoints, resuming, files written: experiments/tasks/_training.py. The fields are in
:class:`transflow.control.SequenceConfig`; this ``Config`` derives from it and adds the claim
thresholds. Claims (a failure marks the run FAILED): the run reaches its last step and
the training loss falls (every size); ``test_accuracy ≥ min_test_accuracy`` (0.99) and
``eval_sequence_accuracy ≥ min_sequence_accuracy`` (0.95) at full size.
"""

from __future__ import annotations

from dataclasses import dataclass

from transflow.control import SequenceConfig

from ._training import run_task

__all__ = ["Config", "run"]


@dataclass
class Config(SequenceConfig):
    """Sorting (or reversing) a random sequence: each output token needs attention.

    The fields of :class:`transflow.control.SequenceConfig` and the claim thresholds.
    """

    min_test_accuracy: float = 0.99  # claim: per-token test_accuracy ≥ this (full size)
    min_sequence_accuracy: float = 0.95  # claim: eval_sequence_accuracy ≥ this (full size)


def run(cfg: Config, ctx) -> dict:
    """Run the ``train_sequence`` experiment (the module docstring says what it does)."""
    claims = {"test_accuracy": cfg.min_test_accuracy}
    claims["eval_sequence_accuracy"] = cfg.min_sequence_accuracy
    return run_task("sequence", "sort", cfg, ctx, claims=claims)
