"""Which library versions an encoder may run under (pure checks, no subprocess).

A model that ships remote code (`trust_remote_code: true`) is loaded only under a
transformers version its preset lists in `vetted_transformers`; a worker environment
must also hold every `dist==version` of `requires`. `hipporag2.embed.worker` applies
these to the worker's environment, `check_in_process` to this process.
"""
from __future__ import annotations

from typing import Dict, List

from hipporag2.embed import model_worker
from hipporag2.embed.errors import EncoderError

SETUP_HINT = "make setup-encoders"


def _pins(cfg) -> Dict[str, str]:
    out = {}
    for pin in cfg.requires:
        name, sep, version = str(pin).partition("==")
        if not sep:
            raise EncoderError(f"embedding.requires entry {pin!r} is not of the form dist==version")
        out[name.strip().lower()] = version.strip()
    return out


def version_problems(cfg, versions: Dict[str, str], pins: bool = True) -> List[str]:
    """What an environment with `versions` lacks for this encoder (empty: nothing);
    `pins=False` checks only the transformers version for remote code."""
    problems = []
    for dist, want in (_pins(cfg).items() if pins else ()):
        have = versions.get(dist)
        if have != want:
            problems.append(f"{dist}=={want} (has {have or 'none'})")
    if cfg.trust_remote_code:
        have = versions.get("transformers", "none")
        if have not in [str(v) for v in cfg.vetted_transformers]:
            vetted = ", ".join(str(v) for v in cfg.vetted_transformers) or "none listed"
            problems.append(f"a transformers version vetted for {cfg.model}'s remote code ({vetted}; has {have})")
    return problems


def check_in_process(cfg) -> None:
    """In this process: remote code only under a vetted transformers version."""
    problems = version_problems(cfg, model_worker.installed_versions(), pins=False)
    if problems:
        raise EncoderError(f"embedding={cfg.name} with embedding.runner=in_process needs {problems[0]}; "
                           f"use embedding.runner=worker (`{SETUP_HINT}`)")


