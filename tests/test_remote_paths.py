"""Cloud-storage paths end to end, on TensorFlow's in-memory `ram://` filesystem (a tf.io.gfile URL like gs://).

Train, resume, evaluate, --init, export, predict and inspect all take URLs; nothing may land in a local folder
named after the URL (`os.path.abspath("ram://b/run")` would make `./ram:/b/run`). The ram:// filesystem lives in
this process only, so everything runs in-process (the CLIs through their `main`).
"""

import io
import json
import os
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

import training
from keras_vit import files

TINY = {
    "dataset": "synthetic",
    "image_size": 16,
    "batch_size": 16,
    "steps_per_epoch": 4,
    "eval_every": 1,
    "strategy": "default",
    "num_samples": 8,
    "num_calibration": 8,
    "checkpoint_every": 2,
    "jit_compile": False,
    "deterministic": True,
}


@pytest.fixture(scope="module")
def remote_run(tmp_path_factory):
    """A 1-epoch run in ram://.../run, then extended to epochs=2 (a resume), from an empty cwd."""
    cwd = tmp_path_factory.mktemp("cwd")
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        root = f"ram://{uuid.uuid4().hex}"
        workdir = f"{root}/run"
        first = training.train(training.TrainConfig(**TINY, epochs=1), workdir, verbose=0)
        resumed = training.train(training.TrainConfig(**TINY, epochs=2, extend_epochs=True), workdir, verbose=0)
        yield SimpleNamespace(cwd=cwd, root=root, workdir=workdir, first=first, resumed=resumed)
    finally:
        os.chdir(previous)


def _nothing_local(cwd):
    assert os.listdir(cwd) == [], f"local files were written for a URL: {os.listdir(cwd)}"


@pytest.mark.slow  # two tiny trainings on ram://, the same two on a local disk: ~45 s on 2 busy cores
def test_train_and_resume_on_a_url_equal_the_same_on_a_local_disk(remote_run, tmp_path):
    workdir = remote_run.workdir
    assert remote_run.first.workdir == workdir and remote_run.first.metrics["steps"] == 4
    metrics = remote_run.resumed.metrics
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 8
    expected = [
        "config.json",
        "labels.txt",
        "log.csv",
        "metrics.json",
        "model.keras",
        "samples/calibration.npz",
        "samples/heldout.npz",
        "samples/example.png",
        "checkpoints/ckpt-00000006.npz",
        "checkpoints/ckpt-00000008.npz",
        *(f"plots/{name}.png" for name in metrics["plots"]),
    ]
    written = {files.relpath(path, workdir) for path in files.walk(workdir)}
    assert set(expected) <= written, sorted(set(expected) - written)
    assert any(name.startswith("logs/train/events.out.tfevents") for name in written)
    assert json.loads(files.read_text(f"{workdir}/metrics.json"))["top1"] == metrics["top1"]
    log = files.read_text(f"{workdir}/log.csv").splitlines()
    assert log[0].startswith("epoch,") and [row.split(",")[0] for row in log[1:]] == ["0", "1"]

    # The checkpoint written to and read back from ram:// carried the exact state: the same two calls on a
    # local disk end bitwise equal.
    local = str(tmp_path / "local")
    training.train(training.TrainConfig(**TINY, epochs=1), local, verbose=0)
    local = training.train(training.TrainConfig(**TINY, epochs=2, extend_epochs=True), local, verbose=0)
    assert local.metrics["resumed_from_step"] == 4
    for a, b in zip(local.model.get_weights(), remote_run.resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)

    # evaluate reads model.keras and config.json from the URL and gets the run's own figures.
    evaluated = training.evaluate(workdir)
    assert evaluated["top1"] == metrics["top1"] and evaluated["loss"] == pytest.approx(metrics["loss"], rel=1e-6)
    _nothing_local(remote_run.cwd)


@pytest.mark.slow
def test_init_from_url_npz_and_keras(remote_run):
    from keras_vit.weights import checkpoint_variables
    from training.model_setup import build_model

    source = remote_run.resumed.model
    arrays = {key: np.asarray(v.numpy()) for key, v in checkpoint_variables(source).items()}
    npz = f"{remote_run.root}/init/vit.npz"
    files.atomic_write(npz, lambda f: np.savez(f, **arrays))
    for init in (npz, f"{remote_run.workdir}/model.keras"):
        # init_head: the head too (fine-tuning would start a fresh one), so every weight must arrive unchanged.
        model = build_model(training.TrainConfig(**TINY, init=init, init_head=True), int(source.output_shape[-1]))
        for a, b in zip(model.get_weights(), source.get_weights()):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(FileNotFoundError, match="--init checkpoint not found"):
        build_model(training.TrainConfig(**TINY, init=f"{remote_run.root}/missing.npz"), 10)
    _nothing_local(remote_run.cwd)


def test_tfds_data_dir_url_reaches_tfds_unchanged(monkeypatch):
    # TFDS reads gs:// itself (etils.epath over tf.io.gfile); ram:// is not among epath's schemes, so the builder
    # is replaced here to see what the trainer hands it. Before, os.path.isdir refused every URL.
    import tensorflow_datasets as tfds

    from training import data

    data_dir = f"ram://{uuid.uuid4().hex}/tensorflow_datasets"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.load_source("tfds:tiny_shapes", data_dir=data_dir)
    files.makedirs(data_dir)
    seen = []

    def builder(name, data_dir=None):
        seen.append((name, data_dir))
        raise RuntimeError("stop here")

    monkeypatch.setattr(tfds, "builder", builder)
    with pytest.raises(ValueError, match="stop here"):
        data.load_source("tfds:tiny_shapes", data_dir=data_dir)
    assert seen == [("tiny_shapes", data_dir)]


