"""keras_vit.inspect against independent numpy computations (attention, rollout, distance, similarity, PCA)."""

import itertools
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import inspect as vit_inspect
from tests import support
from tests.support import numpy_vit
from tests.support.checkpoints import vit_checkpoint


def _images(n, size=(32, 32), seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


def _set_query_key(model, scale):
    """Sets every block's query and key kernels to `scale` * identity, with zero biases.

    With one head the scores are scale**2 * <x_i, x_j> / sqrt(D) for the LayerNorm outputs x, which all have
    norm sqrt(D) (LayerNorm's scale starts at 1 and its bias at 0); by Cauchy-Schwarz each row's diagonal is
    its strict maximum for distinct tokens, so a large scale makes the softmax one-hot on the diagonal:
    identity attention, produced by the model's own attention code. A scale of 0 zeroes every score: uniform
    attention over all tokens. The tests check the weights they get, so a failed construction cannot pass.
    """
    for i in range(model.config.num_layers):
        attention = model.get_layer(f"encoderblock_{i}").attention
        d, heads, head_dim = attention.query_kernel.shape
        eye = np.eye(d, heads * head_dim, dtype=np.float32).reshape(d, heads, head_dim)
        for part in ("query", "key"):
            getattr(attention, f"{part}_kernel").assign(scale * eye)
            getattr(attention, f"{part}_bias").assign(np.zeros((heads, head_dim), np.float32))


def _numpy_attention_weights(images, ckpt, num_layers, patch):
    """Per-layer softmax weights of the numpy reference ViT (tests/support/numpy_vit.py primitives), (L, B, H, T, T)."""
    params = {k: np.asarray(v, np.float64) for k, v in ckpt.items()}
    kernel = params["embedding/kernel"]
    z = numpy_vit.patchify(np.asarray(images, np.float64), patch) @ kernel.reshape(-1, kernel.shape[-1])
    z = z + params["embedding/bias"]
    z = np.concatenate([np.broadcast_to(params["cls"], (len(z), 1, z.shape[-1])), z], axis=1)
    z = z + params["Transformer/posembed_input/pos_embedding"]
    layers = []
    for i in range(num_layers):
        p = f"Transformer/encoderblock_{i}"
        a = f"{p}/MultiHeadDotProductAttention_1"
        y = numpy_vit.layer_norm(z, params[f"{p}/LayerNorm_0/scale"], params[f"{p}/LayerNorm_0/bias"])
        heads, head_dim = params[f"{a}/query/bias"].shape
        weights = []
        for h in range(heads):
            q = y @ params[f"{a}/query/kernel"][:, h] + params[f"{a}/query/bias"][h]
            k = y @ params[f"{a}/key/kernel"][:, h] + params[f"{a}/key/bias"][h]
            weights.append(numpy_vit.softmax(q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)))
        layers.append(np.stack(weights, axis=1))
        z = z + numpy_vit.attention(y, params, a)
        y = numpy_vit.layer_norm(z, params[f"{p}/LayerNorm_2/scale"], params[f"{p}/LayerNorm_2/bias"])
        y = numpy_vit.gelu(y @ params[f"{p}/MlpBlock_3/Dense_0/kernel"] + params[f"{p}/MlpBlock_3/Dense_0/bias"])
        z = z + y @ params[f"{p}/MlpBlock_3/Dense_1/kernel"] + params[f"{p}/MlpBlock_3/Dense_1/bias"]
    return np.stack(layers)


def _loop_rollout(attentions):
    """Rollout written out with loops, row by row (independent of the vectorised implementation)."""
    layers, batch, heads, t, _ = attentions.shape
    out = np.zeros((batch, t, t))
    for b in range(batch):
        joint = np.eye(t)
        for layer in range(layers):
            a = sum(attentions[layer, b, h] for h in range(heads)) / heads + np.eye(t)
            for row in range(t):
                a[row] = a[row] / a[row].sum()
            joint = a @ joint
        out[b] = joint
    return out


