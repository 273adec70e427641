"""`hipporag2-tune-filter`: optimise the recognition-memory filter prompt with DSPy MIPROv2.

    hipporag2-tune-filter --output my_filter.json -- \
        dataset=musique_train data_dir=../shared/data \
        openie.import_path=../shared/data/openie/musique_train_openie_gpt-3.5-turbo-1106.json \
        llm=openai_compatible llm.model=meta-llama/Llama-3.3-70B-Instruct \
        llm.base_url=http://localhost:8000/v1

Everything after the options is a Hydra override, exactly as for `hipporag2`: it picks
the training query file, the index (OpenIE + embedder) whose candidate facts are
filtered, and the LLM server (`llm.base_url`, `llm.model`, `llm.api_key_env`), which
DSPy reaches through LiteLLM as `openai/<llm.model>`. Use a capable model: the paper
tuned on Llama-3.3-70B-Instruct. The run then filters with
`retrieval.filter=llm retrieval.filter_program=my_filter.json`.

Training data, per training question:
- inputs: the question and its `linking_top_k` candidate facts (query-to-fact linking of
  the index, SPEC §3.1-3.2), as `{"fact": [[s, p, o], ...]}`;
- label (a documented proxy, since the benchmarks have no fact-level gold): the
  candidates whose subject AND object both occur in one of the question's gold passages
  (normalised text, whole words), in candidate order.

Metric: F1 between the candidates the program's answer maps to (the same mapping as at
run time) and the label set; both empty scores 1. While bootstrapping demos (trace set),
only a perfect answer counts as a success.

The signature is the authors' program's: inputs `question` and `fact_before_filter`
(str), output `fact_after_filter` of type `Fact` (a pydantic model with a
`fact: list[list[str]]` field), so DSPy renders, parses and stores it as it did for them.
The result is saved as a DSPy state JSON (`prog` = the predictor; a bootstrapped demo's
`Fact` as compact JSON text, like the authors' demos) plus `prog.system`, the system
message DSPy's chat adapter renders for the optimised signature: the layout
`hipporag2.retrieve.filter_llm` loads.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hipporag2.files import atomicio
from hipporag2.retrieve.filter_messages import facts_json
from hipporag2.retrieve.filter_parse import map_to_candidates, parse_filter_answer
from hipporag2.retrieve.filter_program import INPUT_FIELDS, OUTPUT_FIELD, OWN_PROGRAM, load_program
from hipporag2.text import normalise_phrase

log = logging.getLogger("hipporag2.tune_filter")


# --- DSPy program -------------------------------------------------------------------

def fact_type():
    """The output field's type, as the authors' tuned program declares it: a pydantic
    model named `Fact` with one field `fact`, a list of lists of strings. DSPy's chat
    adapter then names it in the system message ("`fact_after_filter` (Fact)"), prints
    its JSON schema there, and parses a reply into it, as for the reference's program;
    the field description is in our words."""
    import pydantic

    class Fact(pydantic.BaseModel):
        fact: list[list[str]] = pydantic.Field(
            description="the kept facts, each one a list of three strings: subject, predicate, object")

    return Fact


def answer_text(value: Any) -> str:
    """The output field as text: a `Fact` (what DSPy parses a reply into) as compact JSON,
    the form the authors' program stores its bootstrapped demos in; strings as they are."""
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "" if value is None else str(value)


def make_signature(instructions: str, descriptions: Optional[Dict[str, str]] = None):
    """The filter as a DSPy signature: question, fact_before_filter -> fact_after_filter."""
    import dspy

    d = {
        "question": "the question to be answered",
        "fact_before_filter": "candidate facts retrieved for the question, as JSON",
        "fact_after_filter": "the candidate facts that help answer the question, as JSON",
        **(descriptions or {}),
    }
    fields = {
        "question": (str, dspy.InputField(desc=d["question"])),
        "fact_before_filter": (str, dspy.InputField(desc=d["fact_before_filter"])),
        "fact_after_filter": (fact_type(), dspy.OutputField(desc=d["fact_after_filter"])),
    }
    return dspy.make_signature(fields, instructions, signature_name="FactFilter")


