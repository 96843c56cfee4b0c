"""One pre-LN transformer encoder block."""

import keras

from keras_vit._remat import remat_setting
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.rms_norm import make_norm
from keras_vit.layers.rotary_attention import PARTS, RotaryAttention
from keras_vit.layers.swiglu import SwiGLU

# The options of the second generation (DINOv3, EVA-02, PE, AIMv2) and their first-generation values.
EXTENDED_DEFAULTS = dict(
    mlp_type="gelu", mlp_norm=False, attention_norm=False, biases=PARTS, mlp_bias=True, norm="layer", rope_layout=None
)


def _check_options(remat, rates, mlp_type, mlp_norm, mlp_bias):
    """The option combinations a block refuses, each in one line."""
    if remat is True and any(rates):
        dropout_rate, attention_dropout_rate, drop_path_rate = rates
        raise ValueError(
            f"remat=True needs dropout_rate, attention_dropout_rate and the drop-path rate at 0: the backward "
            f"pass recomputes the block and would draw new dropout masks. Received: dropout_rate={dropout_rate}, "
            f"attention_dropout_rate={attention_dropout_rate}, drop_path_rate={drop_path_rate}; set them to 0 "
            f"or remat='elementwise' or remat=False."
        )
    if mlp_type not in ("gelu", "swiglu"):
        raise ValueError(f"mlp_type must be 'gelu' or 'swiglu'. Received: mlp_type={mlp_type!r}")
    if mlp_type == "gelu" and (mlp_norm or not mlp_bias):
        raise ValueError("mlp_norm=True and mlp_bias=False are SwiGLU options; use mlp_type='swiglu'.")


