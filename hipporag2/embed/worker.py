"""Encoders that run in an environment of their own, reached over a pipe.

NV-Embed-v2, GTE-Qwen2-7B-instruct and GritLM-7B load remote code written for
transformers 4.4x (NV-Embed-v2 imports names transformers 5 removed; GTE-Qwen2's
`modeling_qwen.py` calls cache methods removed in 4.56). Their presets therefore say
`runner: worker`: the model runs in a process of `embedding.env` (built by `make
setup-encoders` with the versions the preset's `requires` pins), which runs
`model_worker.py` as a plain script, so this process never imports their code or
those versions. The worker is started on the first text to encode and stopped with
this process; its stderr (model loading, warnings) goes to a log file named in errors
and removed when the worker stops cleanly.

`check_environment` runs before any work (the CLI's start-up checks, and when a store
is opened): the environment exists and holds every pinned version, and a model with
remote code meets a transformers version listed in `vetted_transformers` -- else one
line says what to run.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from hipporag2.embed import model_worker, prompts
from hipporag2.embed.encoders import Encoder, model_spec
from hipporag2.embed.envcheck import SETUP_HINT, check_in_process, version_problems
from hipporag2.embed.errors import EncoderError
from hipporag2.runtime.envs import env_dir, env_python

log = logging.getLogger(__name__)

WORKER_SCRIPT = Path(model_worker.__file__).resolve()




def env_versions(cfg) -> Dict[str, str]:
    """The worker environment's versions of the distributions model_worker checks (fast:
    package metadata only, nothing imported)."""
    py = env_python(cfg)
    proc = subprocess.run([str(py), str(WORKER_SCRIPT), "--versions"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    if proc.returncode != 0:
        raise EncoderError(f"embedding.env={cfg.env}: {py} failed to report its versions "
                           f"({' '.join(proc.stderr.split())[-300:]}); rebuild it with `{SETUP_HINT}`")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_environment(cfg) -> Dict[str, str]:
    """Raise EncoderError in one line unless the encoder's environment can run it; the
    environment's versions otherwise."""
    where = env_dir(cfg)
    if not env_python(cfg).is_file():
        raise EncoderError(f"embedding={cfg.name} runs in its own environment {where} (embedding.env), "
                           f"which does not exist: run `{SETUP_HINT}`")
    versions = env_versions(cfg)
    problems = version_problems(cfg, versions)
    if problems:
        raise EncoderError(f"embedding={cfg.name}: the environment {where} lacks {'; '.join(problems)}: "
                           f"run `{SETUP_HINT}`")
    return versions


class WorkerEncoder(Encoder):
    """The model of `cfg` in a worker process of `cfg.env` (see the module doc)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.versions = check_environment(cfg)
        self.failed = False  # an error named the log: it stays
        fd, name = tempfile.mkstemp(prefix=f"hipporag2-encoder-{cfg.name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the worker imports nothing of ours
        with open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen([str(env_python(cfg)), str(WORKER_SCRIPT)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, env=env, bufsize=1)
        log.info("encoder worker %s (pid %d) in %s; log %s", cfg.name, self.proc.pid, env_dir(cfg), self.log_path)
        try:
            self._call({"op": "load", "spec": model_spec(cfg)})
        except EncoderError:
            self.close()  # the worker would otherwise wait for this object's collection
            raise

    def _call(self, req: Dict[str, object]) -> Dict[str, object]:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.failed = True
            code = self.proc.poll()
            raise EncoderError(f"the encoder worker of embedding={self.cfg.name} exited ({code}); "
                               f"its log: {self.log_path}")
        reply = json.loads(line)
        if not reply.get("ok"):
            self.failed = True
            raise EncoderError(f"the encoder worker of embedding={self.cfg.name}: {reply.get('error')} "
                               f"(log: {self.log_path})")
        return reply

    def _encode(self, texts, instruction):
        reply = self._call({"op": "encode", "prefix": prompts.prefix(self.cfg, instruction), "texts": list(texts)})
        rows = np.frombuffer(base64.b64decode(reply["f32"]), dtype="<f4")
        return rows.reshape(int(reply["rows"]), int(reply["dim"])).astype(np.float32)

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=10)
        if proc is not None and proc.returncode == 0 and not self.failed:
            self.log_path.unlink(missing_ok=True)  # errors name the log; a clean stop needs none

    def __del__(self):
        self.close()


def encoder_environment(cfg) -> Optional[Dict[str, str]]:
    """Check where `cfg`'s encoder will run, before any work: the worker's environment,
    or this process's transformers for remote code. The worker's versions, or None."""
    if cfg.backend == "openai_compatible":
        return None
    if cfg.runner == "worker":
        return check_environment(cfg)
    check_in_process(cfg)
    return None
