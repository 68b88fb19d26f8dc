"""Every architecture of transflow, one module per family (docs/architectures.md).

A model is an ``equinox.Module`` that builds an initial condition f (or takes one), evolves
it with a splitting scheme of the continuous model (docs/spec/continuous-model.md §3) and
reads the final state out. :mod:`transflow.interop` converts PyTorch/HuggingFace modules
into these classes; this package imports nothing from it.

- Encoders: :class:`SplitTransformer` (a stack of layer controls + a scheme: the torch
  encoder, the ViT/GPT-2/BERT/Llama layer stacks).
- Encoder–decoder: :class:`SplitDecoder`, :class:`SplitEncoderDecoder`,
  :class:`DecoderLayerControls` (``torch.nn.TransformerDecoder``/``Transformer``).
- Causal decoders: :class:`CausalDecoder` (GPT-2: :class:`TokenEmbedding` →
  :class:`CausalScheme` steps), :class:`RMSDecoder` (Llama, Mistral, Qwen2).
- Text encoders: :class:`TextEncoder` (BERT, RoBERTa, DistilBERT; :class:`TextEmbedding`).
- T5: :class:`T5Encoder`, :class:`T5EncoderDecoder` (stacks :class:`T5Stack` of
  :class:`T5LayerControls` sharing one :class:`RelativePositionBias`).
- Task heads: :class:`HeadModel` (a base model, then a :class:`DenseHead` read-out).
- Vision: :class:`VisionTransformer` (:class:`PatchEmbedding`,
  :class:`ClassTokenReadout`), :class:`CvtStageModel`, :class:`CvtModel`.
- Trainable: :class:`FlowModel` (embedding → evolution → read-out; :func:`make_vit`,
  :func:`make_seq`), the model of :mod:`transflow.control`.

The old paths (``transflow.SplitTransformer``, ``transflow.vision.*``,
``transflow.control.FlowModel``, ``transflow.interop.TextEncoder``, …) re-export these.

Example:
    >>> from transflow import models
    >>> models.SplitTransformer is __import__("transflow").SplitTransformer
    True
"""

from ._causal import (
    CausalDecoder as CausalDecoder,
    CausalScheme as CausalScheme,
    TokenEmbedding as TokenEmbedding,
)
from ._cvt import CvtModel as CvtModel, CvtStageModel as CvtStageModel
from ._decoder import (
    DecoderLayerControls as DecoderLayerControls,
    SplitDecoder as SplitDecoder,
    SplitEncoderDecoder as SplitEncoderDecoder,
)
from ._encoder import SplitTransformer as SplitTransformer
from ._flow import (
    THETA_AT as THETA_AT,
    FlowModel as FlowModel,
    make_seq as make_seq,
    make_vit as make_vit,
)
from ._heads import (
    AbstractLanguageModel as AbstractLanguageModel,
    DenseHead as DenseHead,
    HeadModel as HeadModel,
)
from ._rms import RMSDecoder as RMSDecoder
from ._t5 import (
    RelativePositionBias as RelativePositionBias,
    T5Encoder as T5Encoder,
    T5EncoderDecoder as T5EncoderDecoder,
    T5LayerControls as T5LayerControls,
    T5Stack as T5Stack,
    relative_position_buckets as relative_position_buckets,
)
from ._text import TextEmbedding as TextEmbedding, TextEncoder as TextEncoder
from ._vit import (
    ClassTokenReadout as ClassTokenReadout,
    PatchEmbedding as PatchEmbedding,
    VisionTransformer as VisionTransformer,
)

__all__ = [
    "AbstractLanguageModel",
    "CausalDecoder",
    "CausalScheme",
    "ClassTokenReadout",
    "CvtModel",
    "CvtStageModel",
    "DecoderLayerControls",
    "DenseHead",
    "FlowModel",
    "HeadModel",
    "PatchEmbedding",
    "RMSDecoder",
    "SplitDecoder",
    "SplitEncoderDecoder",
    "SplitTransformer",
    "RelativePositionBias",
    "T5Encoder",
    "T5EncoderDecoder",
    "T5LayerControls",
    "T5Stack",
    "TextEmbedding",
    "TextEncoder",
    "THETA_AT",
    "TokenEmbedding",
    "VisionTransformer",
    "make_seq",
    "make_vit",
    "relative_position_buckets",
]
