"""The error an encoder that cannot be trusted or reached raises (a missing encoder
environment, a wrong model name, a server whose answers change): a ConfigError, so
the CLI prints it as one line with exit status 2."""
from __future__ import annotations

from hipporag2.errors import ConfigError


class EncoderError(ConfigError):
    pass
