"""The `--init` checkpoint of a fine-tuning run: checked before the framework loads (`check_init`), read once while
the run is planned (`read_init`), loaded into the built model (`initialise_from`). Imports no Keras."""

import contextlib

import keras_vit
from keras_vit.weights import pretrained


def check_init(source):
    """Raises for a local `--init` that cannot be a checkpoint (`keras_vit.weights.pretrained.check_source`): a missing
    path that is no catalogue name, a broken `.safetensors` / `.npz`, a folder no reader takes. Downloads nothing."""
    with _missing_init():
        pretrained.check_source(source)


def read_init(source):
    """The `--init` checkpoint, read (and downloaded into its cache) once."""
    from keras_vit.weights.model_io import read_checkpoint

    with _missing_init():
        return read_checkpoint(source)


def initialise_from(model, source, new_head=False):
    """Loads the `--init` checkpoint into `model` for fine-tuning.

    Any source `keras_vit.load_weights` takes: a catalogue name, `hf://` repo, URL, `.npz`, `.keras` model or a
    folder of timm / transformers / keras-hub layout, or a checkpoint `read_init` already read. Position
    embeddings are interpolated to the model's patch grid and a head with another class count is left at its
    fresh zero initialisation (`keras_vit.load_npz`'s rules); `new_head=True` does not load the checkpoint's head
    at all, the run's own summary line saying so instead of a warning. Downloads are cached, so a resumed run does
    not fetch the checkpoint again. Returns the `LoadReport`.
    """
    with _missing_init():
        return keras_vit.load_weights(model, source, new_head=new_head)


@contextlib.contextmanager
def _missing_init():
    """A missing checkpoint as one `FileNotFoundError` that says it is the `--init` one."""
    try:
        yield
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--init checkpoint not found: {err}") from None
