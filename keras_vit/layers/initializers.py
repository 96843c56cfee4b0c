"""Initialisers that several weights of one layer share without sharing their values."""

import keras


def independent(initializer, index):
    """A copy of `initializer` whose draws are its own (the `index`-th of several weights that share it).

    A Keras random initialiser holds one seed and draws the same values at every call, so one instance given to the
    query, key, value and output projections would start them equal. An unseeded initialiser is copied, which draws
    a new seed from the global generator (`keras.utils.set_random_seed` still makes the model reproducible); a
    seeded one is copied with its integer seed moved by `index`; a `SeedGenerator` seed already advances per draw.
    """
    seed = getattr(initializer, "_init_seed", None)
    if index == 0 or not hasattr(initializer, "seed") or isinstance(seed, keras.random.SeedGenerator):
        return initializer
    config = initializer.get_config()  # not keras.initializers.serialize: that imports TensorFlow where it can
    if isinstance(seed, int):
        config["seed"] = seed + index
    return type(initializer).from_config(config)
