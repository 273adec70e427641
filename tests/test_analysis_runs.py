"""hipporag2-analyze, hipporag2-explain and hipporag2-report --compare on real runs of
the pipeline: the seven-passage world of tests/small_world.py as a dataset with
hand-written OpenIE (imported), MiniLM embeddings, HippoRAG 2 without filter and
dense retrieval."""
import json

import pytest

from hipporag2.analysis import errors as E
from hipporag2.analysis.analyze import classify_run, main as analyze_main, write_analysis
from hipporag2.analysis.compare import compare_scores
from hipporag2.analysis.explain import explain_question, explanation_text
from hipporag2.analysis.figure import draw_explanation
from hipporag2.analysis.run_view import RunUnavailable, open_run
from hipporag2.cli import compose
from hipporag2.data.loaders import Passage
from hipporag2.openie.interchange import Extraction, write_openie
from hipporag2.pipeline import run
from tests.small_world import DOCS, TRIPLES

QUESTIONS = [
    ("q-director", "Where was the director of The Glass Harbour born?", "Brackmoor", ["The Glass Harbour", "Oskar Threnody"]),
    ("q-river", "Which river does the capital of Velmora lie on?", "River Tessaly", ["Velmora", "Port Ellery"]),
    ("q-score", "Who composed the score of the film that Oskar Threnody directed?", "Mira Holt", ["The Glass Harbour", "Mira Holt"]),
    ("q-bridge", "What crosses the river of Port Ellery?", "Tessaly Bridge", ["Tessaly Bridge", "Port Ellery"]),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    text = dict(DOCS)
    (root / "tiny_corpus.json").write_text(json.dumps([{"title": t, "text": x} for t, x in DOCS]))
    queries = [{"id": qid, "question": q, "answer": a,
                "paragraphs": [{"title": t, "paragraph_text": text[t], "is_supporting": True} for t in gold]}
               for qid, q, a, gold in QUESTIONS]
    (root / "tiny.json").write_text(json.dumps(queries))
    write_openie(root / "openie.json", [Extraction(Passage(t, x, i).string, [], tr) for i, ((t, x), tr) in enumerate(zip(DOCS, TRIPLES))])
    common = ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={root}", "embedding=minilm",
              f"openie.import_path={root / 'openie.json'}", f"cache_dir={root / 'cache'}", "progress=false"]
    runs = {}
    for name, extra in (("hipporag2", ["retrieval=hipporag2", "retrieval.filter=none"]), ("dense", ["retrieval=dense"])):
        cfg = compose(common + extra + [f"run_dir={root / name}"])
        run(cfg)
        runs[name] = (root / name, cfg)
    return runs


