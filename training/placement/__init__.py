"""Where a run computes: the devices, strategy or distribution on either Keras backend, and its processes."""

from keras_vit import _lazy

__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "select_placement": ".distribution",
        "set_matmul_precision": ".distribution",
        "JaxPlacement": ".placements",
        "Placement": ".placements",
        "TensorFlowPlacement": ".placements",
        "processes": ".processes",
        "select_strategy": ".strategy",
    },
)
