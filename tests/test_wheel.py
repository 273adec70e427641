"""A wheel built from the repo works outside a checkout: installed into a throwaway
venv and run from another folder, `hipporag2 --cfg job` composes the config shipped in
the package, `HippoRAG(save_dir, overrides=[...])` indexes and retrieves, and the
report finds the expected numbers. The venv sees the shared environment's packages
(numpy, hydra, ...) through a path line, not its `.pth` hooks, so the checkout's
editable install cannot stand in for the wheel."""
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one wheel build, a venv, two runs

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import sys, hipporag2
from pathlib import Path
from hipporag2 import HippoRAG
from hipporag2.report.reference import default_references
assert Path(hipporag2.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), hipporag2.__file__
assert default_references()[0] is not None, "paper.yaml not shipped"
docs = ["Oliver Badman is a politician.", "George Rankin is a politician.", "Cinderella attended the royal ball."]
with HippoRAG("rag", overrides=["retrieval=bm25", "progress=false"]) as rag:
    rag.index(docs)
    top = rag.retrieve(["Who attended the ball?"], num_to_retrieve=1)[0]
print("TOP", top.docs[0])
print("FILE", hipporag2.__file__)
"""


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    for mod in ("setuptools", "wheel"):
        pytest.importorskip(mod, reason=f"building the wheel needs {mod}")
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy: building in place would leave build/ and egg-info in the checkout
    shutil.copytree(REPO / "hipporag2", src / "hipporag2", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).is_file():
            shutil.copy(REPO / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(src)], capture_output=True, text=True, cwd=root)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (root / "dist").glob("hipporag2-*.whl")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    env_dir = root / "venv"
    # No pip of its own (ensurepip was most of this fixture's time): the shared pip
    # installs into it with `--python`, i.e. pip re-run by the venv's interpreter, which
    # sees only the venv's own site-packages until the path line below exists.
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # installed before the shared packages are visible: pip would see the checkout's
    # editable hipporag2 there and call the wheel installed already
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check",
                           "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True, text=True, cwd=root, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    (site / "shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = root / "elsewhere"
    work.mkdir()
    return env_dir, env, work


def test_installed_wheel_composes_its_shipped_config(wheel_venv):
    env_dir, env, work = wheel_venv
    out = subprocess.run([str(env_dir / "bin" / "hipporag2"), "--cfg", "job", "--resolve", "retrieval=bm25"], capture_output=True,
                         text=True, cwd=work, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "method: bm25" in out.stdout
    data_dir = next(line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if line.startswith("data_dir:"))
    assert Path(data_dir).is_dir() and Path(data_dir).resolve().is_relative_to(env_dir.resolve()), data_dir


def test_installed_wheel_runs_the_library_from_another_folder(wheel_venv):
    env_dir, env, work = wheel_venv
    out = subprocess.run([str(env_dir / "bin" / "python"), "-c", PROBE], capture_output=True, text=True, cwd=work,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TOP Cinderella attended the royal ball." in out.stdout
    assert (work / "rag" / "hipporag2_index.json").is_file()
