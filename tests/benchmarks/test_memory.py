"""The memory phase of the benchmark: the accelerator-fit arithmetic, its tables in the docs, and the phase's plumbing.

The fit figures are checked against numbers computed by hand in the comments (parameters chosen so that one
float32 copy of them is exactly 100 MiB), never against the module's own output.
"""

import subprocess
import types

import pytest

from benchmarks import coordinator, fit, memory, readme

COPY = 100 * 2**20 // 4  # 26,214,400 float32 parameters: one copy is 100 MiB


def test_fixed_cost_counts_weights_gradient_slots_and_the_accumulator():
    assert fit.fixed_mib(COPY, slots=2) == 400  # weights + gradient + AdamW's two moments
    assert fit.fixed_mib(COPY, slots=2, accum_steps=8) == 500  # + the accumulator
    assert fit.fixed_mib(COPY, slots=1, accum_steps=1) == 300  # SGD with momentum: one velocity
    assert fit.optimizer_slots("adamw") == 2
    assert fit.optimizer_slots("sgd", momentum=0.9) == 1 and fit.optimizer_slots("sgd", momentum=0.0) == 0
    with pytest.raises(ValueError, match="optimizer must be 'adamw' or 'sgd'"):
        fit.optimizer_slots("lamb")


def test_per_device_memory_is_fixed_cost_plus_the_micro_batch_of_activations():
    # Batch 512 on 8 devices, accumulating 8: micro-batches of 512 / 8 / 8 = 8 images of 300 MiB, on 300 MiB (SGD
    # with momentum) + 100 MiB accumulator: 400 + 2400 = 2800 MiB.
    assert fit.per_device_mib(COPY, 300.0, 512, 8, accum_steps=8, slots=1) == 2800
    # Batch 4096 on 4 chips, no accumulation, AdamW: 1024 images x 50 MiB + 400 MiB = 51,600 MiB.
    assert fit.per_device_mib(COPY, 50.0, 4096, 4, accum_steps=1, slots=2) == 51_600
    with pytest.raises(ValueError, match="batch=500, devices=8, accum_steps=8; use a batch that is a multiple of 64"):
        fit.micro_batch(500, 8, 8)
    # 16 GiB = 16,384 MiB, less AdamW's fixed cost with an accumulator (500): 15,884 MiB; / 300 = 52.9 -> 52 images.
    assert fit.largest_micro_batch(COPY, 300.0, 16, slots=2) == 52
    assert fit.largest_micro_batch(COPY * 50, 300.0, 16, slots=2) == 0  # 25,000 MiB of fixed cost: nothing fits


def test_activation_per_image_takes_one_gradient_off_the_measured_step():
    # B/16 at 224 px: 86,567,656 parameters = 330.2 MiB of gradient; (2770 - 330.2) / 8 = 304.97 MiB per image.
    record = {"step_mib": 2770, "parameters": 86_567_656, "micro_batch": 8}
    assert fit.activation_mib_per_image(record) == pytest.approx(304.97, abs=0.01)


def _setting(size, remat, accum, step_mib, batch=8):
    micro = batch // accum
    return {"variant": "B/16", "image_size": size, "batch": batch, "remat": remat, "accum_steps": accum,
            "micro_batch": micro, "step_mib": step_mib, "per_image_mib": round(step_mib / micro, 1),
            "parameters": COPY, "backend": "tensorflow"}  # fmt: skip


def _fake_memory():
    # At 224 px: activations 300 MiB per image plain ((2500 - 100) / 8), 50 with remat ((500 - 100) / 8); the
    # accumulated records are not what the fit reads. 384 px failed (its cells must say so, not guess).
    settings = [_setting(224, False, 1, 2500), _setting(224, True, 1, 500), _setting(224, False, 4, 900),
                _setting(224, True, 4, 500),
                {"variant": "B/16", "image_size": 384, "batch": 8, "remat": False, "accum_steps": 1,
                 "error": "exit code -9: killed"}]  # fmt: skip
    recipe = {"name": "imagenet21k_b16", "variant": "B/16", "image_size": 224, "batch": 4096, "optimizer": "adamw",
              "slots": 2, "num_classes": 21843, "parameters": COPY}  # fmt: skip
    finetune = dict(recipe, name="imagenet_finetune_384", image_size=384, batch=512, optimizer="sgd", slots=1)
    machine = {"cpu_model": "Test CPU", "usable_cpus": 2, "loadavg_start": [1.0], "loadavg_end": [1.0]}
    return {"variant": "B/16", "batch": 8, "image_sizes": [224, 384], "backend": "tensorflow", "settings": settings,
            "recipes": [recipe, finetune], "machine": machine, "seconds": 300.0}  # fmt: skip


