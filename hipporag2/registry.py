"""One registry per family of interchangeable parts: the single list of choices.

Config validation, the Hydra config groups, `docs/choices.md`, error messages and the
code that builds a part all read the registries here, so a choice cannot be accepted
at start-up and then fail after the index is built (`retrieval.ppr_solver=batchd`
stops before any work), and adding a part is one class plus one `register` line (and,
for a config group, one YAML file).

A choice names its implementation as a `module:attribute` string that is imported only
when the part is built: this module imports nothing heavy (no torch, numpy or igraph),
so validating a config stays instant.

Other modules may add families (`family(...)`) or choices (`REGISTRY.register(...)`)
at import time of this module only; the families below are the project's own.
"""
from __future__ import annotations

import difflib
import importlib
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple

from hipporag2.errors import ConfigError


@dataclass(frozen=True)
class Choice:
    name: str
    # "package.module:attribute" of the implementation, or None when the choice is a
    # mode read by code that branches on it (e.g. a linking mode).
    target: Optional[str]
    summary: str
    # what the choice needs from the indexing stages, e.g. {"openie", "encoder"} for a
    # graph retriever: callers ask the registry (`names_needing`) instead of keeping lists
    needs: FrozenSet[str] = frozenset()


class UnknownChoice(ConfigError):
    """A config value outside its family. Carries the key, the value and the choices,
    so a caller (the CLI) can format its own hint."""

    def __init__(self, registry: "Registry", value: Any):
        self.registry, self.value = registry, value
        self.key = registry.key
        self.choices = registry.names()
        self.suggestion = registry.suggest(value)
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        super().__init__(f"{registry.key}={value!r} is not one of {list(self.choices)}{hint}")


@dataclass(frozen=True)
class Interface:
    """What every implementation of a family must be: the attributes it must have
    (methods of a class, or of the object a builder returns is the caller's business),
    and for a callable, the names of its leading parameters in order. Checked when a
    choice is loaded, before it is used, and for every choice by tests/test_registry.py,
    so a registration that does not fit its family fails one test, not a run."""

    params: Tuple[str, ...] = ()
    attrs: Tuple[str, ...] = ()

    def problems(self, obj: Any) -> List[str]:
        out = [f"has no {a!r}" for a in self.attrs if not callable(getattr(obj, a, None))]
        if self.params:
            import inspect

            if not callable(obj):
                return out + ["is not callable"]
            try:
                names = list(inspect.signature(obj).parameters)
            except (TypeError, ValueError):
                return out
            if tuple(names[: len(self.params)]) != self.params:
                out.append(f"takes ({', '.join(names)}), the family calls it with ({', '.join(self.params)})")
        return out


@dataclass
class Registry:
    """The choices of one family, keyed by the config field that selects one."""

    family: str
    key: str  # dotted config key, e.g. "retrieval.ppr_solver"; "" for a non-config family
    doc: str
    interface: Optional[Interface] = None
    # Values accepted besides the registered names (e.g. None for an optional field,
    # or a file path where a name or a path is allowed): a predicate on the value.
    also_accepts: Optional[Callable[[Any], bool]] = None
    also_accepts_doc: str = ""
    _choices: Dict[str, Choice] = field(default_factory=dict)

    def register(self, name: str, target: Optional[str] = None, summary: str = "", needs: Iterable[str] = ()) -> Choice:
        if name in self._choices:
            raise ValueError(f"{self.family}: {name!r} is registered twice")
        if self.interface is not None and (not target or ":" not in target):
            raise ValueError(f"{self.family}: {name!r} needs an implementation 'module:attribute' (the family has an interface)")
        choice = Choice(name, target, summary, frozenset(needs))
        self._choices[name] = choice
        return choice

    def names(self) -> Tuple[str, ...]:
        return tuple(self._choices)

    def names_needing(self, need: str) -> Tuple[str, ...]:
        return tuple(c.name for c in self._choices.values() if need in c.needs)

    def __contains__(self, name: Any) -> bool:
        return isinstance(name, str) and name in self._choices

    def __iter__(self) -> Iterator[Choice]:
        return iter(self._choices.values())

    def accepts(self, value: Any) -> bool:
        return value in self or (self.also_accepts is not None and self.also_accepts(value))

    def suggest(self, value: Any) -> Optional[str]:
        """The closest registered name to a misspelt value, if any is close."""
        if not isinstance(value, str):
            return None
        close = difflib.get_close_matches(value, self.names(), n=1, cutoff=0.6)
        return close[0] if close else None

    def check(self, value: Any) -> None:
        """Raise UnknownChoice (a ConfigError) unless `value` is accepted."""
        if not self.accepts(value):
            raise UnknownChoice(self, value)

    def get(self, name: str) -> Choice:
        if name not in self:
            raise UnknownChoice(self, name)
        return self._choices[name]

    def load(self, name: str) -> Any:
        """The implementation object of a choice (imported now, not before)."""
        choice = self.get(name)
        if choice.target is None:
            raise ValueError(f"{self.family} {name!r} has no implementation to load")
        module, _, attr = choice.target.partition(":")
        obj = attrgetter(attr)(importlib.import_module(module))
        if self.interface is not None:
            problems = self.interface.problems(obj)
            if problems:
                raise TypeError(f"{self.family} {name!r} ({choice.target}) does not fit the family: " + "; ".join(problems))
        return obj


