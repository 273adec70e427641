"""The error a bad setting raises, in a module of its own so that the registries and
the config schema can both raise it without importing each other."""
from __future__ import annotations


class ConfigError(ValueError):
    """An invalid setting: the message names the config key and the accepted values.
    The CLI prints it as one line and exits with status 2."""