def test_fit_rows_from_a_fake_memory_section():
    rows = {(r["recipe"], r["accelerator"]): r for r in fit.rows(_fake_memory())}
    v3 = rows["imagenet21k_b16", "TPU v3-8"]  # 4096 / 8 cores = 512 images per core, 16 GiB each
    assert v3["per_device_batch"] == 512
    # whole: 400 + 512 x 300 = 154,000 MiB; remat: 400 + 512 x 50 = 26,000; accum 8 (64 images): 500 + 64 x 300 =
    # 19,700; both: 500 + 64 x 50 = 3,700 MiB = 3.61 GiB, the only one under 16 GiB.
    got = {column: (round(s["gib"] * 1024), s["fits"]) for column, s in v3["settings"].items()}
    assert got == {"whole batch": (154_000, False), "remat": (26_000, False), "accum_steps=8": (19_700, False),
                   "remat + accum_steps=8": (3_700, True)}  # fmt: skip
    assert v3["largest"] == {False: 52, True: 317}  # (16,384 - 500) / 300 and / 50
    gpu = rows["imagenet21k_b16", "1 GPU, 80 GiB"]  # 4096 / 8 = 512 per pass: 500 + 512 x 50 = 26,100 MiB fits
    assert gpu["per_device_batch"] == 4096 and gpu["settings"]["remat + accum_steps=8"]["fits"]
    assert not gpu["settings"]["accum_steps=8"]["fits"]  # 500 + 512 x 300 = 154,100 MiB
    assert rows["imagenet_finetune_384", "TPU v2-8"]["settings"] == {}  # 384 px was not measured
    assert len(rows) == 2 * len(fit.ACCELERATORS)


def test_readme_writes_the_memory_tables_between_their_markers_only(tmp_path):
    path = tmp_path / "performance.md"
    bench = f"{readme.START}\nthe benchmark table\n{readme.END}"
    path.write_text(f"# Perf\n{bench}\nmiddle\n{readme.MEMORY_START}\nold\n{readme.MEMORY_END}\ntail\n")
    report = {"command": "python -m benchmarks --memory-only", "memory": _fake_memory()}
    readme.update(str(path), report)
    text = path.read_text()
    assert text.startswith(f"# Perf\n{bench}\nmiddle\n{readme.MEMORY_START}\n") and text.endswith(
        f"{readme.MEMORY_END}\ntail\n"
    )  # a memory-only report leaves the performance table as it was
    assert "\nold\n" not in text and "Measured by `python -m benchmarks --memory-only`" in text
    assert "| 224 px | whole batch | 8 | 2,500 | 312.5 | 300.0 |" in text
    assert "| 224 px | remat + accum_steps=4 | 2 | 500 | 250.0 | 200.0 |" in text
    # Beyond the model: 900 - 100 - 2 x 300 = 200 MiB (2 gradients) and 500 - 100 - 2 x 50 = 300 MiB (3).
    assert "accumulation held 200-300 MiB (2.0-3.0 gradients) more than this count" in text
    assert "| 384 px | whole batch | - | failed: exit code -9: killed | - | - |" in text
    assert "Computed, not run on an accelerator" in text and "XLA on an accelerator" in text
    row = "| `imagenet21k_b16` | TPU v3-8 (8 x 16) | 512 | 150.4 no | 25.4 no | 19.2 no | 3.6 fits | 52 / 317 |"
    assert row in text
    assert "| `imagenet_finetune_384` | TPU v2-8 (8 x 8) | 64 | - | - | - | - | - / - |" in text
    readme.update(str(path), report)
    assert path.read_text() == text  # idempotent
    path.write_text(f"# Perf\n{bench}\n")
    with pytest.raises(ValueError, match="memory-table:start"):
        readme.update(str(path), report)
    assert path.read_text() == f"# Perf\n{bench}\n"  # nothing written when a marker pair is missing


def test_cli_memory_options(tmp_path):
    from benchmarks.__main__ import parse_args

    assert parse_args([]).memory is False  # the default run stays under 15 minutes: no memory phase
    args = parse_args(["--memory-only"])
    assert args.memory and args.memory_sizes == [224, 384] and args.memory_variant == "B/16"
    assert args.memory_batch == 8
    with pytest.raises(SystemExit):
        parse_args(["--memory-only", "--advice", "advice.json"])
    with pytest.raises(SystemExit):
        parse_args(["--memory", "--memory-batch", "6"])
    only_memory = tmp_path / "m.md"
    only_memory.write_text(f"{readme.MEMORY_START}\n{readme.MEMORY_END}\n")
    parse_args(["--memory-only", "--readme", str(only_memory)])  # the benchmark table's markers are not needed
    with pytest.raises(ValueError, match="benchmark-table:start"):
        parse_args(["--memory", "--readme", str(only_memory)])
    with pytest.raises(ValueError, match="memory-table:start"):
        only_memory.write_text(f"{readme.START}\n{readme.END}\n")
        parse_args(["--memory-only", "--readme", str(only_memory)])


