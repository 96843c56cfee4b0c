"""The transformer's MLP block: Dense D -> M, GELU, Dense M -> D, with dropout."""

import keras
from keras import ops

from keras_vit.layers.deferred_init import build_deferred
from keras_vit.layers.device import platform

GELU_FLAVOURS = ("tanh", "exact", "quick")


def gelu(x, flavour):
    """GELU in one of `GELU_FLAVOURS`. The exact form is written with erf, as PyTorch computes it: TensorFlow's own
    (`erfc`) has no ONNX op, so a model using it could not be exported to ONNX or OpenVINO."""
    if flavour == "quick":
        return x * ops.sigmoid(1.702 * x)
    if flavour == "tanh":
        return ops.gelu(x, approximate=True)
    return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Two Dense layers (`Dense_0`, `Dense_1`, as in the checkpoints) with GELU between them.

    Args:
        mlp_dim: hidden width M.
        gelu: "tanh" (default; the approximation the released models were trained with, Flax's default)
            or "exact" (the erf form, Keras' `"gelu"`), or "quick" (OpenAI CLIP's QuickGELU, x * sigmoid(1.702 x)).
        dropout_rate: dropout after the activation and after the second Dense (training only).
    """

    def __init__(self, mlp_dim, gelu="tanh", dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        if gelu not in GELU_FLAVOURS:
            raise ValueError(f"gelu must be one of {GELU_FLAVOURS}. Received: gelu={gelu!r}")
        self.mlp_dim = int(mlp_dim)
        self.gelu = gelu
        self.dropout_rate = float(dropout_rate)
        self.dense_0 = keras.layers.Dense(self.mlp_dim, name="Dense_0", **self._dense_kwargs())
        self.dense_1 = None  # width known at build time
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def _dense_kwargs(self):
        """Each Dense its own initialiser instances (one shared instance would draw the same values twice)."""
        return dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        build_deferred(self.dense_0, input_shape)
        self.dense_1 = keras.layers.Dense(input_shape[-1], name="Dense_1", **self._dense_kwargs())
        build_deferred(self.dense_1, (*input_shape[:-1], self.mlp_dim))

    def call(self, x, training=None):
        return self.finish(self.dense_0(x), training=training)

    def finish(self, hidden, training=None, recompute=False):
        """GELU, dropout, `Dense_1` and dropout on `Dense_0`'s output. `recompute` (and no dropout in training):
        the GELU's output, which `Dense_1` needs for its kernel's gradient, is recomputed from `hidden` in the
        backward pass instead of kept (`keras.remat` around GELU and `Dense_1`; JAX drops the unused matmul from
        the recomputation, see `EncoderBlock._attention`), so of the two (B, T, M) tensors only `hidden` is kept."""
        if recompute and not (training and self.dropout_rate):
            x = keras.remat(lambda h: self.dense_1(self._activate(h)))(hidden)
            return self.dropout(x, training=training)
        x = self.dropout(self._activate(hidden), training=training)
        return self.dropout(self.dense_1(x), training=training)

    def _activate(self, x):
        """The GELU flavour; under a bfloat16 policy on a CPU computed in float32 and cast back.

        TensorFlow's CPU kernels run each of GELU's elementwise ops much slower on bfloat16 than on float32 (the
        widest tensor of the step): in float32 mixed_bfloat16 ViT-Ti/16 training ran 1.12x (1.10-1.17) faster,
        docs/performance.md. On GPUs and TPUs the compiler fuses GELU into its neighbours and the round trip
        costs bandwidth: bfloat16 GELU trained ViT-B/16 1.05x faster on an H200 (JAX, 2,560 vs 2,436 img/s).
        PyTorch's CPU GELU is fast in bfloat16 and the two casts made its step about 10% slower, so on that
        backend it stays bfloat16 everywhere.
        """
        dtype = keras.backend.standardize_dtype(x.dtype)
        upcast = dtype == "bfloat16" and keras.config.backend() != "torch" and platform(x) == "cpu"
        y = ops.cast(x, "float32") if upcast else x
        return ops.cast(gelu(y, self.gelu), dtype) if upcast else gelu(y, self.gelu)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(mlp_dim=self.mlp_dim, gelu=self.gelu, dropout_rate=self.dropout_rate)
        return config
