"""Training ViTs with the paper's recipes through `keras.Model.fit`, on one CPU, GPUs or a TPU pod.

```python
import training
result = training.train("digits", "runs/digits", epochs=5)   # a second call resumes
print(result.metrics["top1"])
training.evaluate("runs/digits")
```
From a shell: `python -m training --config digits --workdir runs/digits` (see `python -m training --help`).
"""

# `python -m training` parses its arguments before importing Keras (keras_vit/_startup.py), so that --help and typos
# answer at once; its __main__ calls _load() after. Every other import loads everything now.
from keras_vit import _startup, _tpu_runtime


def _load():
    """Imports the trainer and the evaluation (and with them Keras and TensorFlow)."""
    # First, before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
    # (keras_vit/_tpu_runtime.py). Then keras_vit's layers, which `keras.saving.load_model` needs registered.
    _tpu_runtime.disable_libtpu_without_tpu()
    import keras_vit

    keras_vit._load()
    from .checkpointing import NonFiniteLossError, Preempted
    from .config import TrainConfig, available_configs, get_config
    from .distribution import Placement, select_placement
    from .evaluation import evaluate
    from .strategy import StrategyError, select_strategy
    from .trainer import TrainResult, train

    globals().update(
        NonFiniteLossError=NonFiniteLossError,
        Placement=Placement,
        Preempted=Preempted,
        StrategyError=StrategyError,
        TrainConfig=TrainConfig,
        TrainResult=TrainResult,
        available_configs=available_configs,
        evaluate=evaluate,
        get_config=get_config,
        select_placement=select_placement,
        select_strategy=select_strategy,
        train=train,
    )


_tpu_runtime.disable_libtpu_without_tpu()
if not _startup.parses_first():
    _load()


__all__ = [
    "NonFiniteLossError",
    "Placement",
    "Preempted",
    "StrategyError",
    "TrainConfig",
    "TrainResult",
    "available_configs",
    "evaluate",
    "get_config",
    "select_placement",
    "select_strategy",
    "train",
]

__getattr__ = _startup.deferred_getattr(__name__, __all__, _load)