FAMILIES: Dict[str, Registry] = {}


def family(name: str, key: str, doc: str, **kwargs) -> Registry:
    """Create and record a family (one per name)."""
    if name in FAMILIES:
        raise ValueError(f"registry family {name!r} exists")
    reg = Registry(name, key, doc, **kwargs)
    FAMILIES[name] = reg
    return reg


def config_families() -> List[Registry]:
    """The families that a config field selects from, for `config.validate`."""
    return [r for r in FAMILIES.values() if r.key]


def check_config(cfg: Any) -> List[str]:
    """One message per config field whose value is outside its family (empty: all good).
    A family whose key the config does not have (yet) is skipped."""
    problems = []
    for reg in config_families():
        try:
            value = attrgetter(reg.key)(cfg)
        except AttributeError:
            continue
        if not reg.accepts(value):
            problems.append(str(UnknownChoice(reg, value)))
    return problems


# ---- the families ---------------------------------------------------------------------

ENCODERS = family("encoders", "embedding.backend", "How an embedding model is loaded and called (configs/embedding/*.yaml pick one).")
ENCODERS.register("sentence_transformers", "hipporag2.embed.encoders:SentenceTransformerEncoder",
                  "any sentence-transformers model (MiniLM, Contriever, GTR, GTE-Qwen2)")
ENCODERS.register("nv_embed_v2", "hipporag2.embed.encoders:NVEmbedV2Encoder",
                  "nvidia/NV-Embed-v2 through its remote code, instruction passed separately")
ENCODERS.register("gritlm", "hipporag2.embed.encoders:GritLMEncoder", "GritLM-7B through the gritlm package")
ENCODERS.register("openai_compatible", "hipporag2.embed.openai_embed:OpenAICompatibleEncoder",
                  "any OpenAI-compatible /v1/embeddings server (vLLM, TEI, a hosted API)")

ENCODER_RUNNERS = family("encoder_runners", "embedding.runner", "Where an in-house encoder backend runs (docs/encoders.md).")
ENCODER_RUNNERS.register("in_process", None, "in this process, under the main environment's transformers")
ENCODER_RUNNERS.register("worker", "hipporag2.embed.worker:WorkerEncoder",
                         "a process of the encoder environment (embedding.env, `make setup-encoders`) over pipes")

EMBED_TRUNCATION = family("embed_truncation", "embedding.truncation",
                          "How an embeddings server is asked to cut inputs to embedding.max_length tokens.")
EMBED_TRUNCATION.register("vllm", None, "vLLM: `truncate_prompt_tokens` = max_length in each request")
EMBED_TRUNCATION.register("tei", None, "Text Embeddings Inference: `truncate: true` (its own --max-input-length)")
EMBED_TRUNCATION.register("none", None, "ask nothing (an oversized input is the server's error)")

LLM_BACKENDS = family("llm_backends", "llm.backend", "Where LLM calls go (configs/llm/*.yaml pick one).")
LLM_BACKENDS.register("transformers", "hipporag2.llm.transformers_backend:TransformersLLM",
                      "local Hugging Face / GGUF model through transformers (CPU or GPU)")
LLM_BACKENDS.register("openai", "hipporag2.llm.openai_backend:OpenAILLM",
                      "any OpenAI-compatible chat-completions server (OpenAI, vLLM serve, llama.cpp)")
