"""`python -m hipporag2.cli ARGS` (or `hipporag2.sweep`) for tests that start many CLI
processes, forked from one process that has imported the heavy libraries once.

A CLI process spends ~9 CPU s importing torch, sentence-transformers, Hydra, igraph
and our package before it reads its first argument (measured on the 2-core machine,
docs/testing.md "Round 7"); the reliability files start dozens of them. A `CliZygote`
starts this file as a script with the tests' child environment; that process imports
those libraries and forks one child per request.
Each child becomes what `python -m hipporag2.cli ARGS` is: the requested environment
(replacing the inherited one), working folder, stdin from /dev/null, stdout and
stderr to files, `hipporag2.cli` executed as `__main__` by runpy (as `-m` does, with
`sys.argv[0]` the module's file), the same exit status (SystemExit's code, 1 after a
traceback, death by the signal of an uncaught KeyboardInterrupt), atexit handlers and
non-daemon threads finished before it exits. Results come back as a
`subprocess.CompletedProcess`; `popen` gives a handle with the `Popen` methods the
interrupt tests use (poll, send_signal, communicate, kill, wait).

What is NOT the same as a fresh interpreter: modules imported before the fork are not
imported again, so an environment variable read at IMPORT time by those libraries is
the zygote's (started with a child environment whose import-time variables are the
request's, so these match: see below). A test
about the interpreter's start itself (import errors, `--help` speed, the wheel) keeps
a real subprocess.

One zygote per test process (`shared_zygote`), not per module (round 8): every file of
an xdist worker forks from the same one, so the imports are paid once per worker. A
file's child environment may still differ from another's in a variable the libraries
read at import time (`IMPORT_TIME_PREFIXES`: threads, offline flags, the path); such
an environment gets a zygote of its own. The package reads its own `HIPPORAG2_*`
variables at run time, so those may differ per run. `close_shared` (a session
fixture in tests/conftest.py) reaps them.

CPU accounting: the zygote reports the CPU of its imports when it is ready and each
child's (`os.wait4`: the child and every process it waited for) when it ends;
`unreaped_cpu_s` is the sum of what live zygotes reported, which
`benchmarks/pytest_cputime.py` adds to `RUSAGE_CHILDREN` (its CPU column), so a test is
charged for the runs it forked when they end, and the file that started the zygote
for its imports. When a zygote is reaped, all of it reaches `RUSAGE_CHILDREN` and its
reported share leaves `unreaped_cpu_s`, so nothing is counted twice.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent


# ---- the zygote process (this file run as a script) ----------------------------------
def _child(req: Dict) -> None:
    """In the forked child: become `python -m MODULE ARGV`; never returns."""
    code = 0
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (devnull, out, err):
            os.close(fd)
        sys.path[0] = os.getcwd()  # as `-m` sets it
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        import runpy

        # As `python -m MODULE`: the module itself runs anew as __main__ (beside any copy
        # another module imported under its own name), sys.argv[0] its file.
        module = req.get("module", "hipporag2.cli")
        sys.modules.pop(module, None)
        sys.argv = ["-m", *req["argv"]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - the interpreter's own behaviour: traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    try:
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code < 0:  # an uncaught KeyboardInterrupt ends the process by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def zygote_main() -> None:
    """Import once, then per request line (JSON: module, argv, env, cwd, out, err) fork a child;
    reply {"pid": PID} when it starts and {"status": exit code or -signal} when it ends."""
    import hydra  # noqa: F401
    import igraph  # noqa: F401
    import numpy  # noqa: F401
    import scipy.sparse  # noqa: F401
    import sentence_transformers  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import hipporag2.cli  # noqa: F401
    import hipporag2.pipeline  # noqa: F401
    import hipporag2.sweep  # noqa: F401
    # What every run that builds or queries a graph imports later (numba and the compiled
    # kernels' modules, MiniLM's model class): ~0.6 CPU s per child otherwise. Importing
    # starts no thread (numba's threading layer starts at the first parallel kernel's
    # call, in the child), so forking stays safe.
    import hipporag2.graph.knn_kernels  # noqa: F401
    import hipporag2.retrieve.ppr.kernels  # noqa: F401
    import hipporag2.retrieve.scoring_kernels  # noqa: F401
    import transformers.models.bert.modeling_bert  # noqa: F401

    import resource

    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints of the zygote go to its log, never into the replies
    me = resource.getrusage(resource.RUSAGE_SELF)
    reply.write(json.dumps({"ready": True, "cpu_s": me.ru_utime + me.ru_stime}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            reply.close()
            _child(req)
        reply.write(json.dumps({"pid": pid}) + "\n")
        _, status, usage = os.wait4(pid, 0)  # the child's CPU with that of the processes it waited for
        reply.write(json.dumps({"pid": pid, "status": os.waitstatus_to_exitcode(status),
                                "cpu_s": usage.ru_utime + usage.ru_stime}) + "\n")


# ---- the test side --------------------------------------------------------------------
class ZygoteChild:
    """One forked CLI run; the `subprocess.Popen` methods the tests use."""

    def __init__(self, zygote: "CliZygote", args: List[str], pid: int, out: Path, err: Path):
        self._zygote, self.args, self.pid, self._out, self._err = zygote, args, pid, out, err
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            msg = self._zygote._reply(timeout=0)
            if msg is not None:
                self.returncode = msg["status"]
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            msg = self._zygote._reply(timeout=timeout)
            if msg is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = msg["status"]
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: Optional[float] = None):
        self.wait(timeout)
        out = self._out.read_text(encoding="utf-8", errors="replace")
        err = self._err.read_text(encoding="utf-8", errors="replace")
        return out, err


class CliZygote:
    """A zygote process; `run` ~ `subprocess.run([python, -m, hipporag2.cli, *args],
    capture_output=True, text=True)`. Tests use the shared one (`run`, `popen` and
    `shared_zygote` below), which tests/conftest.py closes at the session's end."""

    def __init__(self, env: Dict[str, str]):
        self._tmp = Path(tempfile.mkdtemp(prefix="hipporag2-zygote-"))
        self._log = open(self._tmp / "zygote.log", "w")
        self._proc = subprocess.Popen([sys.executable, __file__, "zygote"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(REPO))
        self._buf = b""
        self._n = 0
        self._ready = False
        self._child: Optional[ZygoteChild] = None
        self.cpu_s = 0.0  # reported by the zygote and not yet in this process's RUSAGE_CHILDREN

    def _reply(self, timeout: Optional[float]) -> Optional[Dict]:
        """The zygote's next reply line, or None when none came within `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                log = (self._tmp / "zygote.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the CLI zygote ended (exit {self._proc.wait()}):\n{log}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        self.cpu_s += float(msg.get("cpu_s", 0.0))
        return msg

    def alive(self) -> bool:
        return self._proc.poll() is None

    def popen(self, args: Sequence[str], cwd: Path, env: Dict[str, str], module: str = "hipporag2.cli") -> ZygoteChild:
        if not self._ready:
            assert self._reply(timeout=600).get("ready") is True
            self._ready = True
        if self._child is not None and self._child.poll() is None:
            # A run a failed test left behind: the zygote waits for it before it reads the
            # next request, so end it here rather than in the next file's test.
            self._child.kill()
            self._child.wait()
        self._n += 1
        out, err = self._tmp / f"{self._n}.out", self._tmp / f"{self._n}.err"
        req = {"module": module, "argv": [str(a) for a in args], "env": dict(env), "cwd": str(cwd), "out": str(out), "err": str(err)}
        self._proc.stdin.write((json.dumps(req) + "\n").encode())
        self._proc.stdin.flush()
        pid = self._reply(timeout=60)["pid"]
        self._child = ZygoteChild(self, list(args), pid, out, err)
        return self._child

    def run(self, args: Sequence[str], cwd: Path, env: Dict[str, str], timeout: Optional[float] = None,
            module: str = "hipporag2.cli") -> subprocess.CompletedProcess:
        child = self.popen(args, cwd, env, module)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        out, err = child.communicate()
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)

    def close(self) -> None:
        if self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()
        self._proc.stdin.close()
        self._proc.wait(timeout=60)  # reaps it: its children's CPU reaches RUSAGE_CHILDREN
        self.cpu_s = 0.0  # ... and leaves what it had reported
        self._proc.stdout.close()
        self._log.close()
        import shutil

        shutil.rmtree(self._tmp, ignore_errors=True)


# ---- one zygote per test process, shared by the files ---------------------------------
# Variables that torch/OpenMP, tokenizers, Hugging Face and the interpreter read when
# they are imported (or, for PYTHONPATH, that decide what is imported): a child
# environment that differs in one of these gets a zygote of its own.
IMPORT_TIME_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "TOKENIZERS_", "HF_", "TRANSFORMERS_", "TORCH",
                        "CUDA_", "NUMBA_", "PYTHON", "LD_")
_SHARED: Dict[tuple, CliZygote] = {}


def child_env(**extra: str) -> Dict[str, str]:
    """The environment of a forked (or real) CLI run in the tests: offline, this
    checkout's package, one OpenMP/MKL thread, no tokenizer threads."""
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **extra)


