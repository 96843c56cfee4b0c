"""A run's checkpoints: the file, writing and resuming, the callback that saves on time, and the `--init` source."""

from keras_vit import _lazy

__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "CHECKPOINT_NAME": ".checkpoint_file:NAME",
        "CheckpointError": ".checkpointing",
        "CheckpointManager": ".checkpointing",
        "NonFiniteStateError": ".checkpointing",
        "Resume": ".checkpointing",
        "find_resume": ".checkpointing",
        "FaultTolerance": ".fault_tolerance",
        "NonFiniteLossError": ".fault_tolerance",
        "Preempted": ".fault_tolerance",
        "check_init": ".init_checkpoint",
        "initialise_from": ".init_checkpoint",
        "read_init": ".init_checkpoint",
    },
)