LLM_BACKENDS.register("vllm", "hipporag2.llm.vllm_backend:VLLMBackend",
                      "vLLM offline engine (tensor parallel; CPU build: make setup-vllm)")

RETRIEVERS = family("retrievers", "retrieval.method", "The retrieval method (configs/retrieval/*.yaml pick one and its settings).",
                    interface=Interface(params=("parts",)))
# Targets are builders taking `hipporag2.retrieve.factory.RetrieverParts`.
RETRIEVERS.register("hipporag2", "hipporag2.retrieve.factory:graph_retriever",
                    "HippoRAG 2: linking, optional recognition memory, PPR over phrases and passages", needs=("graph", "encoder"))
RETRIEVERS.register("hipporag1", "hipporag2.retrieve.factory:graph_retriever",
                    "HippoRAG (v1): query NER to phrases, uniform seeds, no passage nodes", needs=("graph", "encoder"))
RETRIEVERS.register("dense", "hipporag2.retrieve.factory:dense_retriever", "dense passage retrieval with the configured encoder",
                    needs=("encoder",))
RETRIEVERS.register("bm25", "hipporag2.retrieve.factory:bm25_retriever", "BM25 (bm25s, English stemmer and stopwords)")
RETRIEVERS.register("none", "hipporag2.retrieve.factory:no_retriever",
                    "no retrieval: an empty ranking, the reader answers from the question alone (Tables 2 / 8, row None)")
RETRIEVERS.register("raptor", "hipporag2.baselines.raptor_index:raptor_retriever",
                    "RAPTOR baseline: tree of LLM cluster summaries (UMAP + GMM), collapsed-tree retrieval (raptor.*)",
                    needs=("encoder", "llm"))
RETRIEVERS.register("graphrag", "hipporag2.baselines.graphrag_index:graphrag_retriever",
                    "GraphRAG baseline: the graphrag package (.venv-graphrag) as a subprocess, local search; "
                    "the reader restates its answer (graphrag.*)", needs=("encoder", "llm"))
RETRIEVERS.register("lightrag", "hipporag2.baselines.lightrag_index:lightrag_retriever",
                    "LightRAG baseline (lightrag-hku in .venv-lightrag, make setup-lightrag): its local-mode answer, "
                    "restated by the reader (lightrag.*)", needs=("encoder", "llm"))

# Retrievers that need OpenIE and the graph, and those that need an encoder.
GRAPH_METHODS = RETRIEVERS.names_needing("graph")
ENCODER_METHODS = RETRIEVERS.names_needing("encoder")

PPR_SOLVERS = family("ppr_solvers", "retrieval.ppr_solver", "Personalized PageRank solver.",
                     interface=Interface(attrs=("for_index", "solve", "solve_many", "release")))  # retrieve.ppr.base.PPRSolver
PPR_SOLVERS.register("prpack", "hipporag2.retrieve.ppr.prpack:PrpackSolver", "igraph prpack, one call per query (the reference's)")
PPR_SOLVERS.register("batched", "hipporag2.retrieve.ppr.batched:BatchedSolver", "many queries per solve on compiled sparse loops (same scores within retrieval.ppr_tol, 1e-11)")

LINKING = family("linking", "retrieval.linking", "How a query is linked to phrase nodes (SPEC §3-4).",
                 interface=Interface(params=("self", "questions")))  # GraphRetriever methods
LINKING.register("query_to_triple", "hipporag2.retrieve.graph_retriever:GraphRetriever.link_facts",
                 "query embedding against fact embeddings (HippoRAG 2)")
LINKING.register("ner_to_node", "hipporag2.retrieve.graph_retriever:GraphRetriever.link_ner",
                 "LLM NER on the query, each entity to its nearest phrase (needs an LLM)")
LINKING.register("query_to_node", "hipporag2.retrieve.graph_retriever:GraphRetriever.link_nodes",
                 "query embedding against phrase embeddings")

FILTERS = family("filters", "retrieval.filter", "Recognition memory over the candidate facts.",
                 interface=Interface(params=("cfg", "llm")))  # builders: (Config, LazyLLM) -> a FactFilter
FILTERS.register("llm", "hipporag2.retrieve.filter_llm:llm_filter", "an LLM keeps the relevant candidates (DSPy program prompt)")
FILTERS.register("none", "hipporag2.retrieve.base:no_filter", "ablation: keep every candidate")

