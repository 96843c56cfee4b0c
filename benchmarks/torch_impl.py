"""Measurements of timm's ViT or Eva (PyTorch, CPU) inside one worker process."""

import io
import statistics
import time

import numpy as np


def timm_model_name(spec):
    """timm's registry name for the same architecture, e.g. vit_tiny_patch16_224."""
    c = spec["config"]
    names = {192: "tiny", 384: "small", 768: "base", 1024: "large", 1280: "huge"}
    if c["hidden_size"] not in names:
        return None
    return f"vit_{names[c['hidden_size']]}_patch{c['patch_size']}_224"


class TimmBench:
    def __init__(self, spec, threads):
        from benchmarks import _torchvision_shim

        self.torchvision_placeholder = _torchvision_shim.install()
        import timm
        import torch

        torch.set_num_threads(threads)
        torch.manual_seed(0)
        self.torch, self.spec = torch, spec
        c, arch = spec["config"], spec.get("timm_architecture")
        if arch:  # a timm architecture keras_vit builds (DINOv3, EVA-02, PE): timm's own function for it
            kwargs = dict(pretrained=False, img_size=spec["image_size"], num_classes=spec["num_classes"])
            self.make = lambda: timm.create_model(arch, **kwargs)
        else:  # explicit arguments, so the architecture matches the spec whatever the registry name says
            kwargs = dict(
                img_size=spec["image_size"], patch_size=c["patch_size"], embed_dim=c["hidden_size"],
                depth=c["num_layers"], num_heads=c["num_heads"], mlp_ratio=c["mlp_dim"] / c["hidden_size"],
                num_classes=spec["num_classes"],
            )  # fmt: skip
            self.make = lambda: timm.models.vision_transformer.VisionTransformer(**kwargs)
        rng = np.random.default_rng(0)
        size = spec["image_size"]
        self.images = {
            b: torch.from_numpy(rng.uniform(-1, 1, (b, 3, size, size)).astype("float32")) for b in (1, spec["batch"])
        }
        self.labels = torch.from_numpy(rng.integers(0, spec["num_classes"], spec["batch"]).astype("int64"))
        self._train, self._eval, self._warm = {}, None, set()
        self._pipeline = None

    def pipeline(self, folder, batch, batches, threads):
        """timm's DataLoader with the recipe's transforms (benchmarks/pipeline.py), images/s per core."""
        from benchmarks.pipeline import TimmPipeline

        if self._pipeline is None:
            self._pipeline = TimmPipeline(folder, batch, threads, size=self.spec["image_size"])
        return self._pipeline.measure(batches)

    def train(self, dtype, xla, steps, warmup):
        torch = self.torch
        if xla:
            raise ValueError("timm has no XLA setting here")
        if dtype not in self._train:
            model = self.make().train()
            self._train[dtype] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
            warmup = max(warmup, 2)  # first steps allocate and pick kernels: never time them
        model, optimizer = self._train[dtype]
        x, y = self.images[self.spec["batch"]], self.labels
        times = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            value = float(loss)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return {"images_per_second": self.spec["batch"] / statistics.median(times), "loss": value}

    def infer(self, batch, xla, reps, warmup):
        torch = self.torch
        if xla:
            raise ValueError("timm has no XLA setting here")
        if self._eval is None:
            self._eval = self.make().eval()
        if batch not in self._warm:
            self._warm.add(batch)
            warmup = max(warmup, 2)
        x = self.images[batch]
        times = []
        with torch.inference_mode():
            for i in range(warmup + reps):
                start = time.perf_counter()
                self._eval(x).numpy()
                if i >= warmup:
                    times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        return {"images_per_second": batch / seconds, "latency_ms": seconds * 1e3}

    def sizes(self):
        model = self._eval or self.make()
        buffer = io.BytesIO()
        self.torch.save(model.state_dict(), buffer)
        return {"parameters": int(sum(p.numel() for p in model.parameters())), "state_dict_bytes": buffer.tell()}
