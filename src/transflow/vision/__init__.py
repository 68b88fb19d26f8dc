"""Vision variants of the continuous model: ViT front end/read-out and CvT (spec §4.2–4.3).

- :class:`PatchEmbedding`, :func:`patchify`: the initial condition f on a 2-D token grid;
  :class:`ClassTokenReadout`; :class:`VisionTransformer` (embedding → evolution → read-out).
- CvT: :class:`DepthwiseConv2d` (x-convolution over the token grid + BN eval),
  :class:`FeatureConv` (the literal y-convolution reading, Q7), :class:`ConvAttentionParams`,
  :func:`conv_attention`, :class:`ConvLayerControls`, :class:`ConvPreNormScheme`,
  :class:`ConvEmbedding`, :class:`CvtStageModel`.
"""

from ._cvt import (
    ConvAttentionParams as ConvAttentionParams,
)
from ._cvt import (
    ConvEmbedding as ConvEmbedding,
)
from ._cvt import (
    ConvLayerControls as ConvLayerControls,
)
from ._cvt import (
    ConvPreNormScheme as ConvPreNormScheme,
)
from ._cvt import (
    CvtStageModel as CvtStageModel,
)
from ._cvt import (
    DepthwiseConv2d as DepthwiseConv2d,
)
from ._cvt import (
    FeatureConv as FeatureConv,
)
from ._cvt import (
    conv_attention as conv_attention,
)
from ._cvt import (
    conv_output_size as conv_output_size,
)
from ._vit import (
    ClassTokenReadout as ClassTokenReadout,
)
from ._vit import (
    PatchEmbedding as PatchEmbedding,
)
from ._vit import (
    VisionTransformer as VisionTransformer,
)
from ._vit import (
    patchify as patchify,
)
