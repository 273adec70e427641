"""Every config mistake stops `hipporag2` before any work: one line naming the key, what
is allowed and the closest match; exit status 2; no run folder, no cache written.

Real command lines of the installed entry point (`python -m hipporag2.cli`), on the
shared MuSiQue set where a mistake used to be found only after the index was built.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hipporag2.config import Config
from hipporag2.config_check import check_overrides, closest, schema_keys, unknown_keys
from hipporag2.config import ConfigError
from hipporag2.helptext import KEY_HELP, NOT_RESULT_CHANGING, main_help

REPO = Path(__file__).resolve().parent.parent


def _cli(args, cwd: Path, timeout: int = 120):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hipporag2.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _musique(shared_data, tmp_path):
    return ["+experiment=musique_train_ablations", f"data_dir={shared_data}",
            f"openie.import_path={shared_data / 'openie' / 'musique_train_openie_gpt-3.5-turbo-1106.json'}",
            f"cache_dir={tmp_path / 'cache'}", "progress=false"]


@pytest.mark.parametrize("bad, says", [
    (["+retrieval.dampng=0.3"], "unknown key 'retrieval.dampng' (did you mean 'retrieval.damping'?)"),
    (["retrieval.dampng=0.3"], "unknown key 'retrieval.dampng' (did you mean 'retrieval.damping'?)"),
    (["retrieval.ppr_solver=batchd"], "retrieval.ppr_solver='batchd' is not one of ['prpack', 'batched']; did you mean 'batched'?"),
    (["retrieval=hipporag3"], "retrieval=hipporag3: no such option of config group 'retrieval' (did you mean 'hipporag2'?)"),
    (["retrieval.damping=high"], "retrieval.damping=high"),
    (["-m", "retrieval.damping=0.3,1.5"], "retrieval.damping=1.5 must be in [0, 1)"),
])
def test_bad_config_stops_before_any_work(shared_data, tmp_path, bad, says):
    out = _cli(bad + _musique(shared_data, tmp_path), cwd=tmp_path)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(lines) <= 4 and lines[-1].startswith("error: ") and says in lines[-1], lines
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "cache").exists(), "index work started"
    assert not (tmp_path / "runs").exists(), "a failed start left a run folder"


def test_help_opens_with_what_it_does_and_lists_keys(tmp_path):
    out = _cli(["--help"], cwd=tmp_path)
    assert out.returncode == 0
    text = out.stdout
    assert text.startswith("hipporag2: one HippoRAG 2 run")
    for needle in ("config groups", "retrieval ", "hipporag2_no_filter", "most used keys", "retrieval.damping",
                   "examples:", "hipporag2 -m", "hipporag2-report"):
        assert needle in text, needle
    keys = _cli(["--help-keys"], cwd=tmp_path)
    assert keys.returncode == 0
    listed = {ln.split()[0] for ln in keys.stdout.splitlines() if ln.strip()}
    assert listed == set(schema_keys())
    assert all(len(ln.split(None, 1)) == 2 for ln in keys.stdout.splitlines() if ln.strip()), "a key without description"


def test_every_schema_key_has_one_description():
    keys = set(schema_keys())
    assert set(KEY_HELP) == keys, (sorted(keys - set(KEY_HELP)), sorted(set(KEY_HELP) - keys))
    assert NOT_RESULT_CHANGING <= keys
    assert all("\n" not in v and v for v in KEY_HELP.values())
    assert "retrieval.damping" in main_help()


def test_schema_is_closed_and_matches_are_close():
    assert unknown_keys({"retrieval": {"damping": 0.5}, "seed": 0}) == []
    [msg] = unknown_keys({"retrieval": {"dampng": 0.3}})
    assert "did you mean 'retrieval.damping'?" in msg
    assert closest("hipporag3", ["bm25", "hipporag2", "dense"]) == "hipporag2"
    assert closest("zzz", ["bm25", "dense"]) is None
    with pytest.raises(ConfigError, match="unknown key 'foo'"):
        check_overrides(["+foo.bar=1"])
    # A sweep's every job is checked, including the experiment's own sweep parameters.
    cfg = check_overrides(["+experiment=musique_train_grid"], multirun=True)
    assert isinstance(cfg, Config)


def test_a_run_that_needs_an_llm_without_one_stops_at_start(tmp_path):
    out = _cli(["retrieval=hipporag2", f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path)
    assert out.returncode == 2
    assert "needs an LLM" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_tune_filter_help_explains_every_flag(monkeypatch, capsys):
    from hipporag2 import tune_filter

    with pytest.raises(SystemExit) as e:
        tune_filter.parse_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "MIPROv2" in text and "retrieval.filter_program" in text and "example:" in text
    parser_flags = ("--output", "--start", "--auto", "--train-size", "--val-size", "--num-threads",
                    "--max-bootstrapped-demos", "--max-labeled-demos", "--seed")
    import argparse

    seen = {}
    orig = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        seen.update({act.option_strings[0]: act.help for act in self._actions if act.option_strings})
        return orig(self, ["--output", "x"])

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    tune_filter.parse_args([])
    assert all(seen.get(f) for f in parser_flags), {f: seen.get(f) for f in parser_flags}


def _broken_reference_wheel(root: Path) -> Path:
    """A site folder holding a `hipporag` 2.0.0a4 distribution whose filter module is
    not Python (a damaged or hand-edited install of the reference)."""
    site = root / "site"
    info = site / "hipporag-2.0.0a4.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hipporag\nVersion: 2.0.0a4\n")
    module = site / "hipporag" / "prompts" / "filter_default_prompt.py"
    module.parent.mkdir(parents=True)
    module.write_text("best_dspy_prompt = {'prog': {'demos': [\n")
    (info / "RECORD").write_text("hipporag/prompts/filter_default_prompt.py,,\n")
    return site


def test_a_malformed_filter_program_is_one_line_before_work(shared_data, tmp_path):
    """The authors' program is parsed at start-up: a broken one stops `hipporag2` and
    `hipporag2-tune-filter` in one line (exit 2) before any folder or cache exists.
    Where a stage reads a program later, its ProgramError is a ConfigError, which the
    commands print the same way."""
    from hipporag2.retrieve.filter_program import ProgramError, program_from_dict, read_assignment

    assert issubclass(ProgramError, ConfigError)
    with pytest.raises(ProgramError, match="neither a system message nor signature.instructions"):
        program_from_dict({"prog": {"demos": []}}, "p.json")
    site = _broken_reference_wheel(tmp_path)
    module = site / "hipporag" / "prompts" / "filter_default_prompt.py"
    with pytest.raises(ConfigError, match="cannot read it as Python source"):
        read_assignment(module, "best_dspy_prompt")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=f"{site}{os.pathsep}{REPO}")
    args = _musique(shared_data, tmp_path) + ["retrieval=hipporag2", "retrieval.filter=llm", "retrieval.filter_program=reference", "llm=smollm2_cpu",
                                              f"run_dir={tmp_path / 'run'}"]
    for cmd in (["-m", "hipporag2.cli", *args],
                ["-m", "hipporag2.tune_filter", "--start", "reference", "--output", str(tmp_path / "p.json"), *args]):
        out = subprocess.run([sys.executable, *cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stderr[-3000:]
        lines = out.stderr.strip().splitlines()
        assert "Traceback" not in out.stderr and len(lines) <= 4, out.stderr[-3000:]
        assert lines[-1].startswith(f"error: {module}: cannot read it as Python source"), lines[-1]
        assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()
