"""The `remat` option's values, read once here for the config and the encoder block (no Keras import)."""

REMAT_SETTINGS = (False, "elementwise", True)


def remat_setting(value):
    """One value per meaning: False or None (nothing recomputed), "elementwise", True or "block" (whole blocks: True,
    as configs have said since the option was a bool)."""
    if value is None or value is False:
        return False
    if value is True or value == "block":
        return True
    if value == "elementwise":
        return "elementwise"
    raise ValueError(f"remat must be False, True, 'block' or 'elementwise'. Received: remat={value!r}")
