"""Vision variants of the continuous model: ViT front end/read-out and CvT
(docs/spec/continuous-model.md §4.2–4.3).

- :class:`PatchEmbedding`, :func:`patchify`: the initial condition f on a 2-D token grid;
  :class:`ClassTokenReadout`; :class:`VisionTransformer` (embedding → evolution → read-out).
- CvT: :class:`DepthwiseConv2d` (x-convolution over the token grid + BN eval),
  :class:`FeatureConv` (the literal y-convolution reading, Q7), :class:`ConvAttentionParams`,
  :func:`conv_attention`, :class:`ConvLayerControls`, :class:`ConvPreNormScheme`,
  :class:`ConvEmbedding`, :class:`CvtStageModel`, :class:`CvtModel` (all stages).
"""

from ..models._cvt import (
    ConvAttentionParams as ConvAttentionParams,
    ConvEmbedding as ConvEmbedding,
    ConvLayerControls as ConvLayerControls,
    ConvPreNormScheme as ConvPreNormScheme,
    CvtModel as CvtModel,
    CvtStageModel as CvtStageModel,
    DepthwiseConv2d as DepthwiseConv2d,
    FeatureConv as FeatureConv,
    conv_attention as conv_attention,
    conv_output_size as conv_output_size,
)
from ..models._vit import (
    ClassTokenReadout as ClassTokenReadout,
    PatchEmbedding as PatchEmbedding,
    VisionTransformer as VisionTransformer,
    patchify as patchify,
)
