"""The library: `from hipporag2 import HippoRAG`.

    rag = HippoRAG("my_index", overrides=["embedding=minilm", "retrieval.filter=none",
                                          "openie.import_path=my_openie.json"])
    rag.index(docs)                      # passage strings "title\\ntext"
    results = rag.retrieve(["Who ...?"], num_to_retrieve=5)
    results[0].docs, results[0].doc_scores, results[0].kept_facts
    report = rag.rag_qa(results, gold_answers=[["..."]])   # needs an llm=...
    rag.index(more_docs)                 # insert: only the new passages are processed
    rag.delete(some_docs)
    rag.close()                          # or: with HippoRAG(...) as rag: ...

`HippoRAG.for_dataset(cfg)` is the same class over a dataset's files (its index in the
stage cache, shared by runs): `pipeline.run` and `hipporag2-sweep` are built on it.

Shaped like the reference implementation's class so its users switch with few edits.
Settings are the CLI's: `overrides` are the same Hydra override strings, validated
the same way (a bad one raises ConfigError before any work), or pass a typed
`Config`. Each stage is the CLI's own code (OpenIE import or extraction, the
embedding cache, `hipporag2.indexing.assemble_index`, `hipporag2.retrieve.factory`,
the reader), so the library and `hipporag2 ...` give the same rankings.

`save_dir` holds the index (`index/`), the OpenIE extractions of the indexed
passages (`openie.json`, then one `openie.N.json` per insert; interchange format),
the synonym pairs (`synonyms.npz`) and the triples' endpoint arrays (`content.npz`),
both what an insert extends, and `hipporag2_index.json` (the settings that define
the index and the OpenIE files, written last). An insert writes only what changed
(new embedding rows as one more segment, `graph/store.py`). Reopening a `save_dir` loads it without indexing again; opening it
with settings that would build a different index (another encoder or graph setting)
is an error, never a silent rebuild.

Insert and delete are exact: the index after `index(a)` then `index(b)` is the index
of `index(a + b)` (same vertices, edges, weights, hence rankings), and after
`delete(b)` the index of `index(a)`. Only new passages go through OpenIE and the
encoder (the embedding cache is by text), and the synonym KNN searches only what
changed (`hipporag2.graph.update`). Identity assumes the encoder gives a text the
same vector each time, which the shared embedding cache guarantees.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from hipporag2.files import atomicio
from hipporag2.config import Config, ConfigError, validate
from hipporag2.data.loaders import Corpus, Query, passage_of_string
from hipporag2.results import QAReport, QueryResult
from hipporag2.runtime.stagetime import StageClock, StageTime

log = logging.getLogger("hipporag2")

STATE_FILE = "hipporag2_index.json"
STATE_FORMAT = 1
CONTENT_FILE = "content.npz"  # the triples' endpoint arrays and query mask: what an insert extends
MAX_OPENIE_FILES = 32  # inserts add an OpenIE file each; past this many, one file is written anew


class HippoRAG:
    """An index in `save_dir` and the configured retriever and reader over it."""

    def __init__(self, save_dir: Union[str, Path], overrides: Optional[Sequence[str]] = None,
                 config: Optional[Config] = None):
        self.save_dir = Path(save_dir)
        if config is not None and overrides:
            raise ConfigError("pass either overrides or config, not both (apply overrides to the Config yourself)")
        if config is None:
            from hipporag2.compose import compose

            given = {o.split("=", 1)[0].lstrip("+~") for o in overrides or []}
            defaults = [f"{k}={v}" for k, v in (("run_dir", self.save_dir / "runs"), ("cache_dir", self.save_dir / "cache"))
                        if k not in given]
            config = compose(defaults + list(overrides or []))
        else:
            config = validate(config)
        from hipporag2.data.inputs import check_input_paths

        check_input_paths(config)
        self._setup(config)
        if (self.save_dir / STATE_FILE).is_file():
            self._load()

    def _setup(self, config: Config) -> None:
        from hipporag2.registry import ENCODER_METHODS, GRAPH_METHODS
        from hipporag2.stages import LazyLLM

        self.cfg: Config = config

        self._llm = LazyLLM(config)
        self.needs_graph = config.retrieval.method in GRAPH_METHODS
        self.needs_encoder = config.retrieval.method in ENCODER_METHODS
        self._store = None
        self._retriever = None
        self._index = None
        self._synonyms = None
        self._cleaned = None  # cleaned triples by passage, kept in memory for the next insert
        self._content = None  # the index's IndexContent, likewise (an insert extends it)
        self._extractions = SavedExtractions([])
        self._openie_files: List[str] = []  # the save_dir's OpenIE files, oldest first
        self.last_update = None  # UpdateStats of the latest insert/delete (synonym KNN work)
        self.last_timings: Dict[str, StageTime] = {}  # wall / CPU seconds by stage of the latest insert/delete
        self.closed = False
        self.inputs = None  # the dataset's checked files (for_dataset only)

    @classmethod
    def for_dataset(cls, config: Config, timings=None, report: Optional[Dict[str, Any]] = None) -> "HippoRAG":
        """HippoRAG over the configured dataset's files, as `hipporag2` runs it: the
        corpus and questions read and checked (`inputs`), and the index of the corpus
        taken from the stage cache (`cache_dir/index/KEY`, by content of corpus, OpenIE,
        encoder and graph settings), built there once when absent and shared by every
        run and sweep over it; nothing is written to a save_dir. `report` collects what
        the stages report for metrics.json (OpenIE counts, index key); `timings` their
        seconds (a `stages.Timings`)."""
        from hipporag2.embed.store import open_store
        from hipporag2.stages import Timings, load_inputs, make_retriever

        config = validate(config)
        rag = cls.__new__(cls)
        rag.save_dir = Path(config.run_dir)
        rag._setup(config)
        rag.timings = timings if timings is not None else Timings()
        rag.report = report if report is not None else {}
        rag.inputs = load_inputs(config, rag.timings)
        atomicio.crash_point("data_loaded")
        rag._store = open_store(config.cache_dir, config.embedding, checkpoint_s=config.checkpoint_s)
        rag._retriever, rag._index = make_retriever(config, rag.inputs.corpus, rag._store, rag._llm, rag.report, rag.timings)
        return rag

    @property
    def retriever(self):
        """The configured retriever over the index (built on first use)."""
        return self._get_retriever()

    @property
    def index_data(self):
        """The graph index (`hipporag2.graph.store.Index`; None for methods without one)."""
        return self._index

    def retrieve_dataset(self, out) -> tuple:
        """`for_dataset` mode: every question of the dataset retrieved block by block
        into `out` (a `run_files.RetrievalFile`: retrieval.jsonl, which is also the
        checkpoint a rerun resumes from), then the `retrieval.max_fallback_rate` gate.
        Returns (results in question order, how many a previous process had finished)."""
        from hipporag2.gates import check_fallback_rate
        from hipporag2.files.run_files import retrieve_into
        from hipporag2.stages import count_fallbacks, llm_stage_stats

        self._check_open()
        results, resumed = retrieve_into(self._retriever, self.inputs.queries, out, self.timings.stage)
        if self._index is not None:
            check_fallback_rate(self.cfg.retrieval.method, count_fallbacks(results), len(results),
                                self.cfg.retrieval.max_fallback_rate, int(self._index.stats.get("facts", 0)))
        self.report.update(llm_stage_stats(self._retriever))
        return results, resumed

    def llm_report(self) -> Dict[str, Any]:
        """The LLM's usage and engine report for metrics.json (empty when none was built)."""
        from hipporag2.stages import llm_failures

        out: Dict[str, Any] = {}
        if self._llm is not None and self._llm.usage():
            out["llm_usage"] = self._llm.usage()
            out["llm_failures"] = llm_failures(self._llm.usage())
        if self._llm is not None and self._llm.engine_report():
            out["llm_engine"] = self._llm.engine_report()
        return out

    def llm(self):
        """The configured LLM (built on first use; ConfigError for llm=none)."""
        self._check_open()
        return self._llm.get()

    # ---- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Release the LLM (a vLLM engine's worker processes, which would otherwise keep
        the interpreter from exiting; a local model's weights), its response cache, the
        encoder and the memory-mapped index files. The index on disk is complete after
        every `index`/`delete`, so nothing is written here. Idempotent; the object is
        unusable afterwards (reopen `save_dir` to continue)."""
        if self.closed:
            return
        self.closed = True
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.release()
        self._retriever = self._store = self._index = None
        self._synonyms = self._cleaned = self._content = None
        self._extractions = SavedExtractions([])

    def __enter__(self) -> "HippoRAG":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ConfigError(f"HippoRAG({str(self.save_dir)!r}) is closed: open the save_dir again to use it")

    # ---- state ---------------------------------------------------------------------

    @property
    def passages(self) -> List[str]:
        """The indexed passage strings, in index order (insertion order)."""
        return list(self._index.passages) if self._index is not None else []

    @property
    def edges(self):
        """The graph's edges (`hipporag2.graph.build.GraphEdges`: source, target, weight, kind)."""
        return self._index.edges if self._index is not None else None

    @property
    def graph_stats(self) -> Dict[str, int]:
        return dict(self._index.stats) if self._index is not None else {}

    def _settings(self) -> Dict[str, Any]:
        return {
            "graph": self.needs_graph,
            "encoder": self.store().dir.name if self.needs_encoder else None,
            "graph_config": asdict(self.cfg.graph) if self.needs_graph else None,
        }

    def _check_compatible(self, saved: Dict[str, Any]) -> None:
        problems = []
        if self.needs_graph and not saved.get("graph"):
            problems.append(f"it has no graph (indexed for a method without OpenIE), retrieval.method={self.cfg.retrieval.method} needs one")
        if self.needs_encoder and saved.get("encoder") != self.store().dir.name:
            problems.append(f"its passages were embedded by {saved.get('encoder')!r}, this config's encoder is {self.store().dir.name!r}")
        if self.needs_graph and saved.get("graph") and saved.get("graph_config") != asdict(self.cfg.graph):
            diff = [f"graph.{k}={v!r} (saved {saved['graph_config'].get(k)!r})" for k, v in asdict(self.cfg.graph).items()
                    if saved["graph_config"].get(k) != v]
            problems.append("its graph was built with other settings: " + ", ".join(diff))
        if problems:
            raise ConfigError(f"save_dir {self.save_dir} holds an index this config cannot use: " + "; ".join(problems)
                              + " (use another save_dir, or the settings it was indexed with)")

    def _load(self) -> None:
        from hipporag2.graph.store import load_index

        state = json.loads((self.save_dir / STATE_FILE).read_text(encoding="utf-8"))
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"{self.save_dir / STATE_FILE}: unknown format {state.get('format')!r}")
        self._check_compatible(state["settings"])
        self._index = load_index(self.save_dir / "index")
        if self._index.n_passages != state["passages"]:
            raise ConfigError(f"{self.save_dir}: index/ holds {self._index.n_passages} passages, {STATE_FILE} says {state['passages']}")
        syn = np.load(self.save_dir / "synonyms.npz")
        self._synonyms = (syn["query"], syn["neighbour"], syn["score"])
        self._openie_files = [f for f in state.get("openie_files", ["openie.json"]) if (self.save_dir / f).is_file()]
        self._extractions = SavedExtractions([self.save_dir / f for f in self._openie_files])
        if self.needs_graph and (self.save_dir / CONTENT_FILE).is_file():
            from hipporag2.indexing import content_of_index

            with np.load(self.save_dir / CONTENT_FILE) as arrays:
                self._content = content_of_index(self._index, {k: arrays[k] for k in arrays.files})
        log.info("opened %s: %d passages, %d phrases", self.save_dir, self._index.n_passages, self._index.n_phrases)

    def _save(self, settings: Dict[str, Any], appended: Optional[List[str]]) -> None:
        """Write what changed. `appended`: the passages an insert added at the end (None:
        anything else), whose OpenIE goes to a file of its own beside the earlier ones;
        the index's embedding rows are likewise written once (`graph/store.py`)."""
        from hipporag2.graph.store import save_index
        from hipporag2.openie.interchange import write_openie
        from hipporag2.text import passage_id

        self.save_dir.mkdir(parents=True, exist_ok=True)
        state_path = self.save_dir / STATE_FILE
        state_path.unlink(missing_ok=True)  # the state file marks a complete save_dir: written last
        arrays = {"query": self._synonyms[0], "neighbour": self._synonyms[1], "score": np.asarray(self._synonyms[2], np.float32)}
        _write_npz(self.save_dir / "synonyms.npz", arrays)
        if self.needs_graph:
            if appended is not None and self._openie_files and len(self._openie_files) < MAX_OPENIE_FILES:
                exs = [self._extractions.get(k) for k in (passage_id(p) for p in appended)]
                if any(e is not None for e in exs):
                    name = f"openie.{max(_file_numbers(self._openie_files)) + 1}.json"
                    write_openie(self.save_dir / name, [e for e in exs if e is not None])
                    self._openie_files.append(name)
            else:
                exs = [self._extractions.get(passage_id(p)) for p in self._index.passages]
                write_openie(self.save_dir / "openie.json", [e for e in exs if e is not None])
                for stale in self._openie_files:
                    if stale != "openie.json":
                        (self.save_dir / stale).unlink(missing_ok=True)
                self._openie_files = ["openie.json"]
            c = self._content
            _write_npz(self.save_dir / CONTENT_FILE, dict(zip(("subject", "object", "owner", "lengths"), c.pairs), query=c.query_mask()))
        save_index(self._index, self.save_dir / "index")
        atomicio.write_json(state_path, {"format": STATE_FORMAT, "passages": self._index.n_passages, "settings": settings,
                                         "openie_files": self._openie_files})

    def store(self):
        """The embedding cache of the configured encoder (the encoder loads on first miss)."""
        self._check_open()
        if self._store is None:
            from hipporag2.embed.store import open_store

            self._store = open_store(self.cfg.cache_dir, self.cfg.embedding)
        return self._store

    # ---- indexing ------------------------------------------------------------------

    def index(self, docs: Sequence[str]) -> int:
        """Index passage strings; passages already indexed are skipped, so calling it
        again with more passages inserts them. Returns how many were added."""
        self._check_open()
        docs = _check_docs(docs, "index")
        have = set(self.passages)
        new = [d for d in dict.fromkeys(docs) if d not in have]
        if not new and self._index is not None:
            return 0
        clock = StageClock()
        if self.needs_graph:
            from hipporag2.stages import get_openie

            with clock.stage("openie"):
                corpus = Corpus([passage_of_string(d, i) for i, d in enumerate(new)])
                report: Dict[str, Any] = {}
                extracted, _ = get_openie(self.cfg, corpus, self._llm, report)  # openie.min_coverage gate inside
                # raw triples of the indexed passages (their extractions, counted when indexed) + the new ones'
                before = int(self._index.stats.get("raw_triples", 0)) if self._index is not None else 0
                self._check_facts(before + sum(len(ex.triples) for ex in extracted.values()),
                                  str(report.get("openie_source", "OpenIE")), len(have) + len(new))
                self._extractions.update(extracted)
        self._rebuild(self.passages + new, clock)
        log.info("indexed %d new passages (%d in all)", len(new), len(self.passages))
        return len(new)

    def delete(self, docs: Sequence[str]) -> int:
        """Remove passages, and the phrases and facts no remaining passage supports.
        Passages not in the index are ignored. Returns how many were removed."""
        self._check_open()
        docs = set(_check_docs(docs, "delete", allow_empty=True))
        remaining = [p for p in self.passages if p not in docs]
        removed = len(self.passages) - len(remaining)
        if removed == 0:
            return 0
        from hipporag2.text import passage_id

        keep_ids = {passage_id(p) for p in remaining}
        self._extractions.keep_only(keep_ids)
        self._rebuild(remaining, StageClock())
        log.info("deleted %d passages (%d remain)", removed, len(remaining))
        return removed

    def _rebuild(self, passages: List[str], clock: StageClock) -> None:
        from hipporag2.indexing import Previous, assemble_index

        settings = self._settings()
        previous = None
        if self._index is not None and self._synonyms is not None:
            previous = Previous(self._index.phrases, self._synonyms, self._cleaned, self._index, self._content)
        split = [passage_of_string(p, i) for i, p in enumerate(passages)]
        before = self.passages
        asm = assemble_index(
            passages, [p.title for p in split], list(range(len(passages))), self._extractions,
            self.store() if self.needs_encoder else None, self.cfg.graph, progress=self.cfg.progress,
            previous=previous, graph=self.needs_graph,
        )
        self._index, self._synonyms, self._cleaned, self.last_update = asm.index, asm.synonyms, asm.cleaned, asm.update
        self._content = asm.content
        self._retriever = None
        clock.merge(asm.clock)
        appended = passages[len(before):] if len(passages) >= len(before) and passages[: len(before)] == before else None
        with clock.stage("save"):
            self._save(settings, appended)
        self.last_timings = clock.stages

    # ---- retrieval and QA ----------------------------------------------------------

    def _check_facts(self, n_facts: int, source: str, n_passages: int) -> None:
        """The CLI's gate (hipporag2.gates): a graph method over an index without facts
        would answer every query by the dense fallback."""
        from hipporag2.gates import check_has_facts

        check_has_facts(n_facts, source, n_passages, self.cfg.retrieval.max_fallback_rate)

    def _get_retriever(self):
        self._check_open()
        if self.inputs is not None:  # for_dataset: built with the index
            return self._retriever
        if self._index is None:
            raise ConfigError(f"{self.save_dir} has no index yet: call index(docs) first")
        if self.needs_graph:
            self._check_facts(int(self._index.stats.get("facts", 0)), str(self.save_dir), self._index.n_passages)
        if self._retriever is None:
            from hipporag2.retrieve.factory import RetrieverParts, build_retriever

            parts = RetrieverParts(cfg=self.cfg, passages=self._index.passages, index=self._index,
                                   store=self.store() if self.needs_encoder else None, llm=self._llm)
            self._retriever = build_retriever(parts)
        return self._retriever

    def retrieve(self, queries: Sequence[Union[str, Query]], num_to_retrieve: Optional[int] = None) -> List[QueryResult]:
        """The top `num_to_retrieve` (default retrieval.retrieval_top_k) passages of
        each query, best first, with the graph retriever's facts and seeds."""
        qs = [q if isinstance(q, Query) else Query(id=str(i), question=_check_question(q, i)) for i, q in enumerate(queries)]
        retriever = self._get_retriever()
        k = num_to_retrieve if num_to_retrieve is not None else self.cfg.retrieval.retrieval_top_k
        if k < 1:
            raise ConfigError(f"num_to_retrieve={k} must be >= 1")
        retriever.cfg = replace(self.cfg.retrieval, retrieval_top_k=k)
        out = []
        passages = self.inputs.corpus.strings if self.inputs is not None else self._index.passages
        block = self.cfg.retrieval.query_batch_size
        for start in range(0, len(qs), block):
            for q, r in zip(qs[start : start + block], retriever.retrieve(qs[start : start + block])):
                r.question, r.docs = q.question, [passages[i] for i in r.ranked]
                out.append(r)
        if self.needs_graph:
            self._check_fallbacks(out)
        return out

    def _check_fallbacks(self, results: List[QueryResult]) -> None:
        """The CLI's `retrieval.max_fallback_rate` gate over this call's queries; the
        GateError carries the results (`.results`) for a caller that wants them anyway."""
        from hipporag2.gates import GateError, check_fallback_rate

        try:
            check_fallback_rate(self.cfg.retrieval.method, sum(1 for r in results if r.fallback), len(results),
                                self.cfg.retrieval.max_fallback_rate, int(self._index.stats.get("facts", 0)),
                                relax="pass the override retrieval.max_fallback_rate=1 to accept it; "
                                      "the error's .results holds the results")
        except GateError as e:
            e.results = results
            raise

    def rag_qa(self, queries: Sequence[Union[str, QueryResult]], gold_answers: Optional[Sequence[Sequence[str]]] = None,
               gold_docs: Optional[Sequence[Sequence[str]]] = None) -> QAReport:
        """Answer each query from its top `qa.qa_top_k` passages (or the context its
        retriever gives the reader, e.g. RAPTOR's tree nodes) with the configured
        LLM (retrieving first when given questions). With gold answers: EM / F1;
        with gold passages: recall@k (`recall_k`)."""
        from hipporag2.evaluate.metrics import exact_match, mean_recall, token_f1
        from hipporag2.qa.reader import answer_questions

        self._check_open()
        results = [q if isinstance(q, QueryResult) else None for q in queries]
        todo = [q for q in queries if not isinstance(q, QueryResult)]
        if todo:
            fresh = iter(self.retrieve(todo))
            results = [r if r is not None else next(fresh) for r in results]
        for name, gold in (("gold_answers", gold_answers), ("gold_docs", gold_docs)):
            if gold is not None and len(gold) != len(results):
                raise ConfigError(f"{name} has {len(gold)} entries for {len(results)} queries")
        top_k = self.cfg.qa.qa_top_k
        # what the retriever says the reader reads: passage strings (as the reference's
        # reader takes them), or its own context (RAPTOR's tree nodes), as in a CLI run
        contexts = [r.reader_input(top_k) for r in results]
        answers = answer_questions(self.cfg, self._llm.get(), [r.question for r in results], contexts)
        report = QAReport(results=results)
        ems, f1s = [], []
        for i, (r, a) in enumerate(zip(results, answers)):
            r.answer = None if a.error else a.prediction
            report.no_answer_marker += 0 if (a.marker_found or a.error) else 1
            report.llm_failures += 1 if a.error else 0
            if gold_answers is not None:
                r.gold_answers = _as_answers(gold_answers[i])
                ems.append(exact_match(a.prediction, r.gold_answers))
                f1s.append(token_f1(a.prediction, r.gold_answers))
            if gold_docs is not None:
                r.gold_docs = list(gold_docs[i])
        if ems:
            report.em = round(100.0 * sum(ems) / len(ems), 1)
            report.f1 = round(100.0 * sum(f1s) / len(f1s), 1)
        if gold_docs is not None:
            report.recall = mean_recall([r.gold_docs for r in results], [r.docs for r in results], self.cfg.recall_k)
        if report.llm_failures:  # the CLI's qa.max_failure_rate gate; the answers ride on the error
            from hipporag2.gates import GateError, check_qa_failures

            try:
                check_qa_failures(report.llm_failures, len(results), next(a.error for a in answers if a.error),
                                  self.cfg.qa.max_failure_rate, "the error's .results (answer None where the call failed)")
            except GateError as e:
                e.results = results
                raise
        return report


