"""The authors' prompt templates (`llm.prompts=reference`), read from the installed
reference wheel as data at run time; no template text lives in this repository.

The templates are the modules of `hipporag/prompts/templates/` in the installed
`hipporag` wheel (`ner`, `triple_extraction`, `ner_query`, `rag_qa_musique`, ...), each
defining `prompt_template`: a chat (a list of {role, content}) whose contents are
`string.Template` texts. Importing them the normal way would run the package's
`__init__`, which imports torch, vLLM and openai. So each file is located through the
distribution's metadata (as the filter program is, hipporag2/retrieve/filter_program.py)
and executed on its own, in a fresh namespace whose relative imports are answered here:
a sibling template (`from .ner import ...`) is read the same way, and a helper of
`hipporag/utils/llm_utils.py` (`convert_format_to_template`) is read from that file
alone: its top-level standard-library imports and the function definitions asked for,
nothing else of it (the file's other imports are openai and tenacity). Any other import
of the package stops with a line naming the template and the import.

Rendering is the reference's `PromptTemplateManager.render` (roles unchanged, each
content `Template(...).substitute(**values)`), so our messages are the reference's byte
for byte (tests/test_reference_prompts.py checks them against the wheel's own manager).
Each template carries the sha256 of its canonical JSON ([[role, text], ...]), which
metrics.json and the OpenIE cache key record.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Dict, Mapping, Tuple

from hipporag2.errors import ConfigError

PACKAGE = "hipporag"
TEMPLATES_PACKAGE = "hipporag.prompts.templates"
TEMPLATES_DIR = "hipporag/prompts/templates"

Messages = Tuple[Tuple[str, str], ...]


class TemplateError(ConfigError):
    """The reference's templates cannot be found or read; the message names the file."""


@dataclass(frozen=True)
class ChatTemplate:
    """One template: its turns as (role, Template text), and where it came from."""

    name: str
    turns: Tuple[Tuple[str, str], ...]
    path: str

    @property
    def sha256(self) -> str:
        text = json.dumps([list(t) for t in self.turns], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def render(self, **values: Any) -> Messages:
        try:
            return tuple((role, Template(text).substitute(**values)) for role, text in self.turns)
        except KeyError as exc:
            raise TemplateError(f"{self.path}: the template needs a value for {exc}") from None


def templates_dir() -> Tuple[Path, str]:
    """The installed reference's templates folder and the wheel's version."""
    from hipporag2.retrieve.filter_program import reference_wheel_path

    return reference_wheel_path(TEMPLATES_DIR, "llm.prompts=reference reads the authors' prompt templates",
                                "set llm.prompts=own", TemplateError)


def _stdlib_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in sys.stdlib_module_names
    return False


def _functions_of(path: Path, names: Tuple[str, ...]) -> types.ModuleType:
    """A module holding only the named top-level functions of `path` (with the file's
    standard-library imports, which those functions may use)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: cannot read it as Python source ({exc})") from None
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in wanted}
    if missing:
        raise TemplateError(f"{path}: no top-level function {sorted(missing)}")
    module = types.ModuleType(path.stem)
    code = compile(ast.Module(body=[n for n in tree.body if _stdlib_import(n)] + wanted, type_ignores=[]),
                   str(path), "exec")
    exec(code, module.__dict__)  # noqa: S102 - the reference's own helper, read from the installed wheel
    return module


@dataclass
class ReferenceTemplates:
    """The installed reference's templates, each read once on first use."""

    folder: Path
    version: str = ""
    _modules: Dict[str, types.ModuleType] = field(default_factory=dict, repr=False)
    _templates: Dict[str, ChatTemplate] = field(default_factory=dict, repr=False)

    @classmethod
    def installed(cls) -> "ReferenceTemplates":
        folder, version = templates_dir()
        return cls(folder, version)

    def has(self, name: str) -> bool:
        """Whether the reference has a template of this name (a `.py` file of the folder,
        as its PromptTemplateManager loads them)."""
        return name != "__init__" and (self.folder / f"{name}.py").is_file()

    def get(self, name: str) -> ChatTemplate:
        if name not in self._templates:
            self._templates[name] = self._read(name)
        return self._templates[name]

    def render(self, name: str, **values: Any) -> Messages:
        return self.get(name).render(**values)

    def hashes(self, names) -> Dict[str, str]:
        return {n: self.get(n).sha256 for n in names}

    # ---- reading a template module without importing the package -----------------

    def _read(self, name: str) -> ChatTemplate:
        path = self.folder / f"{name}.py"
        if not self.has(name):
            raise TemplateError(f"{path}: the installed {PACKAGE} {self.version} has no template {name!r}")
        value = getattr(self._module(f"{TEMPLATES_PACKAGE}.{name}"), "prompt_template", None)
        if isinstance(value, (str, Template)):
            value = [{"role": "user", "content": value}]  # never the case in 2.0.0a4; kept as one turn
        if not isinstance(value, list) or not all(isinstance(t, Mapping) and "role" in t and "content" in t for t in value):
            raise TemplateError(f"{path}: prompt_template is not a chat (a list of {{role, content}})")
        turns = tuple((str(t["role"]), t["content"].template if isinstance(t["content"], Template) else str(t["content"]))
                      for t in value)
        return ChatTemplate(name, turns, str(path))

    def _module(self, dotted: str, wanted: Tuple[str, ...] = ()) -> types.ModuleType:
        if dotted.startswith(TEMPLATES_PACKAGE + ".") and dotted.count(".") == 3:
            if dotted not in self._modules:
                self._modules[dotted] = self._exec_template(dotted)
            return self._modules[dotted]
        if dotted == f"{PACKAGE}.utils.llm_utils" and wanted:
            return _functions_of(self.folder.parent.parent / "utils" / "llm_utils.py", wanted)
        raise TemplateError(f"a template of {self.folder} imports {dotted}, which is not read without importing the package")

    def _exec_template(self, dotted: str) -> types.ModuleType:
        path = self.folder / (dotted.rsplit(".", 1)[1] + ".py")
        try:
            code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            raise TemplateError(f"{path}: cannot read it as Python source ({exc})") from None
        module = types.ModuleType(dotted)
        module.__dict__.update(__file__=str(path), __package__=TEMPLATES_PACKAGE,
                               __builtins__={**vars(builtins), "__import__": self._importer()})
        exec(code, module.__dict__)  # noqa: S102 - a template module of the installed wheel, as its manager runs it
        return module

    def _importer(self):
        plain = builtins.__import__

        def imp(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and name.split(".")[0] != PACKAGE:
                return plain(name, globals, locals, fromlist, level)
            if level:
                base = TEMPLATES_PACKAGE.split(".")
                if level - 1 >= len(base):
                    raise TemplateError(f"{self.folder}: a template's relative import leaves the package")
                base = base[: len(base) - (level - 1)]
                name = ".".join(base + ([name] if name else []))
            if not fromlist:
                raise TemplateError(f"a template of {self.folder} imports {name} as a whole; only `from ... import` is read")
            return self._module(name, tuple(fromlist))

        return imp

