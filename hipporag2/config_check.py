"""Start-up checks of a `hipporag2` command line: every config mistake found before
any work, reported in one line that names the key, what is allowed and the closest
match, with exit status 2.

Why a separate pass before Hydra runs the job: Hydra reports its own composition
errors as multi-line blocks with exit status 1, after it has created the run folder;
and `+key=value` adds any key to a structured config, so a misspelt `+retrieval.dampng`
would run with the default damping. Here the command line is composed the way Hydra
will compose it (for `-m`, every job of the sweep), the composed config is compared
against the schema (closed: no key outside the dataclasses of `hipporag2/config.py`),
and `config.validate` checks ranges and choices -- all before a folder is created or a
model is loaded.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from typing import Any, Iterable, List, Optional, Sequence

from hipporag2.config import Config, ConfigError


def closest(word: str, options: Iterable[str]) -> Optional[str]:
    """The option nearest to `word` by edit similarity, or None when none is close."""
    options = [str(o) for o in options]
    match = difflib.get_close_matches(str(word), options, n=1, cutoff=0.6)
    if match:
        return match[0]
    # A word that differs only in case or separators ("PPR-Solver" for ppr_solver).
    norm = lambda s: re.sub(r"[^a-z0-9]", "", s.lower())  # noqa: E731
    for o in options:
        if norm(o) == norm(word):
            return o
    return None


def did_you_mean(word: str, options: Iterable[str]) -> str:
    best = closest(word, options)
    return f" (did you mean {best!r}?)" if best else ""


def _schema_of(tp: Any) -> Optional[type]:
    """The dataclass a field holds (Optional[X] included), or None for a leaf."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def schema_keys(schema: type = Config, prefix: str = "") -> List[str]:
    """Every dotted key of the schema, leaves only, in declaration order."""
    hints = typing.get_type_hints(schema)
    out: List[str] = []
    for f in dataclasses.fields(schema):
        sub = _schema_of(hints[f.name])
        if sub is not None:
            out += schema_keys(sub, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def unknown_keys(node: Any, schema: type = Config, prefix: str = "") -> List[str]:
    """One message per key of a composed config (DictConfig or dict) that the schema
    does not declare: the schema is closed, `+key=value` included."""
    hints = typing.get_type_hints(schema)
    known = {f.name: _schema_of(hints[f.name]) for f in dataclasses.fields(schema)}
    problems: List[str] = []
    for key in node.keys():
        key = str(key)
        if key == "hydra" and not prefix:
            continue
        if key not in known:
            where = prefix.rstrip(".") or "the top level"
            best = closest(key, known)
            hint = f" (did you mean {prefix + best!r}?)" if best else ""
            problems.append(f"unknown key {prefix + key!r}{hint}; keys of {where}: {', '.join(sorted(known))}")
            continue
        sub = known[key]
        value = node[key]
        if sub is not None and isinstance(value, dict):
            problems += unknown_keys(value, sub, f"{prefix}{key}.")
    return problems


# ---- Hydra's own errors, one line each -------------------------------------------


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def explain_hydra_error(exc: BaseException, overrides: Sequence[str] = ()) -> str:
    """One line for an exception raised while Hydra composes a command line."""
    msg = str(exc)
    cause = exc.__cause__
    # A group option that does not exist: Hydra lists the available ones.
    m = re.search(r"Could not find '([^']+)'", msg)
    if m:
        path = m.group(1)
        group, _, option = path.rpartition("/")
        options = re.findall(r"^\t(\S+)$", msg.split("Config search path")[0], flags=re.M)
        if group:
            return (
                f"{group}={option}: no such option of config group {group!r}{did_you_mean(option, options)}; "
                f"choose one of: {', '.join(options)}"
            )
        return f"config {path!r} not found{did_you_mean(path, options)}"
    m = re.search(r"Could not override '([^']+)'", msg)
    if m and cause is not None:
        key = m.group(1)
        return _unknown_override(key)
    m = re.search(r"Error merging override (\S+)", msg)
    if m and cause is not None:
        return f"{m.group(1)}: {_first_line(cause)}"
    m = re.search(r"Ambiguous value for argument '([^']+)'", msg)
    if m:
        return (
            f"{m.group(1)}: a comma-separated value is a sweep; add -m to run one job per value, "
            "or write key=[a,b] for a list"
        )
    if "Error parsing override" in msg or "override_grammar" in msg:
        bad = re.search(r"Error parsing override '([^']*)'", msg)
        detail = [ln.strip() for ln in msg.splitlines()[1:] if ln.strip() and "hydra.cc" not in ln]
        what = f"cannot parse override {bad.group(1)!r}" if bad else "cannot parse an override"
        return f"{what}: {detail[0] if detail else _first_line(msg)} (expected key=value)"
    line = _first_line(msg)
    if cause is not None and _first_line(cause) and _first_line(cause) not in line:
        line += f": {_first_line(cause)}"
    return line or type(exc).__name__


def _unknown_override(key: str) -> str:
    """`key` is not in the schema: name the section's keys and the closest one."""
    parts = key.split(".")
    schema: Optional[type] = Config
    for i, part in enumerate(parts[:-1]):
        hints = typing.get_type_hints(schema)
        names = {f.name: _schema_of(hints[f.name]) for f in dataclasses.fields(schema)}
        if names.get(part) is None:
            where = ".".join(parts[:i]) or "the top level"
            return f"unknown key {key!r}{did_you_mean(part, names)}; keys of {where}: {', '.join(sorted(names))}"
        schema = names[part]
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    where = ".".join(parts[:-1]) or "the top level"
    prefix = ".".join(parts[:-1])
    best = closest(parts[-1], names)
    hint = f" (did you mean {(prefix + '.' if prefix else '') + best!r}?)" if best else ""
    return f"unknown key {key!r}{hint}; keys of {where}: {', '.join(sorted(names))}"


def llm_uses(cfg: Config) -> List[str]:
    """The stages of this config that call an LLM (the same conditions under which the
    pipeline asks for one)."""
    r = cfg.retrieval
    uses = []
    graph = r.method in ("hipporag2", "hipporag1")
    spacy = cfg.openie.name == "spacy"  # no LLM at index time, nor for query NER
    if graph and not cfg.openie.import_path and not spacy:
        uses.append("fresh OpenIE (openie.import_path is not set)")
    if graph and r.filter == "llm" and r.linking == "query_to_triple":
        uses.append("retrieval.filter=llm")
    if graph and r.linking == "ner_to_node" and not spacy:
        uses.append("query NER (retrieval.linking=ner_to_node)")
    if r.method == "graphrag":
        uses.append("GraphRAG indexing and search (retrieval=graphrag)")
    if cfg.qa.enabled:
        uses.append("QA (qa.enabled)")
    from hipporag2.registry import RETRIEVERS

    if r.method in RETRIEVERS and "llm" in RETRIEVERS.get(r.method).needs:
        uses.append(f"retrieval.method={r.method}")
    return uses


def check_llm_available(cfg: Config) -> None:
    uses = llm_uses(cfg)
    if uses and (cfg.llm.name == "none" or not cfg.llm.model):
        raise ConfigError(
            f"this run needs an LLM for {', '.join(uses)} but llm=none; choose one (e.g. llm=smollm2_cpu) "
            "or set openie.import_path / retrieval.filter=none"
        )


def check_encoder_available(cfg: Config) -> None:
    """The encoder can run where its preset says, before any work: its environment
    exists with the pinned versions (runner=worker), remote code meets a vetted
    transformers, an embeddings server has a URL (its model is checked on first contact)."""
    from hipporag2.registry import ENCODER_METHODS

    e = cfg.embedding
    if cfg.retrieval.method not in ENCODER_METHODS:
        return
    if e.backend == "openai_compatible":
        missing = [k for k in ("base_url", "model") if not getattr(e, k)]
        if missing:
            raise ConfigError(f"embedding.backend=openai_compatible needs embedding.{missing[0]}")
        return
    from hipporag2.embed.worker import encoder_environment

    encoder_environment(e)


def check_baseline_available(cfg: Config) -> None:
    """A baseline that runs in an environment of its own finds it, before any work."""
    if cfg.retrieval.method == "graphrag":
        from hipporag2.baselines.graphrag_index import env_python

        env_python(cfg.graphrag)


def check_method_environment(cfg: Config) -> None:
    """A retrieval method that runs in an environment of its own (LightRAG) can run
    there, before any work."""
    if cfg.retrieval.method == "lightrag":
        from hipporag2.baselines.lightrag_env import check_environment

        check_environment(cfg.lightrag)


# ---- the command line ------------------------------------------------------------


def job_overrides(overrides: Sequence[str], multirun: bool, compose_fn) -> List[List[str]]:
    """The override list of every job the command will run (one for a single run).

    For `-m`, the sweep parameters of the composed config (`hydra.sweeper.params`, as
    experiments set them) come first and the command line's overrides after, as
    Hydra's basic sweeper orders them; the Cartesian product gives the jobs.
    """
    if not multirun:
        return [list(overrides)]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(list(overrides))
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    from omegaconf import OmegaConf

    base = compose_fn(fixed)
    if not str(OmegaConf.select(base, "hydra.sweeper._target_", default="")).endswith("BasicSweeper"):
        return [fixed]  # another sweeper chooses its own jobs: check the fixed part
    params = OmegaConf.select(base, "hydra.sweeper.params", default=None) or {}
    lines = [f"{k}={v}" for k, v in params.items()] + list(overrides)
    batches = BasicSweeper.split_arguments(parser.parse_overrides(lines), None)
    return [list(job) for batch in batches for job in batch]


def check_overrides(overrides: Sequence[str], multirun: bool = False, keep_jobs: Optional[list] = None,
                    environment: bool = True) -> Config:
    """Compose and check every job of the command line; the first job's Config.
    `keep_jobs`, when given, receives (job overrides, composed config) of every job
    (for `hipporag2 -m ... --cfg job`, which Hydra itself refuses). `environment=False`
    (printing a config with --cfg) checks the config alone, not that its encoder
    environment and input files are on this machine: a job list is read before set-up.

    Raises ConfigError with a one-line message for any problem: a Hydra composition
    error, a key outside the schema (with or without `+`), a wrong type, a value out
    of range or not among a key's choices.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from hipporag2.compose import CONFIG_DIR, dictconfig_to_config

    def compose_fn(ovr):
        try:
            return hydra_compose(config_name="config", overrides=list(ovr), return_hydra_config=True)
        except (HydraException, OmegaConfBaseException) as e:
            raise ConfigError(explain_hydra_error(e, ovr)) from None

    from hipporag2.data.inputs import check_input_paths

    GlobalHydra.instance().clear()
    first: Optional[Config] = None
    checked_inputs: set = set()
    checked_encoders: set = set()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        try:
            jobs = job_overrides(overrides, multirun, compose_fn)
        except (HydraException, OmegaConfBaseException) as e:
            raise ConfigError(explain_hydra_error(e, overrides)) from None
        for job in jobs:
            dcfg = compose_fn(job)
            from omegaconf import OmegaConf

            problems = unknown_keys(OmegaConf.to_container(dcfg, resolve=False))
            if problems:
                raise ConfigError(problems[0] + (f" (and {len(problems) - 1} more unknown keys)" if len(problems) > 1 else ""))
            try:
                cfg = dictconfig_to_config(dcfg)
            except (HydraException, OmegaConfBaseException) as e:
                raise ConfigError(explain_hydra_error(e, job)) from None
            check_llm_available(cfg)
            if environment and repr(cfg.embedding) not in checked_encoders:  # once per distinct encoder
                checked_encoders.add(repr(cfg.embedding))
                check_encoder_available(cfg)
            if environment:
                check_baseline_available(cfg)
            if environment and ("method", cfg.retrieval.method, repr(cfg.lightrag)) not in checked_encoders:
                checked_encoders.add(("method", cfg.retrieval.method, repr(cfg.lightrag)))
                check_method_environment(cfg)
            if keep_jobs is not None:
                keep_jobs.append((list(job), dcfg))
            inputs = (cfg.openie.import_path, cfg.retrieval.filter, cfg.retrieval.filter_program, cfg.retrieval.method,
                      cfg.retrieval.linking)
            if environment and inputs not in checked_inputs:  # the files a job names exist and parse (once each)
                checked_inputs.add(inputs)
                check_input_paths(cfg)
            if first is None:
                first = cfg
    GlobalHydra.instance().clear()
    assert first is not None
    return first
