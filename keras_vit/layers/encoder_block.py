"""One pre-LN transformer encoder block."""

import keras

from keras_vit._remat import remat_setting
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import MlpBlock


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

    Call arguments:
        tokens: (B, T, D).
        return_attention_scores: also return the attention weights (B, H, T, T).
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
        **kwargs,
    ):
        remat = remat_setting(remat)
        if remat is True and (dropout_rate or attention_dropout_rate or drop_path_rate):
            raise ValueError(
                f"remat=True needs dropout_rate, attention_dropout_rate and the drop-path rate at 0: the backward "
                f"pass recomputes the block and would draw new dropout masks. Received: dropout_rate={dropout_rate}, "
                f"attention_dropout_rate={attention_dropout_rate}, drop_path_rate={drop_path_rate}; set them to 0 "
                f"or remat='elementwise' or remat=False."
            )
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
        policy = self.dtype_policy
        self.ls_1 = self.ls_2 = None
        if self.layer_scale is not None:
            self.ls_1 = LayerScale(self.layer_scale, name="LayerScale_1", dtype=policy)
            self.ls_2 = LayerScale(self.layer_scale, name="LayerScale_3", dtype=policy)
        self.norm_1 = LayerNorm(self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy)
        self.attention = MultiHeadSelfAttention(
            self.num_heads, self.attention_dropout_rate, name="MultiHeadDotProductAttention_1", dtype=policy
        )
        self.norm_2 = LayerNorm(self.layer_norm_epsilon, name="LayerNorm_2", dtype=policy)
        self.mlp = MlpBlock(self.mlp_dim, gelu=gelu, dropout_rate=self.dropout_rate, name="MlpBlock_3", dtype=policy)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)
        self.drop_path = DropPath(self.drop_path_rate, dtype=policy)

    def build(self, input_shape):
        for layer in (self.norm_1, self.attention, self.norm_2, self.mlp, self.ls_1, self.ls_2):
            if layer is not None:
                layer.build(input_shape)

    def call(self, tokens, training=None, return_attention_scores=False, key_mask=None):
        if self.remat is True and training and not return_attention_scores:
            return keras.remat(lambda x: self._forward(x, training, False, key_mask))(tokens)
        return self._forward(tokens, training, return_attention_scores, key_mask)

    def _forward(self, tokens, training, return_attention_scores, key_mask=None):
        recompute = self.remat == "elementwise" and bool(training) and not return_attention_scores
        attended = self._attention(tokens, training, return_attention_scores, recompute, key_mask)
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

    def _attention(self, tokens, training, return_attention_scores, recompute, key_mask=None):
        """MSA(LN(z)). `recompute`: LN(z), which the Q/K/V projections need for their kernels' gradients, is
        recomputed from z in the backward pass: the `keras.remat` region ends at the projections' outputs, which
        are kept. JAX drops the projections from the recomputation (the region's output is not needed there: Ti/16's
        compiled step has 291 dots with and without it); `tf.recompute_grad` runs the region again, matmuls included,
        unless TensorFlow's graph optimiser prunes the unused outputs (not checked)."""
        if not recompute:
            return self.attention(
                self.norm_1(tokens),
                training=training,
                return_attention_scores=return_attention_scores,
                key_mask=key_mask,
            )
        query, key, value = keras.remat(lambda z: self.attention.project(self.norm_1(z)))(tokens)
        return self.attention.attend(query, key, value, training=training, recompute=True, key_mask=key_mask)

    def _mlp(self, x, training, recompute):
        """MLP(LN(x)); `recompute`: LN(x) recomputed as in `_attention`, up to `Dense_0`'s output, and the GELU's
        output up to `Dense_1`'s (`MlpBlock.finish`)."""
        if not recompute:
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
        return config
