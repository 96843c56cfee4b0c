"""Prepared TFDS data sets generated here (no download), for tests and the notebook's CI run."""

import numpy as np


def prepare_fake_cifar10(data_dir, num_train=64, num_test=24, seed=0):
    """Writes a CIFAR-10-shaped data set that TFDS's own `cifar10` builder reads from `data_dir` as prepared.

    Same name, version and features as the registered builder (32x32x3 images, 10 labels, an `id` string), random
    pixels; `tfds.builder("cifar10", data_dir=data_dir)` then opens it like the real one, so `tfds:cifar10` recipes
    run on it unchanged. Returns `data_dir`.
    """
    import tensorflow_datasets as tfds

    real = tfds.builder("cifar10", data_dir=str(data_dir))

    class FakeCifar10(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        name = "cifar10"
        VERSION = real.version
        # A one-part module name keeps tfds from resolving the builder's source file (needs importlib_resources).
        __module__ = "fake_cifar10"

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=real.info.features, supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            return {
                "train": self._generate_examples(num_train, seed),
                "test": self._generate_examples(num_test, seed + 1),
            }

        def _generate_examples(self, count, split_seed):
            rng = np.random.default_rng(split_seed)
            for i in range(count):
                image = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                yield i, {"id": f"fake_{split_seed}_{i}", "image": image, "label": i % 10}

    FakeCifar10(data_dir=str(data_dir)).download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    return data_dir


_BUILDER = []


def tiny_shapes(data_dir):
    """Prepares a 3-class TFDS dataset of 12x12 images generated here (no download) in `data_dir`."""
    import tensorflow_datasets as tfds

    if not _BUILDER:  # tfds registers builder classes by name: define it once per process

        class TinyShapes(tfds.core.GeneratorBasedBuilder):
            VERSION = tfds.core.Version("1.0.0")
            # A one-part module name keeps tfds from resolving the builder's source file, which needs the optional
            # importlib_resources package.
            __module__ = "tiny_shapes"

            def _info(self):
                return tfds.core.DatasetInfo(
                    builder=self,
                    features=tfds.features.FeaturesDict(
                        {
                            "image": tfds.features.Image(shape=(12, 12, 3)),
                            "label": tfds.features.ClassLabel(names=["red", "green", "blue"]),
                        }
                    ),
                    supervised_keys=("image", "label"),
                )

            def _split_generators(self, dl_manager):
                return {"train": self._generate_examples(30, 0), "test": self._generate_examples(9, 1)}

            def _generate_examples(self, count, seed):
                rng = np.random.default_rng(seed)
                for i in range(count):
                    label = i % 3
                    image = rng.integers(0, 60, (12, 12, 3), dtype=np.uint8)
                    image[..., label] = 200
                    yield i, {"image": image, "label": label}

        _BUILDER.append(TinyShapes)
    builder = _BUILDER[0](data_dir=str(data_dir))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return "tiny_shapes"