FILTER_PROGRAMS = family(
    "filter_programs", "retrieval.filter_program", "The LLM filter's saved DSPy program (docs/llm_stages.md).",
    also_accepts=lambda v: v is None or isinstance(v, str),
    also_accepts_doc="a path to a saved DSPy program JSON (e.g. from `hipporag2-tune-filter`); null = `own`",
)
FILTER_PROGRAMS.register("reference", "hipporag2.retrieve.filter_program:reference_program",
                         "the authors' tuned program, read as data from the installed `hipporag==2.0.0a4` wheel (paper default)")
FILTER_PROGRAMS.register("own", "hipporag2.retrieve.filter_program:own_program",
                         "our untuned 3-demo program (hipporag2/resources/filter_program.json), for the CPU demo")

FILTER_PARSERS = family("filter_parsers", "retrieval.filter_parse", "How the LLM filter's reply is read and mapped to candidates (docs/quirks.md).",
                        interface=Interface(attrs=("select",)))
FILTER_PARSERS.register("reference", "hipporag2.retrieve.filter_parse:REFERENCE_READER",
                        "the reference's parser and closest-candidate rule; an unreadable reply keeps nothing (dense fallback)")
FILTER_PARSERS.register("lenient", "hipporag2.retrieve.filter_parse:LENIENT_READER",
                        "repairs code fences, inline headers, bare lists, truncated JSON; case-insensitive mapping without repeats")

V1_SCORING = family("v1_scoring", "retrieval.v1_scoring",
                    "HippoRAG 1 (retrieval.method=hipporag1): how passages are scored and queries linked (docs/quirks.md).")
V1_SCORING.register("legacy", None,
                    "as the legacy v1 code: passage score = min-max of docs_to_facts . facts_to_phrases . PPR; "
                    "query entities normalised like phrases; no entity -> uniform scores (reverse corpus order)")
V1_SCORING.register("spec", None,
                    "SPEC §4: phrase PPR mass summed through the phrase x passage matrix; entities as returned; "
                    "no entity -> dense fallback")

OPENIE_PARSERS = family("openie_parsers", "openie.parse", "How OpenIE NER and triple replies (and query NER) are read (docs/quirks.md).")
OPENIE_PARSERS.register("reference", "hipporag2.openie.parse_reference:READER",
                        "the reference's rule: a reply cut at the token limit is closed, then the first "
                        "flat {\"named_entities\"|\"triples\": [...]} object is read as a Python literal; anything else -> []")
OPENIE_PARSERS.register("lenient", "hipporag2.openie.parse:LENIENT_READER",
                        "code fences, Python style, bare lists, renamed keys, truncation repair at any cut")

OPENIE_METHODS = family("openie_methods", "openie.name", "Where the index's phrases come from (configs/openie/*.yaml pick one).")
OPENIE_METHODS.register("import", "hipporag2.stages:get_openie",
                        "LLM OpenIE: an imported interchange file (openie.import_path) or a fresh extraction with llm=...")
OPENIE_METHODS.register("spacy", "hipporag2.openie.spacy_extract:spacy_corpus",
                        "no LLM: a spaCy pipeline's named entities (and noun chunks) by sentence; no facts, so link "
                        "query_to_node or ner_to_node (issue 27)")

FUSIONS = family("fusions", "retrieval.fusion", "The final ranking of a graph retriever.",
                 interface=Interface(params=("graph", "parts")))  # (GraphRetriever, RetrieverParts) -> a retriever
FUSIONS.register("none", "hipporag2.retrieve.fused_retriever:no_fusion", "the PPR ranking (the paper)")
FUSIONS.register("rrf", "hipporag2.retrieve.fused_retriever:rrf_fusion",
                 "PPR, dense and BM25 rankings fused by reciprocal rank (retrieval.rrf_k, retrieval.rrf_weights); "
                 "a query without graph seeds is ranked by dense and BM25 alone")

QA_ANSWER_MARKERS = family("qa_answer_markers", "qa.answer_marker", "Which `Answer:` marker of the reader's reply counts.",
                           interface=Interface(params=("text",)))
QA_ANSWER_MARKERS.register("reference", "hipporag2.qa.reader:extract_answer_reference",
                           "as the reference: the text between the first `Answer:` and the next, else the whole reply")
