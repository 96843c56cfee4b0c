"""Helpers for the export tests: a quickly trained digits workdir and randomly initialised classifiers.

The digits workdir follows the training workdir contract (model.keras, labels.txt, metrics.json,
samples/heldout.npz, samples/calibration.npz) so export/ can be tested without importing training/.
"""

import json

import numpy as np

DIGITS_IMAGE_SIZE = 16
# Wide enough that weights, not the flatbuffer's per-tensor bookkeeping, dominate the file (so int8's 4x
# weight compression shows in the file size), small enough to train in well under a minute on 2 cores.
# The Ti width (192) with 2 blocks on a 2x2 patch grid: about 0.93 M parameters, ~98% held-out top-1.
DIGITS_MODEL = dict(patch_size=8, hidden_size=192, num_heads=3, mlp_dim=768, num_layers=2)


def digits_uint8():
    """scikit-learn's 8x8 digits as uint8 RGB (N, 8, 8, 3) and int64 labels, per the project's contract."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    grey = np.round(digits.images * 255.0 / 16.0).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1), digits.target.astype(np.int64)


def resize_uint8(images, size):
    """Bilinear resize of uint8 images, rounded back to uint8 (what a training pipeline stores as samples)."""
    import tensorflow as tf

    resized = tf.image.resize(tf.constant(images, tf.float32), (size, size), method="bilinear").numpy()
    return np.clip(np.round(resized), 0, 255).astype(np.uint8)


def make_digits_workdir(workdir, epochs=20, seed=0):
    """Trains a small ViT on digits with plain `keras.Model.fit` and writes a training workdir.

    Returns:
        dict with the Keras held-out accuracy and the paths.
    """
    import keras

    import keras_vit

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "samples").mkdir(exist_ok=True)
    images, labels = digits_uint8()
    order = np.random.default_rng(seed).permutation(len(labels))
    train, held = order[:1500], order[1500:]
    images = resize_uint8(images, DIGITS_IMAGE_SIZE)
    x = (images.astype(np.float32) - 127.5) / 127.5

    keras.utils.set_random_seed(seed)
    model = keras_vit.create_model("testing", image_size=DIGITS_IMAGE_SIZE, num_classes=10, **DIGITS_MODEL)
    model.compile(
        optimizer=keras.optimizers.Adam(5e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x[train], labels[train], epochs=epochs, batch_size=32, verbose=0)
    loss, top1 = model.evaluate(x[held], labels[held], verbose=0)

    model.save(workdir / "model.keras")
    (workdir / "labels.txt").write_text("\n".join(str(i) for i in range(10)) + "\n")
    np.savez(workdir / "samples" / "heldout.npz", images=images[held], labels=labels[held])
    np.savez(workdir / "samples" / "calibration.npz", images=images[train[:512]], labels=labels[train[:512]])
    metrics = {"top1": float(top1), "loss": float(loss), "epochs": epochs}
    (workdir / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def random_classifier(variant="testing", seed=0, head_scale=1.0, **overrides):
    """A randomly initialised classifier whose head is random too (a fresh ViT head is zero, so every
    logit would be 0 and top-1 agreement trivially perfect)."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(seed)
    model = keras_vit.create_model(variant, **overrides)
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    kernel = rng.normal(0.0, head_scale / np.sqrt(head.kernel.shape[0]), head.kernel.shape).astype("float32")
    head.kernel.assign(kernel)
    head.bias.assign(rng.normal(0.0, 0.1, head.bias.shape).astype("float32"))
    return model
