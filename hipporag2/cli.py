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

from hipporag2.compose import CONFIG_DIR, compose, dictconfig_to_config, to_config  # noqa: F401 (compose: for scripts)
from hipporag2.config import ConfigError
from hipporag2.data.errors import DataError

log = logging.getLogger("hipporag2")


def format_metrics(report, ks=(1, 2, 5, 10, 20)) -> str:
    """The table a run prints: a RunReport (or a metrics.json object)."""
    from hipporag2.results import RunReport

    r = report if isinstance(report, RunReport) else RunReport.from_json(report)
    head = f"{'dataset':<16}{'method':<14}{'n':>5}" + "".join(f"{'R@' + str(k):>8}" for k in ks) + f"{'fallbacks':>16}"
    # Next to the recall they produced: queries answered by the dense ranking.
    fb = f"{r.dense_fallbacks} ({100 * r.dense_fallback_rate:.1f}%)"
    row = f"{r.dataset:<16}{r.method:<14}{r.n_queries:>5}" + "".join(
        f"{(r.recall_at(k) if r.recall_at(k) is not None else float('nan')):>8.1f}" for k in ks
    ) + f"{fb:>16}"
    extra = ""
    if r.qa_em is not None:
        extra = f"\nQA: EM {r.qa_em:.1f}  F1 {r.qa_f1:.1f}"
    failures = r.extra.get("llm_failures")
    if failures:
        # every LLM stage of the run, failed or not: a 0 says the stage was asked and answered
        extra += "\nLLM failures (after retries): " + "  ".join(f"{stage} {n}" for stage, n in failures.items())
    return head + "\n" + row + extra


@contextmanager
def user_errors() -> Iterator[None]:
    """A bad config or input file ends a command with its one-line message (which names
    the file, record and field) and exit status 2, not a traceback; so does a write the
    operating system refuses (no space, permission, read-only, a file in the way:
    `atomicio.StorageError` names the path and what was being written)."""
    from hipporag2.files.atomicio import os_error_line
    from hipporag2.gates import GateError

    try:
        yield
    except (ConfigError, DataError, GateError) as e:
        _fail(str(e))
    except OSError as e:
        line = os_error_line(e)
        if line is None:
            raise
        _fail(line)


def _fail(message: str) -> None:
    if logging.getLogger().handlers:  # a run's log (not Python's stderr fallback: one line only)
        log.error("%s", message)
    print(f"error: {message}", file=sys.stderr)
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
        os.environ.pop(self.ENV, None)

    def _redact(self, config: DictConfig) -> None:
        from hipporag2.files.redact import redact_file, register_key_env

        sweep_dir = os.environ.get(self.ENV)
        if sweep_dir:
            register_key_env(OmegaConf.select(config, "llm.api_key_env", default=None))
            register_key_env(OmegaConf.select(config, "embedding.api_key_env", default=None))
            redact_file(Path(sweep_dir) / "multirun.yaml")


# What Hydra and the run lock leave in a run folder before any work.
_START_FILES = {".hydra", "run.log", ".run.lock"}
FAILED_MARK = "FAILED"


def discard_failed_start(run_dir: Path, message: str) -> None:
    """A run that stopped on a config, input or gate error leaves no folder that looks
    like a run: one holding only Hydra's start-up files is removed, any other (with a
    checkpoint worth keeping for the rerun) gets a FAILED file with the message."""
    if not run_dir.is_dir():
        return
    import shutil

    if {p.name for p in run_dir.iterdir()} <= _START_FILES:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        try:
            (run_dir / FAILED_MARK).write_text(message + "\n", encoding="utf-8")
        except OSError:
            pass  # a full or read-only run folder: the error line already said why


def _job_run_dir(dcfg: DictConfig) -> Path:
    """The folder Hydra made for this job: `run_dir` for a single run; for `-m`,
    `hydra.sweep.dir/hydra.sweep.subdir` (Hydra's convention: a sweep's jobs live
    under its sweep folder)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return Path(hc.runtime.output_dir)
    return Path(dcfg.run_dir)


def _job_overrides() -> list:
    """The overrides that made this job (kept in metrics.json for the report)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _main(dcfg: DictConfig) -> None:
    from hipporag2.pipeline import run

    job_dir = _job_run_dir(dcfg)
    try:
        with user_errors():
            cfg = to_config(dcfg)
            if Path(cfg.run_dir).absolute() != job_dir.absolute():
                cfg.run_dir = str(job_dir)
            metrics = run(cfg, overrides=_job_overrides())
    except SystemExit as e:
        discard_failed_start(job_dir, f"exit status {e.code}; see run.log")
        raise
    (job_dir / FAILED_MARK).unlink(missing_ok=True)
    print(format_metrics(metrics))
    print(f"run directory: {cfg.run_dir}")


def _hydra_args(argv: list[str]):
    from hydra._internal.utils import get_args_parser

    args, _unknown = get_args_parser().parse_known_args(argv)
    return args


def main() -> None:
    """`hipporag2`: our help, start-up checks of every job, then Hydra runs the job(s);
    SIGINT / SIGTERM end it with one line and exit status 130 / 143."""
    from hipporag2 import helptext
    from hipporag2.config_check import check_overrides
    from hipporag2.runtime.interrupts import exit_on_signal

    argv = sys.argv[1:]
    if "--help-keys" in argv:
        print(helptext.key_help())
        sys.exit(0)
    args = _hydra_args(argv)
    if args.help:
        print(helptext.main_help())
        sys.exit(0)
    checks = not (args.hydra_help or args.shell_completion or args.info or args.experimental_rerun
                  or args.config_path or args.config_name or args.config_dir)
    with exit_on_signal():
        if checks and args.multirun and args.cfg:
            # Hydra allows --cfg with single runs only: print each job of the sweep.
            jobs: list = []
            with user_errors():
                check_overrides(args.overrides, multirun=True, keep_jobs=jobs, environment=False)
            print_sweep_jobs(jobs, args.cfg)
            sys.exit(0)
        if checks:
            with user_errors():
                check_overrides(args.overrides, multirun=bool(args.multirun), environment=not args.cfg)
        _main()


def print_sweep_jobs(jobs, part: str) -> None:
    """`hipporag2 -m ... --cfg job|hydra|all`: every job's overrides and composed config
    (the part Hydra's own --cfg would print for that job), then the number of jobs."""
    from omegaconf import OmegaConf

    for i, (overrides, dcfg) in enumerate(jobs, start=1):
        print(f"# job {i}/{len(jobs)}: {' '.join(overrides)}")
        conf = OmegaConf.to_container(dcfg, resolve=False)
        if part == "job":
            conf.pop("hydra", None)
        elif part == "hydra":
            conf = {"hydra": conf.get("hydra")}
        print(OmegaConf.to_yaml(conf), end="")
    print(f"# {len(jobs)} jobs")


if __name__ == "__main__":
    main()