def _mean_grid_distance(gh, gw):
    """Mean Euclidean distance between two cells drawn uniformly from a gh x gw grid (self-pairs included)."""
    cells = list(itertools.product(range(gh), range(gw)))
    total = sum(math.hypot(r1 - r2, c1 - c2) for (r1, c1), (r2, c2) in itertools.product(cells, cells))
    return total / len(cells) ** 2


# ----- attention weights -----


@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_attention_weights_match_numpy_reference(tmp_path, grid):
    rng = np.random.default_rng(3)
    ckpt = vit_checkpoint(rng, hidden=32, layers=2, heads=2, mlp=64, patch=8, grid=grid, classes=10)
    np.savez(tmp_path / "ckpt.npz", **ckpt)
    size = (grid[0] * 8, grid[1] * 8)
    model = keras_vit.create_model("testing", image_size=size, mlp_dim=64)
    keras_vit.load_npz(model, tmp_path / "ckpt.npz", checkpoint_grid=grid)
    images = _images(3, size)
    got = vit_inspect.attention_weights(model, images, batch_size=2)  # two forward passes, concatenated
    assert got.shape == (2, 3, 2, 1 + grid[0] * grid[1], 1 + grid[0] * grid[1]) and got.dtype == np.float32
    np.testing.assert_allclose(got, _numpy_attention_weights(images, ckpt, 2, 8), atol=1e-5)


def test_attention_weights_of_a_mixed_precision_model_are_float32():
    model = keras_vit.create_model("testing", dtype="mixed_bfloat16")
    weights = vit_inspect.attention_weights(model, _images(2))
    assert weights.dtype == np.float32 and weights.shape == (2, 2, 2, 17, 17)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=2e-2)  # bfloat16 rows: ~3 significant digits


def test_attention_weights_reject_bad_input():
    model = keras_vit.create_model("testing")
    with pytest.raises(ValueError, match=r"\(batch, 32, 32, 3\).*received shape \(2, 48, 48, 3\)"):
        vit_inspect.attention_weights(model, _images(2, (48, 48)))
    with pytest.raises(ValueError, match=r"scaled to \[-1, 1\]"):
        vit_inspect.attention_weights(model, _images(1) * 127.5 + 127.5)
    with pytest.raises(ValueError, match="not a keras_vit Vision Transformer"):
        vit_inspect.attention_weights(keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten()]), _images(1))
    uint8 = np.full((1, 32, 32, 3), 255, np.uint8)  # uint8 is scaled by the project's preprocessing
    np.testing.assert_allclose(
        vit_inspect.attention_weights(model, uint8),
        vit_inspect.attention_weights(model, np.ones((1, 32, 32, 3))),
        atol=1e-6,
    )


# ----- rollout -----


