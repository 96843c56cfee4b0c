""" "Did you mean" for names the user types: configs, variants, options, export modes."""

import difflib


def did_you_mean(name, choices):
    """ " Did you mean 'x'?" for the closest of `choices` to `name`, or "" when none is close.

    Case is ignored when comparing; the suggestion is spelled as in `choices`.
    """
    choices = [str(c) for c in choices]
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.6)
    return f" Did you mean {lowered[close[0]]!r}?" if close else ""