class SavedExtractions:
    """OpenIE extractions by passage id: this session's in memory, the save_dir's read
    from its files on the first look-up that misses (an insert after reopening looks
    up only the new passages, so it reads none)."""

    def __init__(self, files: Sequence[Path]):
        self._files = list(files)
        self._by_id: Dict[str, Any] = {}

    def _read(self) -> None:
        from hipporag2.openie.interchange import parse_openie

        files, self._files = self._files, []
        for f in files:
            for ex in parse_openie(f):
                self._by_id.setdefault(ex.idx, ex)

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self._by_id and self._files:
            self._read()
        return self._by_id.get(key, default)

    def update(self, extractions: Dict[str, Any]) -> None:
        self._by_id.update(extractions)

    def keep_only(self, keys: set) -> None:
        self._read()
        self._by_id = {k: v for k, v in self._by_id.items() if k in keys}


def _write_npz(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _file_numbers(names: Sequence[str]) -> List[int]:
    """openie.json is 1, openie.N.json is N."""
    return [int(n.split(".")[1]) if n.count(".") == 2 else 1 for n in names]


def _as_answers(gold) -> List[str]:
    return [gold] if isinstance(gold, str) else [str(g) for g in gold]


def _check_docs(docs, what: str, allow_empty: bool = False) -> List[str]:
    if isinstance(docs, str):
        raise ConfigError(f"{what}(docs): expected a list of passage strings, got one string")
    out = list(docs)
    for i, d in enumerate(out):
        if not isinstance(d, str) or (not d.strip() and not allow_empty):
            raise ConfigError(f"{what}(docs): docs[{i}] is {type(d).__name__} {str(d)[:40]!r}, expected a non-empty passage string")
    if not out and not allow_empty:
        raise ConfigError(f"{what}(docs): no passages given")
    return out


def _check_question(q, i: int) -> str:
    if not isinstance(q, str) or not q.strip():
        raise ConfigError(f"retrieve(queries): queries[{i}] is {type(q).__name__} {str(q)[:40]!r}, expected a question string")
    return q