QA_ANSWER_MARKERS.register("last", "hipporag2.qa.reader:extract_answer",
                           "the text after the last `Answer:` (then a case-insensitive `answer:`), else the stripped reply")

PROMPT_SOURCES = family("prompt_sources", "llm.prompts",
                        "Whose prompts the LLM stages send: OpenIE NER and triples, query NER, the reader (docs/llm_stages.md).")
PROMPT_SOURCES.register("reference", None,
                        "the authors' templates (ner, triple_extraction, ner_query, rag_qa_*), read as data from the "
                        "installed `hipporag==2.0.0a4` wheel; messages byte-identical to its PromptTemplateManager's")
PROMPT_SOURCES.register("own", None,
                        "our own wording with invented one-shot examples and JSON answer formats (the SmolLM2 CPU presets)")

LLM_ON_FAILURE = family("llm_on_failure", "llm.on_failure", "What a permanently failed LLM request does.")
LLM_ON_FAILURE.register("record", None, "record the failure (empty answer) and go on; counted in metrics.json")
LLM_ON_FAILURE.register("stop", None, "stop the run with the error")

QA_ANSWER_FORMATS = family("qa_answer_formats", "qa.answer_format", "How the reader's reply carries its answer.")
QA_ANSWER_FORMATS.register("marker", None, "free text ending with 'Answer: ...' (the paper's reader)")
QA_ANSWER_FORMATS.register("json", None, "{\"answer\": \"...\"}, JSON-schema constrained where the backend supports it")

SEGMENT_QUERIES = family("segment_queries", "dataset.segment_queries", "Continual indexing: which questions a run evaluates.")
SEGMENT_QUERIES.register("indexed", None, "questions whose gold passages are all in the indexed segments")
SEGMENT_QUERIES.register("all", None, "every question")

REPORT_TABLES = family("report_tables", "", "Layouts of `hipporag2-report --table`.",
                       interface=Interface(params=("runs", "ctx", "out_dir", "name")))
for _name, _summary in (
    ("recall", "passage recall@k of every run"),
    ("table2", "Table 2: QA F1"),
    ("table3", "Table 3: passage recall@5"),
    ("table4", "Table 4: ablations, recall@5"),
    ("table5", "Table 5: passage_node_weight sweep, recall@5"),
    ("table7", "Table 7: retriever swap, recall@5"),
    ("table8", "Table 8: QA EM / F1, both LLM blocks"),
    ("table9", "Table 9: recall@2 / recall@5"),
    ("table10", "Table 10: graph statistics"),
    ("table12", "Table 12: cost"),
    ("grid", "damping x passage_node_weight grid"),
    ("fig3", "Figure 3: continual indexing curves"),
):
    REPORT_TABLES.register(_name, f"hipporag2.report.tables:layout_{_name}", _summary)

ANALYSES = family("analyses", "", "What `hipporag2-analyze`, `hipporag2-explain` and `hipporag2-report --compare` write from a run folder.",
                  interface=Interface(attrs=("__call__",)))
ANALYSES.register("errors", "hipporag2.analysis.analyze:write_analysis",
                  "Appendix E error categories of the questions with recall@k < 1 (errors.jsonl/.md/.csv)")
ANALYSES.register("explain", "hipporag2.analysis.explain:explain_question",
                  "one question's facts, seeds, PPR mass and seed-to-gold paths (ID.png, ID.txt)")
ANALYSES.register("compare", "hipporag2.analysis.compare:compare_runs",
                  "two runs per question: wins/losses/ties, paired bootstrap, biggest changes (.md/.csv/.png)")


def markdown() -> str:
    """docs/choices.md: every family and its choices (regenerate with
    `python -m hipporag2.registry > docs/choices.md`; a test checks it is current)."""
    lines = [
        "# Choices",
        "",
        "Generated from `hipporag2/registry.py` by `python -m hipporag2.registry > docs/choices.md`;",
        "config validation, errors and the code that builds each part read the same registries.",
        "",
    ]
    for reg in FAMILIES.values():
        where = f"`{reg.key}`" if reg.key else f"({reg.family})"
        lines += [f"## {where}", "", reg.doc, "", "| choice | what it is |", "| --- | --- |"]
        lines += [f"| `{c.name}` | {c.summary} |" for c in reg]
        if reg.also_accepts_doc:
            lines += ["", f"Also accepted: {reg.also_accepts_doc}"]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
