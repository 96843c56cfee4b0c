"""Training recipes: one module per recipe, each with `get_config() -> TrainConfig` and its command line."""
