"""The input-pipeline benchmark: the ImageNet recipe's tf.data stream (and its `device_input` form) against timm's
DataLoader on the same JPEG folder, with the same cores (docs/performance.md)."""

import io
import math
import os
import random
import time

import numpy as np

import keras_vit
from keras_vit.files import atomic_write_bytes

CROP_AREA = (0.05, 1.0)  # the imagenet1k_s16 recipe's crop_area
ASPECT = (3 / 4, 4 / 3)
CLASSES = 4


def make_jpeg_folder(path, count, size=(500, 375), seed=0):
    """Writes `count` synthetic JPEGs (ImageNet's typical 500x375, quality 90) in `CLASSES` class sub-folders.

    The pictures are smooth colour fields with fine noise, so they compress and decode like photographs rather
    than like flat colour or pure noise. Existing files of the same name are reused (the content depends on
    `seed` and the index only). Returns a description of the folder.
    """
    from PIL import Image

    if count < 2 * CLASSES:
        raise ValueError(
            f"The JPEG folder needs at least {2 * CLASSES} images ({CLASSES} classes, 2 each); got {count}."
        )
    rng = np.random.default_rng(seed)
    total = 0
    for index in range(count):
        file = os.path.join(path, f"class_{index % CLASSES}", f"{index:05d}.jpg")
        coarse = rng.uniform(0, 255, (6, 8, 3)).astype("uint8")
        noise = rng.normal(0, 12, (size[1], size[0], 3))
        if not os.path.exists(file):
            smooth = np.asarray(Image.fromarray(coarse).resize(size, Image.BICUBIC), np.float32)
            pixels = np.clip(smooth + noise, 0, 255).astype("uint8")
            os.makedirs(os.path.dirname(file), exist_ok=True)
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
            atomic_write_bytes(file, buffer.getvalue())
        total += os.path.getsize(file)
    return {"path": path, "images": count, "classes": CLASSES, "size": list(size), "mean_bytes": total / count}


UNTIMED_BATCHES = 3


def _timed(batches, next_batch, batch_size, threads):
    # The first batch pays for starting the workers; the next ones come from what both pipelines prefetched
    # meanwhile (tf.data's parallel map and prefetch, the DataLoader's prefetch_factor batches per worker).
    # Timing starts once those are drained, so it measures the steady rate.
    for _ in range(UNTIMED_BATCHES):
        next_batch()
    start = time.perf_counter()
    for _ in range(batches):
        next_batch()
    seconds = time.perf_counter() - start
    ips = batches * batch_size / seconds
    return {"images_per_second": ips, "images_per_second_per_core": ips / threads, "threads": threads,
            "batches": batches, "batch": batch_size}  # fmt: skip


class KerasPipeline:
    """keras-vit's training input stream (`training.data.train_dataset`) with the ImageNet recipe's augmentation;
    `device_input`: its uint8 form (`TrainConfig.device_input`)."""

    def __init__(self, folder, batch, threads, size=224, device_input=False):
        import tensorflow as tf

        from training import configs as train_configs
        from training import data

        self.config = train_configs.get_config("imagenet1k_s16").replace(
            dataset=f"folder:{folder}", batch_size=batch, shuffle_buffer=None, image_size=size, extra_evals={}
        )
        self.source = data.load_source(self.config.dataset, holdout_fraction=0.25)
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        self.dataset = data.train_dataset(self.source, self.config, device_input=device_input).with_options(options)
        self.batch, self.threads = batch, threads

    def measure(self, batches):
        iterator = iter(self.dataset)
        result = _timed(batches, iterator.__next__, self.batch, self.threads)
        del iterator  # stops its prefetching threads before the next worker is timed
        return result


def input_wait(folder, steps, threads, spec, config, state=None):
    """Fraction of the training step time spent waiting for the next batch, in a keras-vit training run.

    The spec's model (`config`, its `ViTConfig`; TensorFlow, float32, with the trainer's `jit_compile="auto"`
    choice for this machine) trains on the recipe's stream. On a CPU the pipeline and the model share the cores, so
    this is the host's contention, not an accelerator's.
    `state` (a dict) keeps the compiled model and the pipeline between calls, so later rounds skip compilation.
    """
    import keras

    state = {} if state is None else state
    # A fresh iterator's first batch waits for the pipeline to start, once per run in the trainer: not timed.
    warmup = 1
    if "model" not in state:
        pipe = KerasPipeline(folder, spec["batch"], threads, size=spec["image_size"])
        model = keras_vit.create_model(config, num_classes=pipe.source.num_classes)
        jit_compile = _trainer_jit_compile(model)
        model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)  # fmt: skip
        state.update(model=model, pipe=pipe, jit_compile=jit_compile)
        warmup = 2  # and tracing and XLA compilation
    model, pipe = state["model"], state["pipe"]
    iterator = iter(pipe.dataset)
    waiting = total = 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        images, labels = next(iterator)
        ready = time.perf_counter()
        float(np.asarray(model.train_on_batch(images, labels)).ravel()[0])  # the loss: waits for the step
        if step >= warmup:
            waiting += ready - start
            total += time.perf_counter() - start
    del iterator
    return {"wait_fraction": waiting / total, "steps": steps, "step_seconds": total / steps, "batch": spec["batch"],
            "jit_compile": state["jit_compile"]}  # fmt: skip


