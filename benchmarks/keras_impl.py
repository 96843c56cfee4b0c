"""Measurements of a Keras ViT (keras-vit on the worker's KERAS_BACKEND, or keras-hub's) inside one worker process."""

import os
import statistics
import tempfile
import time

import numpy as np

import keras_vit
from keras_vit.files import atomic_write_bytes
from keras_vit.models.configs import ViTConfig, get_variant
from keras_vit.preprocessing import scale_pixels
from keras_vit.weights import timm_eva


def model_config(spec):
    """The `ViTConfig` a spec measures: its timm architecture's (`timm_architecture`), else its variant's with the
    spec's overrides; at the spec's image size and class count."""
    size, classes = spec["image_size"], spec["num_classes"]
    if spec.get("timm_architecture"):
        return ViTConfig(**timm_eva.architecture_options(spec["timm_architecture"], size, classes))
    return get_variant(spec["variant"]).replace(image_size=size, num_classes=classes, **spec.get("overrides", {}))


def _build_keras_vit(spec, dtype):
    return keras_vit.create_model(model_config(spec), dtype=dtype)


def _build_keras_hub(spec, dtype):
    import keras_hub

    c = spec["config"]
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(spec["image_size"], spec["image_size"], 3), patch_size=c["patch_size"],
        num_layers=c["num_layers"], num_heads=c["num_heads"], hidden_dim=c["hidden_size"], mlp_dim=c["mlp_dim"],
        layer_norm_epsilon=1e-6, dtype=dtype,
    )  # fmt: skip
    return keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=spec["num_classes"], preprocessor=None, pooling="token",
        head_dtype="float32" if dtype else None,
    )  # fmt: skip


BUILDERS = {"keras-vit": _build_keras_vit, "keras-hub": _build_keras_hub}