def import_key(env: Dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)))


def unreaped_cpu_s() -> float:
    """CPU seconds the live zygotes reported (imports, finished children) that this
    process's RUSAGE_CHILDREN does not hold yet (see the module docstring)."""
    return sum(z.cpu_s for z in _SHARED.values())


def count_in_cputime_plugin(unreaped) -> None:
    """Have benchmarks/pytest_cputime (when loaded with `-p`) add `unreaped()`, the CPU
    of live children that RUSAGE_CHILDREN does not hold yet, to every test's reading."""
    plugin = sys.modules.get("benchmarks.pytest_cputime")
    extra = getattr(plugin, "EXTRA_CPU", None)
    if extra is not None and unreaped not in extra:
        extra.append(unreaped)


def shared_zygote(env: Dict[str, str]) -> CliZygote:
    """This process's zygote for `env`'s import-time variables, started on first use."""
    key = import_key(env)
    zygote = _SHARED.get(key)
    if zygote is None or not zygote.alive():
        if zygote is not None:
            zygote.cpu_s = 0.0  # it ended (and was reaped by alive()): its CPU is in RUSAGE_CHILDREN
        count_in_cputime_plugin(unreaped_cpu_s)
        zygote = _SHARED[key] = CliZygote(env)
    return zygote


def run(args: Sequence[str], cwd: Path, env: Dict[str, str], timeout: Optional[float] = None,
        module: str = "hipporag2.cli") -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, MODULE, *args], capture_output=True, text=True)`, forked."""
    return shared_zygote(env).run(args, cwd, env, timeout, module)


def popen(args: Sequence[str], cwd: Path, env: Dict[str, str], module: str = "hipporag2.cli") -> ZygoteChild:
    return shared_zygote(env).popen(args, cwd, env, module)


def close_shared() -> None:
    """Reap every zygote (the session's end; tests/conftest.py)."""
    while _SHARED:
        _, zygote = _SHARED.popitem()
        zygote.close()


if __name__ == "__main__" and sys.argv[1:] == ["zygote"]:
    zygote_main()