def test_memory_phase_runs_each_setting_in_its_own_process_on_tensorflow(monkeypatch):
    calls = []

    def fake_run(command, env, **kwargs):
        calls.append((command, env["KERAS_BACKEND"]))
        if command[-1] == "True,4":  # one setting's process dies: it is reported, the others still run
            return subprocess.CompletedProcess(command, -9, "", "")
        remat, accum = command[-1].split(",")
        record = _setting(int(command[command.index("--image-size") + 1]), remat == "True", int(accum), 500)
        return subprocess.CompletedProcess(command, 0, "noise\nRESULT" + __import__("json").dumps(record), "")

    monkeypatch.setattr(memory.subprocess, "run", fake_run)
    # The phase's commit (benchmarks/provenance.py) runs git through the same subprocess.run: not a setting.
    monkeypatch.setattr(coordinator.provenance, "source_commit", lambda: {"commit": "c" * 40, "dirty": False})
    monkeypatch.setattr(fit, "recipe_spec", lambda name: {"name": name})
    options = types.SimpleNamespace(memory_variant="B/16", memory_sizes=[224, 384], memory_batch=8)
    lines = []
    section = coordinator.run_memory(options, progress=lines.append)
    assert [c[0][-1] for c in calls] == ["False,1", "True,1", "False,4", "True,4"] * 2
    assert {backend for _, backend in calls} == {"tensorflow"}  # no torch needed whatever KERAS_BACKEND says
    assert [(s["image_size"], "error" in s) for s in section["settings"]] == [
        (224, False), (224, False), (224, False), (224, True), (384, False), (384, False), (384, False), (384, True)
    ]  # fmt: skip
    assert section["settings"][3]["error"].startswith("exit code -9")
    assert [r["name"] for r in section["recipes"]] == list(fit.RECIPES)
    assert section["backend"] == "tensorflow" and section["machine"]["usable_cpus"] >= 1
    assert section["commit"] == {"commit": "c" * 40, "dirty": False} and "[memory] commit cccccccccccc" in lines
    assert any("FAILED" in line for line in lines)


@pytest.mark.slow  # a training step measured in-process: 22 s measured
def test_memory_record_of_one_setting_in_process():
    record = memory.measure("testing", 32, 8, remat=False, accum=2)
    assert record["micro_batch"] == 4 and record["accum_steps"] == 2 and record["backend"]
    # The testing variant (D 32, 2 blocks, MLP 128, patch 8 at 32 px) with the 1000-class head measure() builds:
    # embedding 6,176 + class token 32 + positions 544 + 2 blocks x 12,704 + norm 64 + head 33,000 = 65,224.
    assert record["parameters"] == 65_224
    assert record["step_mib"] == record["after_mib"] - record["before_mib"] >= 0


@pytest.mark.slow
def test_recipe_spec_counts_the_recipe_model_from_create_model():
    spec = fit.recipe_spec("imagenet21k_b16")
    # B/16's 86,567,656 at 224 px with a 1000-class head, less that head (768 x 1000 + 1000), plus pre_logits
    # (768 x 768 + 768) and the 21,843-class head (768 x 21,843 + 21,843) = 103,186,515.
    assert spec["parameters"] == 86_567_656 - 769_000 + 590_592 + 16_797_267
    assert (spec["batch"], spec["image_size"], spec["slots"], spec["num_classes"]) == (4096, 224, 2, 21843)


@pytest.mark.slow  # a training step measured in-process
def test_memory_record_of_a_lora_setting_counts_the_factors_and_the_head():
    record = memory.measure("testing", 32, 8, remat=False, accum=1, lora_rank=4)
    # The testing variant's D 32, 2 heads of 16, 2 blocks, rank 4 (Keras' factor shapes, keras_vit/lora.py): per
    # block q/k/v 3 x (32*2*4 + 4*16) + out (2*16*4 + 4*32) = 960 + 256; two blocks 2,432; the head 33,000.
    assert record["lora_rank"] == 4 and record["trainable_parameters"] == 2_432 + 33_000
    assert record["parameters"] == 65_224 + 2_432
