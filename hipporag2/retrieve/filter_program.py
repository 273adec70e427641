"""Which saved DSPy program the recognition-memory filter runs (`retrieval.filter_program`).

- `reference` (every paper preset): the authors' program tuned with MIPROv2 on
  Llama-3.3-70B-Instruct. It ships inside the reference implementation's wheel
  (`hipporag==2.0.0a4`, module `hipporag/prompts/filter_default_prompt.py`, the value
  of `best_dspy_prompt`). It is read from the installed file as DATA: the module is
  parsed with `ast` and the assignment's value evaluated with `ast.literal_eval`, so
  nothing of the package is imported or executed (its imports need torch, vLLM and
  openai). No copy of it lives in this repository.
- `own`: our own 3-demo program (hipporag2/resources/filter_program.json, invented
  examples), for the CPU demo whose 135M model cannot follow the authors' long prompt.
- anything else: a path to a saved DSPy program JSON (e.g. from `hipporag2-tune-filter`).

Every loaded program carries a content hash (sha256 of its canonical JSON), so the
authors' program gives the same hash whether it comes from the wheel or from the
repository's `filter_llama3.3-70B-Instruct.json`; the run's metrics.json records it.
"""
from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from hipporag2.errors import ConfigError

log = logging.getLogger("hipporag2.filter")

OWN_PROGRAM = Path(__file__).resolve().parent.parent / "resources" / "filter_program.json"

REFERENCE_DIST = "hipporag"
REFERENCE_VERSION = "2.0.0a4"
REFERENCE_MODULE = "hipporag/prompts/filter_default_prompt.py"
REFERENCE_VARIABLE = "best_dspy_prompt"


INPUT_FIELDS = ("question", "fact_before_filter")
OUTPUT_FIELD = "fact_after_filter"
DEFAULT_FIELD_DESCRIPTIONS = {
    "question": "the question to be answered",
    "fact_before_filter": "candidate facts retrieved for the question",
    "fact_after_filter": "the candidate facts that help answer the question, as JSON",
}


class ProgramError(ConfigError):
    """A program cannot be found or read; the message names the file or the setting.

    A ConfigError (hence a ValueError): wherever it is raised, at start-up or when a
    stage loads the program later, the commands print it as one line with exit 2."""


@dataclass
class FilterProgram:
    instructions: str
    system: str
    demos: List[Dict[str, str]] = field(default_factory=list)
    field_descriptions: Dict[str, str] = field(default_factory=lambda: dict(DEFAULT_FIELD_DESCRIPTIONS))
    path: str = ""
    # `reference`, `own` or the path it was given as.
    name: str = ""
    # sha256 of the program's canonical JSON (see `program_hash`).
    sha256: str = ""
    # Type name of the output field as the program's system message declares it
    # ("`fact_after_filter` (Fact)"), for the record (the messages do not depend on it).
    output_type: str = "str"

    def describe(self) -> Dict[str, Any]:
        """What metrics.json records about the program."""
        return {"name": self.name, "source": self.path, "sha256": self.sha256, "demos": len(self.demos),
                "output_type": self.output_type}


