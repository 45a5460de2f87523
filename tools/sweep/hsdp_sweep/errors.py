"""The one error hsdp-sweep reports as bad input (exit code 2)."""


class InputError(Exception):
    """A bad spec, deck, study directory or option: the message names it."""
