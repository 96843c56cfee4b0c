"""`pip install keras-vit` plus JAX, in a venv where TensorFlow cannot be imported: the model library runs.

The wheel is built from a copy of the checkout (tests/support/builds.py) and installed with what its base
requirements and `jax` pull in, packed from this environment's installed distributions (tests/support/wheelhouse.py) and
installed offline (`--no-index`), so the venv holds exactly those, at this environment's versions. In it, with
KERAS_BACKEND=jax and from another directory: a timm folder loads and gives timm's own logits, predictions carry
class names, the model is saved as a transformers folder (which loads back to the same logits) and as `.keras`,
`keras-vit inspect` writes its figures and `keras-vit weights list` its catalogue; `keras-vit train` names the
extra it needs.
"""

import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.utils import canonicalize_name

from tests.conftest import ROOT
from tests.support import builds, wheelhouse

pytestmark = [pytest.mark.slow, pytest.mark.process]  # wheel builds and installs into fresh venvs

TIMM = ROOT / "tests" / "fixtures" / "interop" / "timm_vit_tiny"
CLASS_NAMES = ["apple", "bus", "cat", "dog", "egg"]
# What only the extras install: none may be in the base venv.
EXTRAS_ONLY = {"tensorflow", "tensorflow-datasets", "scikit-learn", "mediapipe", "openvino", "onnx", "onnxruntime"}

SCRIPT = """
import json, sys
import numpy as np
import keras_vit
from keras_vit import inspect as vit_inspect

timm, out, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
io = np.load(timm + "/io.npz")
model = keras_vit.from_pretrained(timm, class_names=names)
logits = np.asarray(model.predict(io["images"], verbose=0))
top = keras_vit.decode_predictions(logits, top_k=2, class_names=model)
keras_vit.save_pretrained(model, out + "/transformers", format="transformers")
again = keras_vit.from_pretrained(out + "/transformers")
model.save(out + "/model.keras")
rollout = vit_inspect.attention_rollout(model, io["images"][:1]).image
print(json.dumps({
    "timm_diff": float(np.abs(logits - io["logits"]).max()),
    "reload_diff": float(np.abs(np.asarray(again.predict(io["images"], verbose=0)) - logits).max()),
    "top": [[p.name for p in row] for row in top],
    "expected_top": [[names[i] for i in np.argsort(-row)[:2]] for row in io["logits"]],
    "reloaded_names": list(again.class_names or ()),
    "rollout_shape": list(rollout.shape),
    "backend": __import__("keras").backend.backend(),
    "tensorflow_imported": "tensorflow" in sys.modules,
}))
"""


def _disk_usage(path):
    """`du -sh`'s figure for a folder ("801M"), what docs/ quotes for the install."""
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]


def _base_requirements(wheel):
    """The wheel's own Requires-Dist lines without an extra: what `pip install keras-vit` installs."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    requires = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in requires if "extra ==" not in r]


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory):
    """(venv folder, the distributions it was given): the wheel and JAX with their requirements, nothing else."""
    tmp_path = tmp_path_factory.mktemp("base")
    source = builds.source_copy(tmp_path)
    build_options, build_env = builds.build_options()
    wheels = tmp_path / "wheels"
    builds.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *build_options, "-w", str(wheels), "."],
        source,
        {**builds.clean_env(), **build_env},
    )
    (wheel,) = wheels.glob("keras_vit-*.whl")
    jax = f"jax=={importlib.metadata.version('jax')}"
    given = wheelhouse.build([*_base_requirements(wheel), jax], tmp_path / "wheelhouse")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-index"]
    builds.run([*install, "--find-links", str(tmp_path / "wheelhouse"), str(wheel), jax], tmp_path, builds.clean_env())
    shutil.rmtree(tmp_path / "wheelhouse")  # about as large as the venv; pytest keeps its last temporary folders
    yield venv, given
    shutil.rmtree(tmp_path)


def _venv_env():
    env = {k: v for k, v in builds.clean_env().items() if not k.startswith(("KERAS_", "JAX_"))}
    return {**env, "KERAS_BACKEND": "jax"}


def test_the_base_install_holds_no_tensorflow(base_venv):
    venv, given = base_venv
    python = str(venv / "bin" / "python")
    code = "import importlib.metadata as m, importlib.util as u, json; print(json.dumps([sorted(d.metadata['Name'] "
    code += "for d in m.distributions()), u.find_spec('tensorflow') is None]))"
    installed, no_tensorflow = json.loads(builds.run([python, "-c", code], venv, _venv_env()).stdout)
    names = {canonicalize_name(n) for n in installed}
    assert no_tensorflow, "tensorflow is importable in the base venv"
    assert not names & EXTRAS_ONLY, f"extras' packages in the base install: {sorted(names & EXTRAS_ONLY)}"
    assert {"keras-vit", "keras", "jax", "safetensors", "huggingface-hub", "pillow"} <= names
    assert names == {"keras-vit", *given}, "the venv holds other distributions than the requirements pull in"
    size = _disk_usage(venv)
    print(f"\nbase install + jax: {len(names)} distributions, du -sh {size}")
    # README quotes 801M (and 3.8G for the dependencies of before the split): a venv past 1 GiB contradicts it.
    assert size.endswith("M"), f"the base venv takes {size}"


def test_the_library_loads_predicts_saves_and_inspects_without_tensorflow(base_venv, tmp_path):
    venv, _ = base_venv
    out = tmp_path / "out"
    out.mkdir()
    result = builds.run(
        [str(venv / "bin" / "python"), "-c", SCRIPT, str(TIMM), str(out), json.dumps(CLASS_NAMES)],
        tmp_path,
        _venv_env(),
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == "jax" and not report["tensorflow_imported"]
    assert report["timm_diff"] < 1e-4, report  # timm's own logits (io.npz), not keras-vit's
    assert report["reload_diff"] < 1e-5, report
    assert report["top"] == report["expected_top"], report
    assert report["reloaded_names"] == CLASS_NAMES
    assert report["rollout_shape"] == [1, 32, 32]
    assert (out / "transformers" / "model.safetensors").is_file()

    command = str(venv / "bin" / "keras-vit")
    plots = tmp_path / "plots"
    inspected = builds.run([command, "inspect", str(out / "model.keras"), "--out", str(plots)], tmp_path, _venv_env())
    assert sorted(p.name for p in plots.glob("*.png")) == [
        "attention_distance.png", "attention_rollout.png", "embedding_filters.png", "position_embedding_similarity.png",
    ], inspected.stdout  # fmt: skip

    listed = builds.run([command, "weights", "list"], tmp_path, _venv_env())
    assert "vit_tiny_patch16_224.augreg_in21k_ft_in1k" in listed.stdout

    trained = subprocess.run(
        [command, "train", "--workdir", str(tmp_path / "run")], cwd=tmp_path, env=_venv_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 2, trained.stderr[-3000:]
    assert trained.stderr.strip() == (
        "error: keras-vit train needs tensorflow, which is not installed: pip install 'keras-vit[train]' "
        "(in a checkout: pip install -r requirements.txt)"
    )
