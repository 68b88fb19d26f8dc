"""Training as optimal control (docs/spec/continuous-model.md §5): models, exact gradients,
checkpoints, resume.

- Models: :class:`FlowModel` (embedding → split-scheme evolution → read-out),
  :class:`PatchEmbedding` (ViT-style, 2-D token grid), :class:`TokenEmbedding`,
  :func:`make_vit`, :func:`make_seq`.
- Gradients: ``transflow.evolve(..., remat=Remat("nested"))`` (√N_t two-level
  rematerialisation), :func:`grads_to_torch_layout` (compare with torch autograd).
- Training: :func:`make_step` (one jitted loss/grad/optax step), :func:`make_optimizer`,
  :func:`train` (checkpointing and bitwise-exact resume), :func:`evaluate`.
- Checkpoints: :func:`save_checkpoint`, :func:`load_latest_checkpoint` (atomic writes,
  SHA-256 checksums, fallback to the previous good checkpoint).
- Data: :class:`EpochOrder` (data order as a pure function of seed and step),
  :func:`load_digits_split`, :func:`sequence_batch`.
- Continuous time: :func:`adjoint_gradients` (diffrax ``RecursiveCheckpointAdjoint`` /
  ``BacksolveAdjoint`` on the attention + linear sub-model vs the discrete adjoint).
- Tasks: :func:`run_training` of a :class:`TrainingTask` (:data:`DIGITS`,
  :data:`SEQUENCE`; configs :class:`TrainConfig` → :class:`DigitsConfig`,
  :class:`SequenceConfig`), used by the Hydra tasks and by ``python -m transflow.control``.
- Continuous depth (issue 26): :func:`at_depth` (any number of steps),
  :func:`adaptive_logits` and :func:`depth_accuracy` (diffrax adaptive solves, their
  options a :class:`~transflow.Adaptive`; a reference solve and its error check,
  :class:`ReferenceTolerances`),
  :func:`depth_loss` (random depth per batch, smoothness penalty; gradients by
  backpropagation, checkpointing or the continuous adjoint, :func:`flow_logits`),
  :data:`DEPTH_DIGITS`, :data:`DEPTH_TEXT` (a character-level LM on ``pydoc_data.topics``,
  bits per character, :func:`make_char_lm`; ``corpus="stdlib"``: the standard library's
  ``.py`` files split by file, :func:`stdlib_files`), and its baselines:
  :func:`text_baselines` (interpolated Kneser–Ney :class:`CharNgram` models, the
  train/validation :func:`window_overlap`, :func:`baselines_table`),
  (:class:`DepthDigitsConfig`: digits with controls θ(t) from
  :mod:`transflow.continuous`).
- Figures: :func:`transflow.plotting.plot_training_curves` of :func:`curves_from_history`.
"""

from .._integrate import ReferenceTolerances as ReferenceTolerances
from ..models._flow import (
    FlowModel as FlowModel,
    PatchEmbedding as PatchEmbedding,
    TokenEmbedding as TokenEmbedding,
    make_seq as make_seq,
    make_vit as make_vit,
    patchify as patchify,
)
from ._adjoint import (
    AttentionLinearControls as AttentionLinearControls,
    adjoint_gradients as adjoint_gradients,
    continuous_loss as continuous_loss,
    discrete_loss as discrete_loss,
)
from ._at_depth import (
    GRADIENTS as GRADIENTS,
    adaptive_logits as adaptive_logits,
    at_depth as at_depth,
    depth_accuracy as depth_accuracy,
    depth_loss as depth_loss,
    flow_logits as flow_logits,
    kink_straddles as kink_straddles,
)
from ._checkpoint import (
    CheckpointError as CheckpointError,
    list_checkpoints as list_checkpoints,
    load_latest_checkpoint as load_latest_checkpoint,
    save_checkpoint as save_checkpoint,
)
from ._curves import curves_from_history as curves_from_history
from ._data import (
    EpochOrder as EpochOrder,
    load_digits_split as load_digits_split,
    sequence_batch as sequence_batch,
)
from ._memory import gradient_peak_rss as gradient_peak_rss
from ._ngram import (
    CharNgram as CharNgram,
    baselines_table as baselines_table,
    text_baselines as text_baselines,
    window_overlap as window_overlap,
)
from ._tasks import (
    DEPTH_ACTIVATIONS as DEPTH_ACTIVATIONS,
    DEPTH_DIGITS as DEPTH_DIGITS,
    DIGITS as DIGITS,
    SEQUENCE as SEQUENCE,
    TRAINING_TASKS as TRAINING_TASKS,
    DepthDigitsConfig as DepthDigitsConfig,
    DigitsConfig as DigitsConfig,
    Problem as Problem,
    SequenceConfig as SequenceConfig,
    TrainConfig as TrainConfig,
    TrainingTask as TrainingTask,
    checkpoint_dir_for as checkpoint_dir_for,
    load_trained as load_trained,
    run_training as run_training,
)
from ._text import (
    CORPORA as CORPORA,
    DEPTH_TEXT as DEPTH_TEXT,
    STDLIB_EXCLUDED_DIRS as STDLIB_EXCLUDED_DIRS,
    DepthTextConfig as DepthTextConfig,
    TextSplit as TextSplit,
    bits_per_char as bits_per_char,
    load_text_split as load_text_split,
    make_char_lm as make_char_lm,
    stdlib_files as stdlib_files,
    text_windows as text_windows,
    validation_windows as validation_windows,
)
from ._torch_layout import grads_to_torch_layout as grads_to_torch_layout
from ._train import (
    TrainResult as TrainResult,
    cross_entropy_loss as cross_entropy_loss,
    evaluate as evaluate,
    make_optimizer as make_optimizer,
    make_step as make_step,
    train as train,
)