def test_rollout_of_hand_set_matrices():
    # Rows that do not sum to one: add I, renormalise each row. Hand-computed:
    # A1 + I = [[3, 0], [1, 2]] -> [[1, 0], [1/3, 2/3]];  A2 + I = [[1, 1], [0, 2]] -> [[1/2, 1/2], [0, 1]].
    a1 = np.array([[2.0, 0.0], [1.0, 1.0]])
    a2 = np.array([[0.0, 1.0], [0.0, 1.0]])
    joint = vit_inspect.rollout(np.stack([a1, a2])[:, None, None])
    # Joint = A2' @ A1' (the last layer on the left).
    expected = np.array([[0.5, 0.5], [0.0, 1.0]]) @ np.array([[1.0, 0.0], [1 / 3, 2 / 3]])
    np.testing.assert_allclose(joint[0], expected, atol=1e-12)
    assert not np.allclose(joint[0], np.array([[1.0, 0.0], [1 / 3, 2 / 3]]) @ np.array([[0.5, 0.5], [0.0, 1.0]]))

    # Random positive matrices (rows not normalised), 3 layers, 2 images, 3 heads, class token + 2x3 grid.
    rng = np.random.default_rng(0)
    attentions = rng.uniform(0.0, 2.0, (3, 2, 3, 7, 7))
    result = vit_inspect.attention_rollout(attentions, num_prefix_tokens=1, grid_size=(2, 3), image_size=(16, 24))
    reference = _loop_rollout(attentions)
    np.testing.assert_allclose(result.joint, reference, atol=1e-12)
    np.testing.assert_allclose(result.joint.sum(-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(result.grid, reference[:, 0, 1:].reshape(2, 2, 3), atol=1e-12)
    assert result.image.shape == (2, 16, 24)
    upsampled = np.einsum("hi,bij,wj->bhw", _bilinear_matrix(2, 16), result.grid, _bilinear_matrix(3, 24))
    np.testing.assert_allclose(result.image, upsampled, atol=1e-6)

    with pytest.raises(ValueError, match="pass a model"):
        vit_inspect.attention_rollout(attentions, np.zeros((2, 16, 24, 3)))

    # Without a class token the map is the mean of all rows of the joint attention.
    patches = attentions[..., 1:, 1:]
    with pytest.raises(ValueError, match="grid_size"):
        vit_inspect.attention_rollout(patches, num_prefix_tokens=0)  # 6 tokens: not a square grid
    np.testing.assert_allclose(
        vit_inspect.attention_rollout(patches, num_prefix_tokens=0, grid_size=(2, 3)).grid,
        _loop_rollout(patches).mean(axis=1).reshape(2, 2, 3),
        atol=1e-12,
    )


def _bilinear_matrix(n_in, n_out):
    """Half-pixel-centre linear interpolation weights (n_out, n_in), edges clamped."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = min(max((i + 0.5) * n_in / n_out - 0.5, 0.0), n_in - 1)
        lo = math.floor(src)
        hi = min(lo + 1, n_in - 1)
        m[i, lo] += 1 - (src - lo)
        m[i, hi] += src - lo
    return m


def test_identity_attention_rolls_out_onto_the_class_token():
    model = keras_vit.create_model("testing", num_heads=1)
    _set_query_key(model, 100.0)
    images = _images(2)
    attentions = vit_inspect.attention_weights(model, images)
    np.testing.assert_allclose(attentions, np.broadcast_to(np.eye(17), attentions.shape), atol=1e-6)
    result = vit_inspect.attention_rollout(model, images)
    np.testing.assert_allclose(result.joint[:, 0, 0], 1.0, atol=1e-5)  # all on the class token's own position
    np.testing.assert_allclose(result.grid, 0.0, atol=1e-5)
    np.testing.assert_allclose(result.image, 0.0, atol=1e-5)
    assert result.grid.shape == (2, 4, 4) and result.image.shape == (2, 32, 32)
    # Reference point: with random attention, the class token's rollout does reach the patches.
    assert vit_inspect.attention_rollout(keras_vit.create_model("testing"), images).grid.sum() > 0.1


# ----- mean attention distance -----


def test_identity_attention_has_zero_distance():
    model = keras_vit.create_model("testing", num_heads=1)
    _set_query_key(model, 100.0)
    distance = vit_inspect.mean_attention_distance(model, _images(2))
    assert distance.shape == (2, 1)
    np.testing.assert_allclose(distance, 0.0, atol=1e-4)


@pytest.mark.parametrize(
    "overrides, grid, pixels",
    [
        (dict(), (4, 4), 8),
        (dict(image_size=(24, 40)), (3, 5), 8),
        (dict(class_token=False, pooling="gap"), (4, 4), 8),
        (dict(image_size=48, patch_size=16), (3, 3), 16),
    ],
)
def test_uniform_attention_distance_is_the_mean_grid_distance(overrides, grid, pixels):
    model = keras_vit.create_model("testing", **overrides)
    _set_query_key(model, 0.0)
    distance = vit_inspect.mean_attention_distance(model, _images(2, model.config.image_size))
    assert distance.shape == (2, 2)
    np.testing.assert_allclose(distance, _mean_grid_distance(*grid) * pixels, rtol=1e-5)


def test_hybrid_distance_counts_resnet_stride_pixels():
    # R50+B/16 shape with a 1-unit-per-stage stem and a 2-layer, 32-wide transformer: patch 1 on a stride-16 map.
    model = keras_vit.create_model(
        "R50+B/16",
        image_size=(32, 48),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        mlp_dim=64,
        resnet_layers=(1, 1, 1),
        num_classes=0,
    )
    _set_query_key(model, 0.0)
    layout = vit_inspect.token_layout(model)
    assert layout.grid_size == (2, 3) and layout.pixels_per_token == (16, 16)
    distance = vit_inspect.mean_attention_distance(model, _images(1, (32, 48)))
    np.testing.assert_allclose(distance, _mean_grid_distance(2, 3) * 16, rtol=1e-5)
    assert vit_inspect.attention_rollout(model, _images(1, (32, 48))).image.shape == (1, 32, 48)
    with pytest.raises(ValueError, match="hybrid.*layer='conv_root'"):
        vit_inspect.patch_embedding_components(model)
    tiles = vit_inspect.patch_embedding_components(model, k=5, layer="conv_root")
    assert tiles.shape == (5, 7, 7, 3) and tiles.min() >= 0 and tiles.max() <= 1


def test_distance_renormalises_over_patch_keys():
    # One query patch of a 1x3 grid (patch 10 px) gives 0.5 to the class token and 0.25 to each of the other
    # two patches: renormalised over the patches, its distance is (10 + 20) / 2 = 15.
    attention = np.zeros((1, 1, 1, 4, 4))
    attention[0, 0, 0, 1] = [0.5, 0.0, 0.25, 0.25]  # query: patch 0
    attention[0, 0, 0, 2] = [0.0, 0.0, 1.0, 0.0]  # patch 1 on itself: 0
    attention[0, 0, 0, 3] = [0.0, 1.0, 0.0, 0.0]  # patch 2 on patch 0: 20
    attention[0, 0, 0, 0] = [0.0, 0.0, 0.0, 1.0]  # the class query is ignored
    distance = vit_inspect.attention_distance(attention, (1, 3), (10, 10), num_prefix_tokens=1)
    np.testing.assert_allclose(distance, [[(15.0 + 0.0 + 20.0) / 3]])


# ----- embeddings -----


def _sinusoidal_table(gh, gw, width):
    """Own 2-D sinusoidal table: half the channels code the row, half the column, with frequencies low enough
    (at most pi / (g - 1) per cell) that every cosine term falls monotonically across the grid."""
    quarter = width // 4
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    top = math.pi / (max(gh, gw) - 1)
    freqs = top * 0.3 ** np.arange(quarter)
    parts = []
    for coord in (rows.reshape(-1, 1), cols.reshape(-1, 1)):
        parts += [np.sin(coord * freqs), np.cos(coord * freqs)]
    return np.concatenate(parts, axis=1)


def test_position_embedding_similarity_of_a_sinusoidal_table():
    model = keras_vit.create_model("testing", image_size=(48, 40), hidden_size=64)  # grid 6 x 5
    gh, gw = 6, 5
    table = _sinusoidal_table(gh, gw, 64)
    cls_row = np.full((1, 64), 7.0)  # must be ignored
    model.get_layer("posembed_input").pos_embedding.assign(np.concatenate([cls_row, table])[None].astype(np.float32))
    sim = vit_inspect.position_embedding_similarity(model)
    assert sim.shape == (gh, gw, gh, gw)
    for (i, j), (k, m) in itertools.product(itertools.product(range(gh), range(gw)), repeat=2):
        a, b = table[i * gw + j], table[k * gw + m]
        assert sim[i, j, k, m] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), abs=1e-6)
    for i, j in itertools.product(range(gh), range(gw)):
        assert sim[i, j, i, j] == pytest.approx(1.0, abs=1e-6)
        along_row = sim[i, j, i, :]  # falls off with |column distance| on both sides
        along_col = sim[i, j, :, j]
        assert np.all(np.diff(along_row[j:]) < 0) and np.all(np.diff(along_row[: j + 1]) > 0)
        assert np.all(np.diff(along_col[i:]) < 0) and np.all(np.diff(along_col[: i + 1]) > 0)


def test_patch_embedding_components_recover_planted_directions():
    model = keras_vit.create_model("testing", hidden_size=64)
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((8 * 8 * 3, 3)))[0].T  # 3 orthonormal filter directions
    weights = rng.standard_normal((64, 3)) * [5.0, 2.0, 0.5]  # decreasing spread along them
    filters = weights @ basis + 0.3  # plus a common offset, which PCA removes
    model.get_layer("embedding").kernel.assign(filters.T.reshape(8, 8, 3, 64).astype(np.float32))
    tiles, ratio = vit_inspect.patch_embedding_components(model, k=3, return_variance=True)
    assert tiles.shape == (3, 8, 8, 3) and tiles.dtype == np.float32
    assert tiles.min() == 0.0 and tiles.max() == 1.0
    raw, _ = vit_inspect.filter_components(filters.T.reshape(8, 8, 3, 64), 3)
    for n in range(3):
        assert abs(raw[n].ravel() @ basis[n]) == pytest.approx(1.0, abs=0.02)
    centred = weights - weights.mean(axis=0)
    expected_ratio = np.sort(np.linalg.svd(centred, compute_uv=False) ** 2)[::-1] / (centred**2).sum()
    np.testing.assert_allclose(ratio, expected_ratio, rtol=1e-4)
    assert vit_inspect.patch_embedding_components(model).shape == (28, 8, 8, 3)  # default k=28


# ----- plots and imports -----


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, dict(class_token=False, pooling="gap", image_size=(24, 40))])
def test_save_figures_writes_four_pngs(tmp_path, overrides):
    model = keras_vit.create_model("testing", **overrides)
    paths = vit_inspect.save_figures(model, _images(3, model.config.image_size), tmp_path / "plots")
    assert sorted(paths) == sorted(vit_inspect.FIGURES)
    for path in paths.values():
        with open(path, "rb") as stream:
            assert stream.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(path) > 1000
    assert sorted(os.listdir(tmp_path / "plots")) == sorted(f"{n}.png" for n in vit_inspect.FIGURES)  # no temp files


def _head_predicts(model, winner):
    """Zero head kernel, bias one-hot at `winner`: every image's logits argmax is `winner`, whatever the input."""
    head = model.get_layer("head")
    head.kernel.assign(np.zeros(head.kernel.shape, np.float32))
    head.bias.assign(np.eye(head.bias.shape[0], dtype=np.float32)[winner] * 5.0)


def test_rollout_captions_name_the_true_and_predicted_classes():
    from keras_vit.inspect.plots import _captions, rollout_figure

    model = keras_vit.create_model("testing", num_classes=3)
    _head_predicts(model, 2)
    images = _images(3)
    captions = _captions(model, images, np.array([2, 0, 1]), ["cat", "dog", "fox"])
    assert captions == [("true fox / pred fox", True), ("true cat / pred fox", False), ("true dog / pred fox", False)]
    assert _captions(model, images, None, None) == [("pred 2", None)] * 3  # no labels, no names: indices
    with pytest.raises(ValueError, match="class_names has 2 names but the model has 3 classes"):
        _captions(model, images, None, ["cat", "dog"])
    figure = rollout_figure(images, np.random.default_rng(0).uniform(size=(3, 32, 32)), True, captions)
    titles = [(ax.get_title(), ax.title.get_color()) for ax in figure.axes[:6] if ax.get_title()]
    assert titles == [("true fox / pred fox", "tab:green"), ("true cat / pred fox", "tab:red"),
                      ("true dog / pred fox", "tab:red")]  # fmt: skip
    assert figure.axes[-1].get_ylabel() == "attention / image max"  # the colour bar


def test_save_figures_checks_the_labels():
    model = keras_vit.create_model("testing", num_classes=3)
    with pytest.raises(ValueError, match="labels has 2 entries for 3 images"):
        vit_inspect.save_figures(model, _images(3), "unused", labels=[0, 1])


def test_grey_components_are_those_of_the_channel_sum():
    """On grey inputs only the sum of a filter over R, G, B acts; the rest (here: noise summing to zero over the
    channels) must not change the grey components, which recover the directions built into the sum."""
    model = keras_vit.create_model("testing", hidden_size=64, num_heads=2, mlp_dim=64)
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((64, 2)))[0].T  # 2 orthonormal directions over 8 x 8 pixels
    summed = (rng.standard_normal((64, 2)) * [4.0, 1.0]) @ basis  # (filters, pixels)
    noise = rng.standard_normal((64, 64, 3))
    noise -= noise.mean(axis=-1, keepdims=True)  # sums to zero over the channels
    kernel = summed[..., None] / 3.0 + noise  # (filters, pixels, channels)
    model.get_layer("embedding").kernel.assign(kernel.transpose(1, 2, 0).reshape(8, 8, 3, 64).astype(np.float32))
    tiles, ratio = vit_inspect.patch_embedding_components(model, k=2, grey=True, return_variance=True)
    assert tiles.shape == (2, 8, 8, 1)
    assert ratio.sum() == pytest.approx(1.0, abs=1e-6)  # the sum spans two directions exactly
    raw, _ = vit_inspect.filter_components(summed.T.reshape(8, 8, 1, 64), 2)  # the sum alone, noise-free
    for n in range(2):
        assert abs(raw[n].ravel() @ basis[n]) == pytest.approx(1.0, abs=0.02)
        np.testing.assert_allclose(tiles[n], (raw[n] - raw[n].min()) / (raw[n].max() - raw[n].min()), atol=1e-5)
    colour = vit_inspect.patch_embedding_components(model, k=2)
    assert colour.shape == (2, 8, 8, 3)  # in colour, the noise dominates: not what a grey input sees


def test_distance_figure_colours_many_heads_on_a_colour_bar():
    from keras_vit.inspect.plots import distance_figure

    figure = distance_figure(np.random.default_rng(0).uniform(1, 10, (4, 16)), num_images=5)
    plot, bar = figure.axes
    assert bar.get_ylabel() == "head" and list(bar.get_yticks()) == list(range(1, 17))
    assert [t.get_text() for t in plot.get_legend().get_texts()] == ["mean over heads"]
    assert plot.get_title() == "Mean attention distance per head, over 5 images"
    assert len(plot.collections) == 16 and all(len(c.get_offsets()) == 4 for c in plot.collections)


@pytest.mark.slow
def test_inspect_works_without_matplotlib(tmp_path):
    # keras itself imports matplotlib when it is installed, so block it: the array functions must not need it,
    # and the figures must say what is missing.
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import numpy as np, keras_vit\n"
        "from keras_vit import inspect as vi\n"
        "m = keras_vit.create_model('testing')\n"
        "x = np.zeros((1, 32, 32, 3), 'float32')\n"
        "vi.attention_rollout(m, x); vi.mean_attention_distance(m, x); vi.position_embedding_similarity(m)\n"
        "try:\n"
        "    vi.save_figures(m, x, sys.argv[1])\n"
        "except ImportError as err:\n"
        "    print('IMPORT-ERROR', err)\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", code, str(tmp_path / "plots")]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=str(support.ROOT),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IMPORT-ERROR" in done.stdout and "pip install matplotlib" in done.stdout
    assert not (tmp_path / "plots").exists()
