"""Training ViTs with the paper's recipes through `keras.Model.fit`, on one CPU, GPUs or a TPU pod: `train` (a second
call resumes) and `evaluate`. From a shell: `python -m training --help`."""

# Importing keras_vit first runs its TPU guard (before anything here imports TensorFlow). The public names are
# imported on first use (keras_vit/_lazy.py), so `python -m training --help` answers before Keras loads.
from keras_vit import _lazy

__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "NonFiniteLossError": ".checkpoints",
        "Preempted": ".checkpoints",
        "TrainConfig": ".options",
        "available_configs": ".configs",
        "get_config": ".configs",
        "Placement": ".placement",
        "select_placement": ".placement",
        "evaluate": ".evaluation",
        "StrategyError": ".options",
        "select_strategy": ".placement",
        "TrainResult": ".trainer",
        "train": ".trainer",
    },
)