def test_image_folder_on_a_url_reads_as_the_same_folder_on_disk(tmp_path):
    from tests.support.images import image_folder
    from training import data

    local = image_folder(tmp_path / "pets")
    (local / "dog" / "nested").mkdir()
    (local / "dog" / "nested" / "9.png").write_bytes((local / "dog" / "1.png").read_bytes())
    url = f"ram://{uuid.uuid4().hex}/pets"
    for path in files.walk(str(local)):
        files.copy_file(path, files.join(url, os.path.relpath(path, local)))
    config = training.TrainConfig(image_size=16, batch_size=4, holdout_fraction=0.5)
    a, b = (data.load_source(f"folder:{root}", holdout_fraction=0.5) for root in (str(local), url))
    assert (
        (b.class_names, b.num_train, b.num_heldout)
        == (a.class_names, a.num_train, a.num_heldout)
        == (["cat", "dog"], 4, 5)
    )
    # The same files in the same order (os.walk's order), decoded to the same pixels.
    assert [os.path.relpath(p, local) for p in a.train_arrays[0]] == [p[len(url) + 1 :] for p in b.train_arrays[0]]
    for batch_a, batch_b in zip(data.eval_dataset(a, config), data.eval_dataset(b, config)):
        for tensor_a, tensor_b in zip(batch_a, batch_b):  # images, labels (and weights)
            np.testing.assert_array_equal(tensor_a.numpy(), tensor_b.numpy())
    files.atomic_write_bytes(f"{url}/cat/broken.jpg", b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(ValueError, match=r"(?s)1 unreadable image.*cat/broken\.jpg: OSError"):
        data.load_source(f"folder:{url}")


def test_a_directory_uploaded_to_a_url_replaces_the_old_one(tmp_path, monkeypatch):
    target = f"ram://{uuid.uuid4().hex}/export/saved_model"
    for version, names in ((b"1", ("saved_model.pb", "variables/old.index")), (b"2", ("saved_model.pb", "x.bin"))):
        staged = tmp_path / version.decode() / "saved_model"
        for name in names:
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            (staged / name).write_bytes(version + name.encode())
        assert files.replace_path(staged, target, last="saved_model.pb") == target
    # The new files, and none of the old directory's: variables/old.index is gone.
    assert files.walk(target) == [f"{target}/saved_model.pb", f"{target}/x.bin"]
    assert files.read_bytes(f"{target}/saved_model.pb") == b"2saved_model.pb"

    # A crash in the middle of the next upload leaves no saved_model.pb: the directory does not load, rather
    # than loading the old graph with some new files.
    staged = tmp_path / "3" / "saved_model"
    staged.mkdir(parents=True)
    for name in ("saved_model.pb", "x.bin"):
        (staged / name).write_bytes(b"3" + name.encode())

    def crash(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "copy_file", crash)
    with pytest.raises(KeyboardInterrupt):
        files.replace_path(staged, target, last="saved_model.pb")
    assert files.walk(target) == [f"{target}/x.bin"]


@pytest.mark.slow  # SavedModel + TFLite conversion, verification and the inspection figures: ~20 s
def test_export_predict_and_inspect_with_urls(remote_run, capsys):
    from PIL import Image

    import export
    from export.__main__ import main as export_main
    from export.description import to_model_space
    from keras_vit.inspect.__main__ import main as inspect_main

    workdir, root = remote_run.workdir, remote_run.root
    # A workdir URL exports into WORKDIR/export on the same filesystem.
    assert export_main([workdir, "--quantize", "float32", "--latency-runs", "2"]) == 0
    out = f"{workdir}/export"
    report = json.loads(files.read_text(f"{out}/report.json"))
    assert report["passed"] and report["out"] == out
    assert {"saved_model.pb", "model_float32.tflite", "model_float32.json"} <= {
        files.basename(p) for p in files.walk(out)
    }
    # A .keras URL to another --out URL.
    assert (
        export_main(
            [
                f"{workdir}/model.keras",
                "--out",
                f"{root}/exported",
                "--formats",
                "tflite",
                "--quantize",
                "float32",
                "--latency-runs",
                "2",
            ]
        )
        == 0
    )
    assert files.isfile(f"{root}/exported/model_float32.tflite")

    # predict: every artifact kind from a URL, on an image from a URL, agrees with the Keras model in memory.
    with files.load_numpy(f"{workdir}/samples/heldout.npz") as held:
        image = held["images"][0]
    png = io.BytesIO()
    Image.fromarray(image).save(png, format="PNG")
    image_url = files.atomic_write_bytes(f"{root}/images/0.png", png.getvalue())
    model = remote_run.resumed.model
    expected = int(np.argmax(model.predict(to_model_space([image], model.input_shape[1:3]), verbose=0)[0]))
    for artifact in (
        f"{out}/model_float32.tflite",
        f"{out}/saved_model",
        f"{workdir}/model.keras",
        workdir,
        f"{root}/exported/model_float32.tflite",
    ):
        (result,) = export.predict(artifact, [image_url], top_k=1)
        assert result["top_k"][0]["id"] == expected, artifact
    capsys.readouterr()
    assert export_main(["predict", f"{out}/model_float32.tflite", image_url, "--top-k", "1"]) == 0
    assert capsys.readouterr().out.startswith(image_url)

    # keras_vit.inspect: a workdir URL (its model and held-out samples) into an --out URL.
    assert inspect_main([workdir, "--out", f"{root}/inspect"]) == 0
    assert files.listdir(f"{root}/inspect") == [
        "attention_distance.png",
        "attention_rollout.png",
        "embedding_filters.png",
        "position_embedding_similarity.png",
    ]
    _nothing_local(remote_run.cwd)
