"""Hydra entry point `hipporag2`: one run of the pipeline from a composed config."""
from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from hipporag2.config import Config, ConfigError, register_configs, validate
from hipporag2.data.errors import DataError

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")
log = logging.getLogger("hipporag2")

register_configs()


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:10]


# `${hash:...}` names run directories by the overrides that define a run, so the same
# command resumes in place and two settings never share a folder.
if not OmegaConf.has_resolver("hash"):
    OmegaConf.register_new_resolver("hash", _short_hash)
# `${resources:demo}` = a folder shipped inside the package, wherever it is installed.
if not OmegaConf.has_resolver("resources"):
    OmegaConf.register_new_resolver("resources", lambda name: str(Path(__file__).resolve().parent / "resources" / name))


def to_config(dcfg: DictConfig) -> Config:
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, Config)
    return validate(cfg)


def compose(overrides: list[str] | None = None) -> Config:
    """The Config that `hipporag2 OVERRIDES...` would run, for scripts and tests."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        dcfg = hydra_compose(config_name="config", overrides=list(overrides or []), return_hydra_config=True)
        # Set as in a real run, so `${hydra:...}` (the run_dir name) resolves the same way.
        HydraConfig.instance().set_config(dcfg)
        with open_dict(dcfg):
            del dcfg["hydra"]
        return to_config(dcfg)


def format_metrics(report, ks=(1, 2, 5, 10, 20)) -> str:
    """The table a run prints: a RunReport (or a metrics.json object)."""
    from hipporag2.results import RunReport

    r = report if isinstance(report, RunReport) else RunReport.from_json(report)
    head = f"{'dataset':<16}{'method':<14}{'n':>5}" + "".join(f"{'R@' + str(k):>8}" for k in ks)
    row = f"{r.dataset:<16}{r.method:<14}{r.n_queries:>5}" + "".join(
        f"{(r.recall_at(k) if r.recall_at(k) is not None else float('nan')):>8.1f}" for k in ks
    )
    extra = ""
    if r.qa_em is not None:
        extra = f"\nQA: EM {r.qa_em:.1f}  F1 {r.qa_f1:.1f}"
    return head + "\n" + row + extra


@contextmanager
def user_errors() -> Iterator[None]:
    """A bad config or input file ends a command with its one-line message (which names
    the file, record and field) and exit status 2, not a traceback."""
    try:
        yield
    except (ConfigError, DataError) as e:
        log.error("%s", e)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


class RedactSweepFiles(Callback):
    """Masks secrets in a multirun's `multirun.yaml`, which holds every override as typed.

    Hydra writes that file in the sweeping process after `on_multirun_start` and before
    any job starts. A job cannot recompute the sweep folder (its name interpolates the
    job's own overrides), so the sweeping process passes it on in the environment,
    which local and SLURM jobs inherit, and every job start and the sweep's end mask it.
    """

    ENV = "HIPPORAG2_SWEEP_DIR"

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        os.environ[self.ENV] = str(Path(config.hydra.sweep.dir).absolute())

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        self._redact(config)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        self._redact(config)

    def _redact(self, config: DictConfig) -> None:
        from hipporag2.redact import redact_file, register_key_env

        sweep_dir = os.environ.get(self.ENV)
        if sweep_dir:
            register_key_env(OmegaConf.select(config, "llm.api_key_env", default=None))
            redact_file(Path(sweep_dir) / "multirun.yaml")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _main(dcfg: DictConfig) -> None:
    from hipporag2.pipeline import run

    with user_errors():
        cfg = to_config(dcfg)
        metrics = run(cfg)
    print(format_metrics(metrics))
    print(f"run directory: {cfg.run_dir}")


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
