"""Training ViTs with the paper's recipes through `keras.Model.fit`, on one CPU, GPUs or a TPU pod.

```python
import training
result = training.train("digits", "runs/digits", epochs=5)   # a second call resumes
print(result.metrics["top1"])
training.evaluate("runs/digits")
```
From a shell: `python -m training --config digits --workdir runs/digits` (see `python -m training --help`).
"""

# First, before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). Importing keras_vit runs this too, before it imports Keras.
from keras_vit import _tpu_runtime

_tpu_runtime.disable_libtpu_without_tpu()

from training.checkpointing import NonFiniteLossError, Preempted
from training.config import TrainConfig, available_configs, get_config
from training.distribution import Placement, select_placement
from training.strategy import StrategyError, select_strategy
from training.trainer import TrainResult, evaluate, train

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