class KerasBench:
    """Holds one model per (dtype, XLA) setting so each is traced/compiled once, then timed every round."""

    def __init__(self, impl, spec, threads=None):
        import keras

        if impl == "keras-hub":
            import keras_hub  # noqa: F401  (a missing package makes the worker unavailable at start, not mid-run)

        self.backend = keras.backend.backend()
        if self.backend == "torch" and threads:
            import torch

            torch.set_num_threads(threads)
        keras.utils.set_random_seed(0)
        self.impl, self.spec = impl, spec
        self.build = BUILDERS[impl]
        size = spec["image_size"]
        rng = np.random.default_rng(0)
        self.images = {b: rng.uniform(-1, 1, (b, size, size, 3)).astype("float32") for b in (1, spec["batch"])}
        self.labels = rng.integers(0, spec["num_classes"], spec["batch"]).astype("int32")
        self._train, self._infer, self._latency = {}, {}, {}
        self._float_model = None
        self._pipeline, self._wait_state = {}, {}
        self._peak_state = {}
        self.tflite_info = {}

    def float_model(self):
        """The float32 inference model; its head is re-initialised randomly so top-1 comparisons mean something
        (keras-vit's head starts at zero, which would make every class tie)."""
        if self._float_model is None:
            model = self.build(self.spec, None)
            head = model.layers[-1]
            rng = np.random.default_rng(1)
            head.kernel.assign(rng.normal(0, 0.02, head.kernel.shape).astype("float32"))
            self._float_model = model
        return self._float_model

    def _check_xla(self, xla):
        # JAX always compiles with XLA; Keras' torch backend would mean torch.compile, not measured here.
        expected = {"jax": True, "torch": False}.get(self.backend, xla)
        if xla != expected:
            raise ValueError(f"{self.impl} on the {self.backend} backend is measured with xla={expected}; got {xla}")

    def train(self, dtype, xla, steps, warmup):
        import keras

        self._check_xla(xla)
        key = (dtype, xla)
        if key not in self._train:
            model = self.build(self.spec, "mixed_bfloat16" if dtype == "bfloat16" else None)
            model.compile(
                optimizer=keras.optimizers.AdamW(1e-4),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=xla,
            )
            x, y = self.images[self.spec["batch"]], self.labels
            if self.backend == "tensorflow":
                import tensorflow as tf

                x, y = tf.constant(x), tf.constant(y)  # no host-to-tensor copy inside the timed step
            self._train[key] = (model, x, y)
            warmup = max(warmup, 2)  # the first steps trace, compile (XLA) and allocate: never time them
        model, x, y = self._train[key]
        times = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            # keras-hub's classifier returns [loss, metrics...]; reading the value also waits for the step.
            loss = float(np.asarray(model.train_on_batch(x, y)).ravel()[0])
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return {"images_per_second": self.spec["batch"] / statistics.median(times), "loss": loss}

    def infer(self, batch, xla, reps, warmup):
        self._check_xla(xla)
        key = (batch, xla)
        if key not in self._infer:
            model = self.float_model()
            if self.backend == "tensorflow":
                import tensorflow as tf

                compiled = tf.function(lambda images: model(images, training=False), jit_compile=xla)
                function, x = (lambda images: compiled(images).numpy()), tf.constant(self.images[batch])
            else:
                # Keras' own compiled predict step: jax.jit on JAX, eager on torch.
                function, x = model.predict_on_batch, self.images[batch]
            self._infer[key] = (function, x)
            warmup = max(warmup, 2)
        function, x = self._infer[key]
        times = []
        for i in range(warmup + reps):
            start = time.perf_counter()
            np.asarray(function(x))
            if i >= warmup:
                times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        return {"images_per_second": batch / seconds, "latency_ms": seconds * 1e3}

    def tflite_setup(self, out_dir, threads, calibration_size, agreement_size):
        """Converts the float model in the three modes once; records sizes, op inventories, agreement."""
        from benchmarks import tflite  # TensorFlow's converter: only the TensorFlow-backend workers load it

        model = self.float_model()
        size = self.spec["image_size"]
        rng = np.random.default_rng(2)
        calibration = rng.uniform(-1, 1, (calibration_size, size, size, 3)).astype("float32")
        probe = rng.uniform(-1, 1, (agreement_size, size, size, 3)).astype("float32")
        reference = model.predict(probe, batch_size=8, verbose=0)
        info = {}
        for mode in tflite.MODES:
            start = time.perf_counter()
            flatbuffer = tflite.convert(model, (size, size, 3), mode, calibration=calibration)
            seconds = time.perf_counter() - start
            path = os.path.join(out_dir, f"{self.impl}_{mode}.tflite")
            atomic_write_bytes(path, flatbuffer)
            outputs = tflite.run(flatbuffer, probe, threads=threads)
            info[mode] = {
                "file": path,
                "bytes": len(flatbuffer),
                "convert_seconds": seconds,
                "top1_agreement": float(np.mean(outputs.argmax(-1) == reference.argmax(-1))),
                "max_abs_logit_diff": float(np.max(np.abs(outputs - reference))),
                **tflite.op_inventory(flatbuffer),
            }
            self._latency[mode] = tflite.Latency(flatbuffer, threads)
        self.tflite_info = info
        return info

    def digits_int8(self, workdir, threads):
        """Held-out accuracy of a trained digits model (training/'s workdir) as Keras float and as TFLite.

        Calibration uses the workdir's training-split sample, the evaluation its held-out split.
        """
        import keras

        from benchmarks import tflite

        model = keras.saving.load_model(os.path.join(workdir, "model.keras"), compile=False)
        heldout = np.load(os.path.join(workdir, "samples", "heldout.npz"))
        calibration = np.load(os.path.join(workdir, "samples", "calibration.npz"))["images"]
        images = scale_pixels(heldout["images"])
        labels = heldout["labels"]
        calibration = scale_pixels(calibration)
        reference = model.predict(images, batch_size=64, verbose=0).argmax(-1)
        out = {"heldout_images": len(labels), "calibration_images": len(calibration),
               "keras_float32_top1": float(np.mean(reference == labels))}  # fmt: skip
        for mode in tflite.MODES:
            flatbuffer = tflite.convert(model, images.shape[1:], mode, calibration=calibration)
            predicted = tflite.run(flatbuffer, images, threads=threads).argmax(-1)
            out[mode] = {
                "top1": float(np.mean(predicted == labels)),
                "agreement_with_keras": float(np.mean(predicted == reference)),
                "bytes": len(flatbuffer),
            }
        return out

    def tflite_peak(self, threads):
        from benchmarks import tflite

        return tflite.matmul_peak(threads, state=self._peak_state)

    def tflite_latency(self, mode, reps, warmup):
        return {"latency_ms": self._latency[mode].measure(reps, warmup), "threads": self._latency[mode].threads}

    def pipeline(self, folder, batch, batches, threads, device_input=False):
        """The ImageNet recipe's host input pipeline (benchmarks/pipeline.py), images/s per core; `device_input`:
        its uint8 form (`TrainConfig.device_input`)."""
        from benchmarks.pipeline import KerasPipeline

        if device_input not in self._pipeline:
            size = self.spec["image_size"]
            self._pipeline[device_input] = KerasPipeline(folder, batch, threads, size=size, device_input=device_input)
        return self._pipeline[device_input].measure(batches)

    def input_wait(self, folder, steps, threads):
        from benchmarks.pipeline import input_wait

        return input_wait(folder, steps, threads, self.spec, model_config(self.spec), self._wait_state)

    def sizes(self):
        model = self.float_model()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            keras_bytes = os.path.getsize(path)
        return {"parameters": int(model.count_params()), "keras_file_bytes": keras_bytes}
