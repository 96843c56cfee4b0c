"""A run's options: `TrainConfig`, its types and ranges, `--set` overrides, and what resolves from the checkpoint."""

from keras_vit import _lazy

__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "StrategyError": ".config",
        "TrainConfig": ".config",
        "check_strategy": ".config",
        "option_choices": ".config",
        "steps_per_execution_for": ".config",
        "parse_overrides": ".overrides",
        "from_record": ".resolve",
        "model_config": ".resolve",
        "resolve_run": ".resolve",
    },
)