@keras.saving.register_keras_serializable(package="keras_vit")
class EncoderBlock(keras.layers.Layer):
    """z' = z + MSA(LN(z)); out = z' + MLP(LN(z')) (paper, eq. 2-3), with dropout and stochastic depth.

    Sub-layers carry the checkpoint names: `LayerNorm_0`, `MultiHeadDotProductAttention_1`, `LayerNorm_2`,
    `MlpBlock_3`; with `layer_scale`, `LayerScale_1` and `LayerScale_3` scale the attention and MLP branches
    (z' = z + ls1 * MSA(LN(z)), as DeiT-III and DINOv2 do).

    Args:
        num_heads: attention heads.
        mlp_dim: MLP hidden width.
        dropout_rate: dropout after attention and inside the MLP.
        attention_dropout_rate: dropout on the attention weights.
        drop_path_rate: stochastic-depth rate of this block.
        layer_norm_epsilon: LayerNorm epsilon (1e-6 in the reference code; Keras' default 1e-3 breaks parity).
        gelu: "tanh", "exact" or "quick".
        layer_scale: initial LayerScale gain of both residual branches, or None for none.
        remat: what training recomputes in the backward pass instead of keeping (`keras.remat`: `jax.checkpoint`
            on JAX, `tf.recompute_grad` on TensorFlow, `torch.utils.checkpoint` on torch; the NumPy and OpenVINO
            backends cannot differentiate, and Keras makes it a no-op there):
            False: nothing.
            True or "block": the whole block from its input, for about one more forward pass of compute. Needs
            zero dropout and drop-path rates, since the recomputation would draw new random masks.
            "elementwise": both LayerNorms, the GELU and the explicit attention's softmax, each from its input;
            the matmul outputs (Q, K, V, the scores, both MLP Denses) stay kept, as JAX's `dots_saveable` policy
            keeps them, so the extra compute is elementwise only. Dropout and drop path stay outside what is
            recomputed, so any rates work. The fused attention route keeps what its kernel keeps.
            Inference and `return_attention_scores` never recompute; the forward values are the same either way.

        mlp_type: "gelu" (`MlpBlock`) or "swiglu" (`SwiGLU`).
        mlp_norm: a norm over the SwiGLU's hidden width before its last projection (EVA-02's `mlp.norm`).
        attention_norm: a norm over the attended tokens before the attention's `out` (EVA-02 CLIP's `attn.norm`).
        biases: the attention projections with a bias (`RotaryAttention`; DINOv3 and EVA-02 have no key bias).
        mlp_bias: biases in the SwiGLU (AIMv2 has none).
        norm: "layer" (LayerNorm) or "rms" (RMSNorm, AIMv2) for every norm of the block.
        rope_layout: None, or the rotation layout ("half", "interleaved") of the rotary table given to `call`.

    Call arguments:
        tokens: (B, T, D).
        return_attention_scores: also return the attention weights (B, H, T, T).
        rope: a `RotaryEmbedding` table (1, T, 2 * D_h) for the queries and keys, or None.
        key_mask: (B, T), nonzero on real tokens, or None: padded keys take no attention (NaFlex).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu="tanh",
        remat=False,
        layer_scale=None,
        mlp_type="gelu",
        mlp_norm=False,
        attention_norm=False,
        biases=PARTS,
        mlp_bias=True,
        norm="layer",
        rope_layout=None,
        **kwargs,
    ):
        remat = remat_setting(remat)
        _check_options(remat, (dropout_rate, attention_dropout_rate, drop_path_rate), mlp_type, mlp_norm, mlp_bias)
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu = gelu
        self.remat = remat
        self.layer_scale = None if layer_scale is None else float(layer_scale)
        self.extended = dict(
            mlp_type=mlp_type, mlp_norm=bool(mlp_norm), attention_norm=bool(attention_norm),
            biases=tuple(p for p in PARTS if p in biases), mlp_bias=bool(mlp_bias), norm=norm, rope_layout=rope_layout,
        )  # fmt: skip
        policy = self.dtype_policy
        self.ls_1 = self.ls_2 = None
        if self.layer_scale is not None:
            self.ls_1 = LayerScale(self.layer_scale, name="LayerScale_1", dtype=policy)
            self.ls_2 = LayerScale(self.layer_scale, name="LayerScale_3", dtype=policy)
        self.norm_1 = make_norm(norm, self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy)
        self.norm_2 = make_norm(norm, self.layer_norm_epsilon, name="LayerNorm_2", dtype=policy)
        self.attention = self._make_attention()
        self.mlp = self._make_mlp()
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)
        self.drop_path = DropPath(self.drop_path_rate, dtype=policy)

    def _make_attention(self):
        """The plain attention layer, or the rotary one where RoPE, an inner norm or a missing bias needs it."""
        options, name = self.extended, "MultiHeadDotProductAttention_1"
        if options["rope_layout"] is None and not options["attention_norm"] and options["biases"] == PARTS:
            return MultiHeadSelfAttention(
                self.num_heads, self.attention_dropout_rate, name=name, dtype=self.dtype_policy
            )
        return RotaryAttention(
            self.num_heads, biases=options["biases"], rope_layout=options["rope_layout"] or "half",
            inner_norm=options["norm"] if options["attention_norm"] else None, norm_epsilon=self.layer_norm_epsilon,
            dropout_rate=self.attention_dropout_rate, name=name, dtype=self.dtype_policy,
        )  # fmt: skip

    def _make_mlp(self):
        """The GELU MLP, or SwiGLU with its optional inner norm."""
        options = self.extended
        if options["mlp_type"] == "swiglu":
            return SwiGLU(
                self.mlp_dim, use_bias=options["mlp_bias"], norm=options["norm"] if options["mlp_norm"] else None,
                norm_epsilon=self.layer_norm_epsilon, dropout_rate=self.dropout_rate, name="MlpBlock_3",
                dtype=self.dtype_policy,
            )  # fmt: skip
        return MlpBlock(self.mlp_dim, gelu=self.gelu, dropout_rate=self.dropout_rate, name="MlpBlock_3",
                        dtype=self.dtype_policy)  # fmt: skip

    def build(self, input_shape):
        for layer in (self.norm_1, self.attention, self.norm_2, self.mlp, self.ls_1, self.ls_2):
            if layer is not None:
                layer.build(input_shape)

    def call(self, tokens, training=None, return_attention_scores=False, rope=None, key_mask=None):
        if self.remat is True and training and not return_attention_scores:
            return keras.remat(lambda x: self._forward(x, training, False, rope, key_mask))(tokens)
        return self._forward(tokens, training, return_attention_scores, rope, key_mask)

    def _forward(self, tokens, training, return_attention_scores, rope=None, key_mask=None):
        recompute = self.remat == "elementwise" and bool(training) and not return_attention_scores
        attended = self._attention(tokens, training, return_attention_scores, recompute, rope, key_mask)
        if return_attention_scores:
            attended, scores = attended
        attended = self.dropout(attended, training=training)
        if self.ls_1 is not None:
            attended = self.ls_1(attended)
        x = tokens + self.drop_path(attended, training=training)
        mlp = self._mlp(x, training, recompute)
        if self.ls_2 is not None:
            mlp = self.ls_2(mlp)
        x = x + self.drop_path(mlp, training=training)
        if return_attention_scores:
            return x, scores
        return x

    def _attention(self, tokens, training, return_attention_scores, recompute, rope=None, key_mask=None):
        """MSA(LN(z)). `recompute`: LN(z), which the Q/K/V projections need for their kernels' gradients, is
        recomputed from z in the backward pass: the `keras.remat` region ends at the projections' outputs, which
        are kept. JAX drops the projections from the recomputation (the region's output is not needed there: Ti/16's
        compiled step has 291 dots with and without it); `tf.recompute_grad` runs the region again, matmuls included,
        unless TensorFlow's graph optimiser prunes the unused outputs (not checked)."""
        extra = {} if rope is None else {"rope": rope}
        if not recompute:
            return self.attention(
                self.norm_1(tokens),
                training=training,
                return_attention_scores=return_attention_scores,
                key_mask=key_mask,
                **extra,
            )
        query, key, value = keras.remat(lambda z: self.attention.project(self.norm_1(z), **extra))(tokens)
        return self.attention.attend(query, key, value, training=training, recompute=True, key_mask=key_mask)

    def _mlp(self, x, training, recompute):
        """MLP(LN(x)); `recompute`: LN(x) recomputed as in `_attention`, up to `Dense_0`'s output, and the GELU's
        output up to `Dense_1`'s (`MlpBlock.finish`)."""
        if not recompute or not isinstance(self.mlp, MlpBlock):
            return self.mlp(self.norm_2(x), training=training)
        hidden = keras.remat(lambda z: self.mlp.dense_0(self.norm_2(z)))(x)
        return self.mlp.finish(hidden, training=training, recompute=True)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            drop_path_rate=self.drop_path_rate,
            layer_norm_epsilon=self.layer_norm_epsilon,
            gelu=self.gelu,
        )
        if self.remat:  # absent when off: configs saved before the option existed stay what they were
            config["remat"] = self.remat
        if self.layer_scale is not None:
            config["layer_scale"] = self.layer_scale
        for key, default in EXTENDED_DEFAULTS.items():  # absent at their defaults, as in first-generation files
            if self.extended[key] != default:
                config[key] = list(self.extended[key]) if key == "biases" else self.extended[key]
        return config
