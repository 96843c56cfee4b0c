"""Training ViTs with the paper's recipes through `keras.Model.fit`, on one CPU, GPUs or a TPU pod.

```python
import training
result = training.train("digits", "runs/digits", epochs=5)   # a second call resumes
print(result.metrics["top1"])
training.evaluate("runs/digits")
```
From a shell: `python -m training --config digits --workdir runs/digits` (see `python -m training --help`).
"""

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
