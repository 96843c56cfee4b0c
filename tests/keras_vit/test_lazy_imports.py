"""The packages' lazy-import tables (keras_vit/_lazy.py): every public name resolves, as an attribute and through
`from X import Y`; a plain `import keras_vit` imports no Keras yet registers keras-vit's classes for
`keras.saving.load_model` once Keras is imported, in either order."""

import importlib
import os
import subprocess
import sys

import pytest

from keras_vit import _lazy
from tests.conftest import ROOT

PACKAGES = (
    "keras_vit",
    "keras_vit.models",
    "keras_vit.weights",
    "keras_vit.inspect",
    "training",
    "training.options",
    "training.placement",
    "training.checkpoints",
    "export",
)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_and_from_import_works(package):
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None, f"{package}.{name}"
        namespace = {}
        exec(f"from {package} import {name}", namespace)  # the statement a user writes
        assert namespace[name] is value, f"from {package} import {name}"
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_public_names_are_the_objects_of_their_modules():
    import export
    import keras_vit
    import training
    from export.predict import predict
    from export.tflite import converter as tflite
    from keras_vit.weights import pretrained

    assert keras_vit.load_npz is keras_vit.weights.load_npz
    assert keras_vit.from_pretrained is pretrained.from_pretrained
    assert keras_vit.layers.__name__ == "keras_vit.layers"
    assert export.convert_tflite is tflite.convert
    # `export.predict` is the function although its module of the same name is imported.
    assert export.predict is predict and callable(export.predict)
    assert training.train.__module__ == "training.trainer"


def _fake_module(tmp_path, name):
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    return name


def test_when_imported_calls_back_once_after_the_module_runs(tmp_path):
    name = _fake_module(tmp_path, "lazy_hook_probe")
    seen = []
    try:
        _lazy.when_imported(name, lambda: seen.append(sys.modules[name].VALUE))
        assert seen == []  # nothing imported yet
        importlib.import_module(name)
        assert seen == [1]  # after the module's own code ran
        importlib.reload(sys.modules[name])
        _lazy.when_imported(name, lambda: seen.append("now"))  # already imported: at once
        assert seen == [1, "now"]
        assert not any(isinstance(f, _lazy._AfterImport) and f.name == name for f in sys.meta_path)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


LOAD = """
import sys
{first}
import keras
model = keras.saving.load_model(sys.argv[1])
print("LOADED", type(model).__name__, model.get_layer("embedding").__class__.__module__)
"""


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    import keras_vit

    path = tmp_path_factory.mktemp("lazy") / "tiny.keras"
    keras_vit.create_model("testing", image_size=16, num_classes=3).save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "first",
    [
        "import keras_vit; assert 'keras' not in sys.modules, 'import keras_vit imported Keras'",
        "import keras; import keras_vit",
        "from keras_vit.layers import PatchEmbedding",  # Keras first imported by keras_vit's own layers
    ],
)
def test_a_plain_import_registers_the_classes_for_load_model(saved_model, first):
    # The numpy backend: the lightest to import, and it loads `.keras` files like the others.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "numpy"}
    result = subprocess.run(
        [sys.executable, "-c", LOAD.format(first=first), str(saved_model)], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LOADED VisionTransformer keras_vit.layers.patch_embedding" in result.stdout, result.stdout


def test_no_package_decides_by_the_command_line():
    # The lazy tables replaced argv sniffing: nothing in the library reads sys.argv[0] or sys.orig_argv at import.
    for folder in ("keras_vit", "training", "export"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            assert "orig_argv" not in text and "sys.argv[:1]" not in text, path


@pytest.mark.slow
def test_a_probe_for_keras_does_not_use_up_the_registration():
    """`importlib.util.find_spec("keras")` before Keras is imported (availability checks do it) once consumed the
    hook that registers keras_vit's classes, so `load_model` could not find VisionTransformer afterwards."""
    code = (
        "import importlib.util, keras_vit; importlib.util.find_spec('keras'); import keras; "
        "print(keras.saving.get_registered_object('keras_vit>VisionTransformer') is not None)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "True", result.stdout
