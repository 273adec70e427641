"""The files a config names (an imported OpenIE file, a filter program), checked before
any work: every entry point (CLI start-up checks, the library, a run) calls
`check_input_paths` so a missing or broken file stops it in one line, not after the
index is built. Dataset files are checked by `pipeline.load_dataset` (with a download hint).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List

from hipporag2.data.errors import DataError
from hipporag2.data.validate import validate_filter_program
from hipporag2.retrieve.filter_program import ProgramError, load_program, program_file, reference_program_file


def check_input_paths(cfg) -> List[str]:
    """Every input file the config names exists and is a file; run before any work.

    Returns the paths checked. (Dataset files are checked by `load_dataset` with a
    download hint.)
    """
    checked: List[str] = []
    imp = getattr(cfg.openie, "import_path", None)
    if imp:
        p = Path(imp)
        if not p.is_file():
            raise DataError(p, "file not found (openie.import_path)" if not p.exists() else "not a file (openie.import_path)")
        checked.append(str(p))
    r = cfg.retrieval
    uses_filter = r.filter == "llm" and r.linking == "query_to_triple" and r.method != "dense" and r.method != "bm25"
    if uses_filter and r.filter_program == "reference":
        try:
            checked.append(str(reference_program_file()[0]))
        except ProgramError as exc:
            raise DataError("retrieval.filter_program", str(exc)) from None
    p = program_file(r.filter_program)
    if uses_filter and p is not None:
        if not p.is_file():
            raise DataError(p, "file not found (retrieval.filter_program)")
        validate_filter_program(p)
        checked.append(str(p))
    if uses_filter:
        check_filter_program_loads(r.filter_program)
    checked += check_reference_prompts(cfg)
    return checked


def check_reference_prompts(cfg) -> List[str]:
    """With an LLM configured and `llm.prompts=reference`, the authors' templates every
    LLM stage may render are read now (from the installed reference wheel), so that a
    missing wheel or template stops the run with one line before any work."""
    llm = getattr(cfg, "llm", None)
    if llm is None or not getattr(llm, "model", "") or getattr(llm, "prompts", "own") != "reference":
        return []
    from hipporag2.llm.reference_templates import ReferenceTemplates, TemplateError
    from hipporag2.openie.prompts import NER_TEMPLATE, QUERY_NER_TEMPLATE, TRIPLE_TEMPLATE
    from hipporag2.qa.prompts import reader_prompt

    try:
        templates = ReferenceTemplates.installed()
        for name in (NER_TEMPLATE, TRIPLE_TEMPLATE, QUERY_NER_TEMPLATE):
            templates.get(name)
        reader = reader_prompt("reference", getattr(cfg.dataset, "name", None))
    except TemplateError as exc:
        raise DataError("llm.prompts", str(exc)) from None
    return [str(templates.folder), reader.template.path]


def check_filter_program_loads(spec) -> None:
    """Read the program as the filter will (the authors' program is parsed out of the
    reference wheel, a file is validated and read) and check that DSPy, which renders
    the messages, is installed: a problem the filter would only meet after the index
    is built raises its one-line ProgramError (a ConfigError) now."""
    load_program(spec)
    if importlib.util.find_spec("dspy") is None:
        raise ProgramError(
            "the LLM filter renders DSPy's chat format, and DSPy is not installed: "
            "pip install 'hipporag2[dspy]' (make setup does), or set retrieval.filter=none"
        )
