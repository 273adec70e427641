"""Config composition: the Hydra config tree shipped in the package (`hipporag2/configs`)
composed into a checked `Config`, for the library, the CLI and scripts alike.

It sits below both clients so that `HippoRAG(save_dir, overrides=[...])` and
`hipporag2 ...` compose the same way without the library importing the CLI, and it
reads the tree from the installed package (not the checkout), so a wheel works from
any folder. The resolvers the tree uses are registered on import.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from hipporag2.config import Config, register_configs, validate

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = str(PACKAGE_DIR / "configs")
REFERENCE_DIR = PACKAGE_DIR / "reference"  # our expected numbers and the paper's (results/reference links here)

register_configs()


def short_hash(text: str) -> str:
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:10]


# `${hash:...}` names run directories by the overrides that define a run, so the same
# command resumes in place and two settings never share a folder.
if not OmegaConf.has_resolver("hash"):
    OmegaConf.register_new_resolver("hash", short_hash)
# `${resources:demo}` = a folder shipped inside the package, wherever it is installed.
# `${sweep_dir:DEFAULT}` = the folder of the sweep this job belongs to. A job resolves
# its config with its own overrides, so a sweep folder named by a hash of the command's
# overrides would come out different in every job; the sweeping process publishes the
# folder it made (cli.RedactSweepFiles.on_multirun_start) and its jobs read it back.
if not OmegaConf.has_resolver("sweep_dir"):
    OmegaConf.register_new_resolver("sweep_dir", lambda default: os.environ.get("HIPPORAG2_SWEEP_DIR") or default)
if not OmegaConf.has_resolver("resources"):
    OmegaConf.register_new_resolver("resources", lambda name: str(PACKAGE_DIR / "resources" / name))


def to_config(dcfg: DictConfig) -> Config:
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, Config)
    return validate(cfg)


def dictconfig_to_config(dcfg: DictConfig) -> Config:
    """The checked Config of a composition made with `return_hydra_config=True`; the
    Hydra part is set as in a real run, so `${hydra:...}` (the run_dir name) resolves
    the same way, then dropped."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    HydraConfig.instance().set_config(dcfg)
    with open_dict(dcfg):
        del dcfg["hydra"]
    return to_config(dcfg)


def compose(overrides: Optional[Sequence[str]] = None) -> Config:
    """The Config that `hipporag2 OVERRIDES...` would run, for the library, scripts and tests."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        dcfg = hydra_compose(config_name="config", overrides=list(overrides or []), return_hydra_config=True)
        return dictconfig_to_config(dcfg)


__all__: List[str] = ["CONFIG_DIR", "REFERENCE_DIR", "compose", "dictconfig_to_config", "to_config", "short_hash"]