def test_analyze_counts_sum_to_failing_questions(world, tmp_path):
    run_dir, cfg = world["hipporag2"]
    view = open_run(run_dir, cfg)
    cases, n = classify_run(view, k=1)  # k=1: every two-passage question fails
    assert n == len(QUESTIONS) and len(cases) == len(QUESTIONS)
    for c in cases:
        assert c.category in E.CATEGORY_ORDER and c.flags[E.NO_FACT_LEFT] is None
        assert c.missed_titles and set(c.missed_titles) <= set(c.gold_titles)
    table = write_analysis(view, tmp_path, k=1)
    assert sum(r.primary_count for r in table.rows) == table.n_failing == len(cases)
    lines = (tmp_path / "errors.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [c.id for c in cases]
    md = (tmp_path / "errors.md").read_text()
    assert "n/a" in md and f"**{len(cases)}**" in md
    assert (tmp_path / "errors.csv").read_text().count("\n") == len(E.CATEGORY_ORDER) + 1


def test_analyze_refuses_a_dense_run_with_one_line(world, capsys):
    run_dir, cfg = world["dense"]
    with pytest.raises(RunUnavailable, match="no graph"):
        classify_run(open_run(run_dir, cfg))
    assert analyze_main([str(run_dir)]) == 2  # no .hydra/ folder: said in one line
    assert "error:" in capsys.readouterr().err


def test_explain_recomputes_the_runs_ranking_and_finds_paths(world, tmp_path):
    run_dir, cfg = world["hipporag2"]
    view = open_run(run_dir, cfg)
    e = explain_question(view, "q-director")
    assert not e.warnings  # the recomputed ranking is the run's
    assert [p.title for p in e.top_passages] == view.row("q-director").titles[:5]
    assert {g.title for g in e.gold} == {"The Glass Harbour", "Oskar Threnody"}
    for g in e.gold:
        assert g.path, g.title
        assert g.path[-1].target == f"[{g.title}]" and g.path[-1].kinds == ["context"]
        assert g.path[0].source == g.path_from in [p for p, _, _ in e.seeds]
        for a, b in zip(g.path[:-1], g.path[1:]):
            assert a.target == b.source
    assert e.passage_seed_mass > 0 and sum(p.mass for p in e.top_passages) <= 1.0
    text = explanation_text(e)
    assert "seed phrases" in text and "--context-->" in text and "GOLD" in text
    png = draw_explanation(e, tmp_path / "q.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20000


def test_explain_relation_edges_carry_their_predicate(world):
    run_dir, cfg = world["hipporag2"]
    e = explain_question(open_run(run_dir, cfg), "q-score")
    steps = [s for g in e.gold for s in g.path if "relation" in s.kinds]
    for s in steps:
        assert s.label  # a predicate of a fact joining the two phrases


def test_explain_unknown_question_says_so(world):
    run_dir, cfg = world["hipporag2"]
    with pytest.raises(RunUnavailable, match="no question with id 'nope'"):
        explain_question(open_run(run_dir, cfg), "nope")


def test_explain_command_writes_text_and_picture(world, tmp_path, capsys):
    """`hipporag2-explain RUN ID` end to end (its main was a NameError on every call once)."""
    from hipporag2.analysis.explain_cli import main as explain_main

    run_dir, _ = world["hipporag2"]
    assert explain_main([str(run_dir), "q-director", "--out", str(tmp_path)]) == 0
    assert "seed phrases" in (tmp_path / "q-director.txt").read_text()
    assert (tmp_path / "q-director.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "picture:" in capsys.readouterr().out
    assert explain_main([str(run_dir), "nope", "--out", str(tmp_path)]) == 2


def test_compare_counts_and_order():
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.5}
    b = {"q1": 0.5, "q2": 0.5, "q3": 1.0, "q4": 0.0}
    c = compare_scores(a, b, "A", "B", "recall@5", n_samples=2000)
    assert (c.wins, c.losses, c.ties, c.n) == (2, 1, 1, 4)
    assert c.questions[0].id == "q3" and c.questions[-1].id == "q2"  # |diff| 1.0 first, ties last
    assert c.mean_diff == pytest.approx(0.0) and c.mean_a == pytest.approx(50.0)  # +0.5 + 0 - 1 + 0.5
    with pytest.raises(ValueError, match="different questions"):
        compare_scores(a, {"q1": 1.0}, "A", "B", "recall@5")


def test_report_compare_on_two_runs(world, tmp_path, capsys):
    from hipporag2.analysis.compare import compare_runs, comparison_csv, comparison_plot
    from hipporag2.report.runs import load_run

    ra, rb = load_run(world["hipporag2"][0]), load_run(world["dense"][0])
    c = compare_runs(ra, rb, k=2, n_samples=2000)
    assert c.n == len(QUESTIONS) and c.wins + c.losses + c.ties == c.n
    per_a = [q.a for q in c.questions]
    assert abs(sum(per_a) / c.n * 100 - ra.metrics["recall@2"]) < 0.06
    rows = comparison_csv(c).splitlines()
    assert len(rows) == c.n + 1
    png = comparison_plot(c, tmp_path / "c.png")
    assert png.stat().st_size > 5000