def _trainer_jit_compile(model):
    """What `python -m training` resolves jit_compile="auto" to for this model on this machine (default strategy)."""
    import tensorflow as tf

    from keras_vit.models import flops
    from training import advice
    from training.placement.strategy import resolve_jit_compile

    measured = advice.lookup("cpu", "float32", flops.config_forward_flops(model.config))
    return resolve_jit_compile("auto", tf.distribute.get_strategy(), measured)[0]


def crop_box(width, height, rng, area=CROP_AREA, ratio=ASPECT):
    """(left, top, right, bottom) of an Inception-style crop: area fraction and log-uniform aspect ratio drawn
    up to 10 times until the crop fits, else the central crop at the nearest allowed aspect ratio."""
    for _ in range(10):
        target = width * height * rng.uniform(*area)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    aspect = min(max(width / height, ratio[0]), ratio[1])
    w, h = (width, round(width / aspect)) if width / height < aspect else (round(height * aspect), height)
    w, h = min(w, width), min(h, height)
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


class _TimmStyleDataset:
    """(path, label) -> ([-1, 1] float tensor (3, S, S), label) with timm's RandAugment; see the module doc."""

    def __init__(self, files, size):
        from timm.data.auto_augment import rand_augment_transform

        self.files, self.size = files, size
        self.randaugment = rand_augment_transform(
            "rand-m10-n2-p1.0", {"translate_const": 100, "img_mean": (128, 128, 128)}
        )

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        import torch
        from PIL import Image

        path, label = self.files[index]
        with Image.open(path) as image:
            image = image.convert("RGB")
        image = image.resize((self.size, self.size), Image.BILINEAR, box=crop_box(*image.size, random))
        if random.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        image = self.randaugment(image)
        pixels = torch.from_numpy(np.asarray(image, np.float32).transpose(2, 0, 1).copy())
        return pixels / 127.5 - 1.0, label


class TimmPipeline:
    """timm's side: a DataLoader of `threads` worker processes and timm's Mixup on each batch."""

    def __init__(self, folder, batch, threads, size=224):
        import torch
        from timm.data.mixup import Mixup

        classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
        files = [
            (os.path.join(folder, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(folder, c)))
        ]
        sampler = torch.utils.data.RandomSampler(files, replacement=True, num_samples=10**9)
        self.loader = torch.utils.data.DataLoader(
            _TimmStyleDataset(files, size), batch_size=batch, sampler=sampler, num_workers=threads, drop_last=True
        )
        self.mixup = Mixup(mixup_alpha=0.2, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=len(classes))
        self.batch, self.threads = batch, threads

    def measure(self, batches):
        iterator = iter(self.loader)

        def next_batch():
            images, labels = next(iterator)
            return self.mixup(images, labels)

        try:
            return _timed(batches, next_batch, self.batch, self.threads)
        finally:
            iterator._shutdown_workers()  # as `del`, but at once: no worker may run while another is timed


def compare_device_input(folder, rounds=3, batches=20, batch=64, threads=1, size=224, progress=print):
    """{form: [img/s per core of each round]} of the float32 stream and its `device_input` (uint8) form, measured
    in interleaved rounds (float, uint8, float, uint8, ...), so a slower moment of a shared machine hits both."""
    pipes = {
        "float32": KerasPipeline(folder, batch, threads, size=size),
        "uint8": KerasPipeline(folder, batch, threads, size=size, device_input=True),
    }
    rates = {form: [] for form in pipes}
    for index in range(rounds):
        for form, pipe in pipes.items():
            rates[form].append(pipe.measure(batches)["images_per_second_per_core"])
            progress(f"[round {index + 1}/{rounds}] {form}: {rates[form][-1]:.1f} img/s per core")
    return rates


def _spread(values, digits=1):
    return f"{float(np.median(values)):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main(argv=None):
    """`python -m benchmarks.pipeline`: the imagenet1k_s16 stream against its device_input form, median (min-max)."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=main.__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=20, help="timed batches per round and form")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--images", type=int, default=256, help="synthetic JPEGs (500x375) in the folder")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--folder", help="where the JPEGs are written (default: a temporary folder)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_jpeg_folder(args.folder or tmp, args.images)["path"]
        rates = compare_device_input(folder, args.rounds, args.batches, args.batch, args.threads, args.image_size)
    ratios = [u / f for f, u in zip(rates["float32"], rates["uint8"])]
    print(
        f"imagenet1k_s16 stream, {args.image_size} px, batch {args.batch}, {args.threads} thread(s), "
        f"{args.rounds} interleaved rounds of {args.batches} batches; img/s per core, median (min-max):"
    )
    print(f"  float32 images in [-1, 1], Mixup in tf.data: {_spread(rates['float32'])}")
    print(f"  device_input (uint8 images + Mixup weights): {_spread(rates['uint8'])}")
    print(f"  uint8 / float32, per round: {_spread(ratios, 2)}")
    return rates


if __name__ == "__main__":
    main()