def program_hash(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_system(instructions: str, descriptions: Dict[str, str]) -> str:
    """A system message for a program saved without one (own wording, DSPy-style layout)."""
    d = {**DEFAULT_FIELD_DESCRIPTIONS, **descriptions}
    lines = ["You receive these inputs:"]
    lines += [f"{i}. `{name}`: {d[name]}" for i, name in enumerate(INPUT_FIELDS, 1)]
    lines += ["", "You produce this output:", f"1. `{OUTPUT_FIELD}`: {d[OUTPUT_FIELD]}", ""]
    lines += ["Each field appears under its own marker, in this order:", ""]
    for name in (*INPUT_FIELDS, OUTPUT_FIELD):
        lines += [f"[[ ## {name} ## ]]", "{" + name + "}", ""]
    lines += ["[[ ## completed ## ]]", "", "Your task:", instructions.strip()]
    return "\n".join(lines)


_OUTPUT_TYPE = re.compile(r"`" + OUTPUT_FIELD + r"` \((\w+)\)")


def program_from_dict(data: Any, path: str = "", name: str = "") -> FilterProgram:
    from hipporag2.data.validate import find_predictor

    pred, _ = find_predictor(data)
    if pred is None:
        raise ProgramError(f"{path or 'filter program'}: expected an object with 'prog' (or 'demos'/'signature'/'system')")
    sig = pred.get("signature") or {}
    instructions = str(sig.get("instructions") or pred.get("instructions") or "").strip()
    descriptions: Dict[str, str] = {}
    fields = sig.get("fields") or []
    for fname, f in zip((*INPUT_FIELDS, OUTPUT_FIELD), fields):
        if isinstance(f, dict) and f.get("description"):
            descriptions[fname] = str(f["description"])
    demos = []
    for i, demo in enumerate(pred.get("demos") or []):
        if not isinstance(demo, dict) or any(k not in demo for k in (*INPUT_FIELDS, OUTPUT_FIELD)):
            log.warning("%s: demo %d lacks question/fact_before_filter/fact_after_filter; skipped", path, i)
            continue
        demos.append({k: str(demo[k]) if k == "question" or isinstance(demo[k], str) else json.dumps(demo[k], ensure_ascii=False)
                      for k in (*INPUT_FIELDS, OUTPUT_FIELD)})
    system = pred.get("system")
    if not isinstance(system, str) or not system.strip():
        if not instructions:
            raise ProgramError(f"{path or 'filter program'}: neither a system message nor signature.instructions")
        system = render_system(instructions, descriptions)
    m = _OUTPUT_TYPE.search(system)
    return FilterProgram(
        instructions=instructions,
        system=system,
        demos=demos,
        field_descriptions={**DEFAULT_FIELD_DESCRIPTIONS, **descriptions},
        path=path,
        name=name or path,
        sha256=program_hash(data),
        output_type=m.group(1) if m else "str",
    )


# ---- the authors' program, from the installed reference wheel ------------------------

def reference_wheel_path(relpath: str, needs: str, fallback: str, error: "type[Exception] | None" = None) -> Tuple[Path, str]:
    """A path inside the installed reference wheel, and the wheel's version.

    Found through the distribution's metadata (`importlib.metadata`), which reads the
    installed RECORD and never imports the package (its imports pull torch and vLLM).
    `needs` says which setting reads it and what for; `fallback` names the way around.
    """
    import importlib.metadata as md

    error = error or ProgramError
    try:
        dist = md.distribution(REFERENCE_DIST)
    except md.PackageNotFoundError:
        raise error(
            f"{needs} from the reference implementation, which is not installed: "
            f"pip install --no-deps {REFERENCE_DIST}=={REFERENCE_VERSION} (make setup does), or {fallback}"
        ) from None
    path = Path(str(dist.locate_file(relpath)))
    if not path.exists():
        raise error(f"{path}: the installed {REFERENCE_DIST} {dist.version} has no {relpath}")
    return path, dist.version


def reference_program_file() -> Tuple[Path, str]:
    """The installed reference module holding the authors' program, and the wheel's version."""
    return reference_wheel_path(
        REFERENCE_MODULE, "retrieval.filter_program=reference reads the authors' tuned program",
        "set retrieval.filter_program=own or a program file")


def read_assignment(path: Path, variable: str) -> Any:
    """The literal value assigned to `variable` at the top level of a Python file, read as data."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ProgramError(f"{path}: cannot read it as Python source ({exc})") from None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == variable for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError as exc:
                raise ProgramError(f"{path}: {variable} is not a literal ({exc})") from None
    raise ProgramError(f"{path}: no top-level assignment to {variable}")


def reference_program() -> FilterProgram:
    path, version = reference_program_file()
    if version != REFERENCE_VERSION:
        # Not fatal: the program may be the same; the hash in metrics.json tells.
        log.warning("%s %s is installed; the reference program was checked against %s", REFERENCE_DIST, version, REFERENCE_VERSION)
    data = read_assignment(path, REFERENCE_VARIABLE)
    return program_from_dict(data, f"{path}:{REFERENCE_VARIABLE}", name="reference")


def own_program() -> FilterProgram:
    from hipporag2.data.validate import validate_filter_program

    return program_from_dict(validate_filter_program(OWN_PROGRAM), str(OWN_PROGRAM), name="own")


def load_program(spec: Optional[str | Path] = None) -> FilterProgram:
    """The program a `retrieval.filter_program` value names (None = `own`).

    Files are validated first (problems raise DataError naming the file and field).
    """
    from hipporag2.data.validate import validate_filter_program

    from hipporag2.registry import FILTER_PROGRAMS

    if spec is None:
        return own_program()
    if str(spec) in FILTER_PROGRAMS:
        return FILTER_PROGRAMS.load(str(spec))()
    p = Path(spec)
    return program_from_dict(validate_filter_program(p), str(p), name=str(p))


def program_file(spec: Optional[str]) -> Optional[Path]:
    """The file a `retrieval.filter_program` value names, or None for a program name."""
    from hipporag2.registry import FILTER_PROGRAMS

    if spec is None or str(spec) in FILTER_PROGRAMS:
        return None
    return Path(spec)
