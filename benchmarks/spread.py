"""How a per-round figure and a target are written in the tables: the median with its min-max, the met state."""


def with_spread(entry, digits=2, key="median"):
    """`1.07 (0.98-1.15)`: the median of per-round values (`entry[key]`) and their min-max (the median alone for
    one round)."""
    if not entry or entry.get(key) is None:
        return "-"
    text = f"{entry[key]:.{digits}f}"
    if len(entry.get("rounds", ())) > 1:
        text += f" ({entry['min']:.{digits}f}-{entry['max']:.{digits}f})"
    return text


def target_state(target):
    """The "met" column: yes only when every round meets the bound; "median only" when just the median does."""
    if target.get("met") is None:
        return "n/a"
    rounds = len(target.get("rounds", ()))
    if rounds <= 1:  # a single measurement (the wall time, the trained digits model): nothing to count
        return "yes" if target["met"] else "no"
    state = "yes" if target["met"] else target.get("state", "no")
    return f"{state} ({target['rounds_met']}/{rounds} rounds)"
