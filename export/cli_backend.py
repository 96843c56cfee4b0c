"""`python -m export` converts with TensorFlow, so it runs Keras' TensorFlow backend whatever KERAS_BACKEND says.

A shell that trained with `KERAS_BACKEND=jax` can export right away (the `.keras` file is backend-neutral). Python
imports the `export` package (which imports this module first) before `export/__main__.py`, while
`keras_vit._startup.command_line()` names the command being started, and Keras reads KERAS_BACKEND when it is first
imported: so the switch happens here, for the command line only. `import export` in a JAX session changes nothing,
and `export.export_model` then says that it needs the TensorFlow backend.
"""

import os
import sys

from keras_vit import _startup

_BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
if _startup.command_line() is not None and "keras" not in sys.modules and _BACKEND != "tensorflow":
    print(f"[export] KERAS_BACKEND={_BACKEND} -> tensorflow: export converts with TensorFlow", file=sys.stderr)
    os.environ["KERAS_BACKEND"] = "tensorflow"