def make_module(instructions: str, descriptions: Optional[Dict[str, str]] = None, demos: Sequence[Dict] = ()):
    """A module whose single predictor is the attribute `prog` (hence the JSON key)."""
    import dspy

    class FactFilterProgram(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.prog = dspy.Predict(make_signature(instructions, descriptions))

        def forward(self, question: str, fact_before_filter: str):
            return self.prog(question=question, fact_before_filter=fact_before_filter)

    module = FactFilterProgram()
    module.prog.demos = [
        dspy.Example(**{k: demo[k] for k in (*INPUT_FIELDS, OUTPUT_FIELD)}).with_inputs(*INPUT_FIELDS)
        for demo in demos
    ]
    return module


def module_from_program_file(path: Optional[str | Path] = None):
    """A DSPy module initialised from a saved program (ours or the authors')."""
    prog = load_program(path)
    return make_module(prog.instructions, prog.field_descriptions, prog.demos)


def program_json(module) -> Dict[str, Any]:
    """DSPy's state of `module` plus the rendered system message, as saved on disk."""
    import dspy

    state = module.dump_state()
    if "prog" not in state:
        raise ValueError(f"expected a predictor named 'prog', got {sorted(state)}")
    for demo in state["prog"].get("demos", []):
        if OUTPUT_FIELD in demo:  # a bootstrapped demo holds the parsed Fact (dumped as a dict)
            demo[OUTPUT_FIELD] = answer_text(demo[OUTPUT_FIELD])
    state["prog"]["system"] = dspy.ChatAdapter().format_system_message(module.prog.signature)
    return state


def save_program(module, path: str | Path, extra_metadata: Optional[Dict] = None) -> Dict[str, Any]:
    import dspy

    data = program_json(module)
    data["metadata"] = {
        "dependency_versions": {"dspy": dspy.__version__},
        "source": "hipporag2-tune-filter",
        **(extra_metadata or {}),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomicio.write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", "filter program")
    return data


# --- training data ------------------------------------------------------------------

def _words(text: str) -> str:
    return " " + " ".join(normalise_phrase(text).split()) + " "


def gold_facts(candidates: Sequence[Sequence[str]], gold_passages: Sequence[str]) -> List[int]:
    """Candidates whose subject and object both occur (whole words) in one gold passage."""
    golds = [_words(p) for p in gold_passages]
    keep = []
    for j, fact in enumerate(candidates):
        s, o = _words(fact[0]).strip(), _words(fact[2]).strip()
        if not s or not o:
            continue
        if any(f" {s} " in g and f" {o} " in g for g in golds):
            keep.append(j)
    return keep


def make_example(question: str, candidates: Sequence[Sequence[str]], gold_passages: Sequence[str]):
    import dspy

    cands = [list(c) for c in candidates]
    kept = [cands[j] for j in gold_facts(cands, gold_passages)]
    return dspy.Example(
        question=question,
        fact_before_filter=facts_json(cands),
        fact_after_filter=facts_json(kept),
    ).with_inputs(*INPUT_FIELDS)


def _candidates_of(example) -> List[List[str]]:
    value, ok, _ = parse_filter_answer(example.fact_before_filter)
    return value if ok else []


def filter_metric(example, prediction, trace=None) -> Any:
    cands = _candidates_of(example)
    gold_list, _, _ = parse_filter_answer(example.fact_after_filter)
    gold = set(map_to_candidates(gold_list or [], cands, len(cands) or 1))
    facts, ok, _ = parse_filter_answer(answer_text(getattr(prediction, OUTPUT_FIELD, None)))
    pred = set(map_to_candidates(facts or [], cands, len(cands) or 1)) if ok else set()
    if not gold and not pred:
        score = 1.0
    elif not gold or not pred:
        score = 0.0
    else:
        tp = len(gold & pred)
        score = 0.0 if tp == 0 else 2 * tp / (len(gold) + len(pred))
    if trace is not None:
        return score >= 0.999
    return score


class _CandidateRecorder:
    """A FactFilter that records each question's candidates and keeps none (cheap: the
    retriever then skips PPR)."""

    name = "record"

    def __init__(self) -> None:
        self.candidates: List[List[Tuple[str, str, str]]] = []

    def select(self, questions, candidates):
        self.candidates.extend([list(c) for c in candidates])
        return [[] for _ in candidates]


def build_examples(cfg) -> List[Any]:
    """Examples for every query of the configured dataset, from the configured index."""
    from hipporag2.embed.store import open_store
    from hipporag2.stages import LazyLLM, Timings, get_index, load_dataset
    from hipporag2.retrieve.graph_retriever import GraphRetriever

    corpus, queries = load_dataset(cfg)
    store = open_store(cfg.cache_dir, cfg.embedding)
    report: Dict = {}
    index = get_index(cfg, corpus, store, LazyLLM(cfg), report, Timings())
    recorder = _CandidateRecorder()
    rcfg = cfg.retrieval
    rcfg.linking = "query_to_triple"
    GraphRetriever(index, store, rcfg, fact_filter=recorder, progress=cfg.progress).retrieve(queries)
    return [make_example(q.question, c, q.gold_passages) for q, c in zip(queries, recorder.candidates)]


# --- optimisation ---------------------------------------------------------------------

def make_lm(llm_cfg):
    """A dspy.LM for the OpenAI-compatible server of the llm config."""
    import dspy

    if not llm_cfg.base_url:
        raise SystemExit("tuning needs an OpenAI-compatible server: set llm=openai_compatible llm.base_url=... llm.model=...")
    return dspy.LM(
        f"openai/{llm_cfg.model}",
        api_base=llm_cfg.base_url,
        api_key=os.environ.get(llm_cfg.api_key_env) or "EMPTY",
        temperature=llm_cfg.temperature,
        max_tokens=llm_cfg.max_new_tokens,
        num_retries=llm_cfg.max_retries,
    )


def tune(cfg, output: str, *, start_program: Optional[str], auto: str, train_size: Optional[int],
         val_size: Optional[int], num_threads: int, max_bootstrapped_demos: int,
         max_labeled_demos: int, seed: int) -> Dict[str, Any]:
    import dspy

    try:
        import optuna  # noqa: F401 - MIPROv2's search needs it, and says so only at the end
    except ImportError:
        raise SystemExit("MIPROv2 needs optuna: pip install optuna (or dspy[optuna])") from None
    examples = build_examples(cfg)
    rng = random.Random(seed)
    rng.shuffle(examples)
    n_val = val_size if val_size is not None else max(1, len(examples) // 5)
    valset = examples[:n_val]
    trainset = examples[n_val:]
    if train_size is not None:
        trainset = trainset[:train_size]
    if not trainset or not valset:
        raise SystemExit(f"too few questions to tune on ({len(examples)})")
    log.info("tuning the filter on %d train / %d validation questions", len(trainset), len(valset))
    lm = make_lm(cfg.llm)
    dspy.configure(lm=lm)
    student = module_from_program_file(start_program)
    student.prog.demos = []  # MIPROv2 proposes its own demos from the training set
    evaluate = dspy.Evaluate(devset=valset, metric=filter_metric, num_threads=num_threads, display_progress=True)
    before = evaluate(student)
    optimizer = dspy.MIPROv2(
        metric=filter_metric,
        auto=auto,
        num_threads=num_threads,
        max_bootstrapped_demos=max_bootstrapped_demos,
        max_labeled_demos=max_labeled_demos,
        seed=seed,
    )
    tuned = optimizer.compile(student, trainset=trainset, valset=valset)
    after = evaluate(tuned)
    meta = {
        "llm": cfg.llm.model,
        "dataset": cfg.dataset.name,
        "train": len(trainset),
        "val": len(valset),
        # dspy.Evaluate scores: mean metric over the validation set, in percent.
        "val_score_before": float(getattr(before, "score", before)),
        "val_score_after": float(getattr(after, "score", after)),
        "auto": auto,
        "seed": seed,
    }
    save_program(tuned, output, meta)
    log.info("saved %s: validation score %.1f -> %.1f", output, meta["val_score_before"], meta["val_score_after"])
    return meta


def parse_args(argv: Optional[Sequence[str]] = None):
    p = argparse.ArgumentParser(
        prog="hipporag2-tune-filter",
        description="Tune the recognition-memory filter prompt (system prompt and few-shot demos) with DSPy "
        "MIPROv2 on a dataset's questions, as the paper did (SPEC §6), and save it as a DSPy program JSON that "
        "retrieval.filter_program=PATH uses. Remaining arguments are Hydra overrides as for `hipporag2` "
        "(dataset, llm, embedding, openie.import_path, ...); the index comes from the shared cache.",
        epilog="example: hipporag2-tune-filter --output filter_tuned.json +experiment=musique_train_ablations "
        "llm=openai_compatible llm.base_url=http://localhost:8000/v1",
    )
    p.add_argument("--output", required=True, help="where to write the tuned program JSON")
    p.add_argument("--start", default=None,
                   help=f"program whose prompt and demos the search starts from (default: the shipped {OWN_PROGRAM.name})")
    p.add_argument("--auto", default="light", choices=["light", "medium", "heavy"],
                   help="MIPROv2 search budget: how many candidate prompts and trials (light: the fewest; default light)")
    p.add_argument("--train-size", type=int, default=None,
                   help="most questions used to propose and score candidates (default: all not held out)")
    p.add_argument("--val-size", type=int, default=None,
                   help="held-out questions (after a seeded shuffle) on which the before/after score is reported (default: a fifth)")
    p.add_argument("--num-threads", type=int, default=8, help="parallel LLM calls during the search (default 8)")
    p.add_argument("--max-bootstrapped-demos", type=int, default=4,
                   help="most few-shot demos generated by running the program (default 4)")
    p.add_argument("--max-labeled-demos", type=int, default=4,
                   help="most few-shot demos taken directly from the training questions (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the search's sampling (default 0)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. dataset=musique_train llm=openai_compatible")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    from hipporag2.cli import user_errors
    from hipporag2.config_check import check_overrides
    from hipporag2.runtime.interrupts import exit_on_signal

    overrides = [o for o in args.overrides if o != "--"]
    if not any(re.match(r"run_dir=", o) for o in overrides):
        overrides.append("run_dir=runs/tune_filter")
    with exit_on_signal(), user_errors():
        cfg = check_overrides(overrides)
        from hipporag2.data.inputs import check_filter_program_loads

        check_filter_program_loads(args.start)  # a bad --start program: one line now, not after the data is read
        meta = tune(
            cfg, args.output, start_program=args.start, auto=args.auto, train_size=args.train_size,
            val_size=args.val_size, num_threads=args.num_threads,
            max_bootstrapped_demos=args.max_bootstrapped_demos, max_labeled_demos=args.max_labeled_demos,
            seed=args.seed,
        )
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
