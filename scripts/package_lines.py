"""Issue 25's size target, counted: is the package 2,000 lines smaller than at f3dd2f0
once the lines that the other issues' features added since then are set aside?

    python3 scripts/package_lines.py            # HEAD against f3dd2f0
    python3 scripts/package_lines.py --rev X    # any later commit

Standard library and git only. "Package lines" are the lines of every ``*.py`` file
under ``hipporag2/`` (what ``find hipporag2 -name '*.py' | xargs cat | wc -l`` counts).

How a line of the counted tree is attributed: ``git blame -w -M -C f3dd2f0..REV``
names the commit that wrote it; lines older than f3dd2f0 are the baseline's. ``-M``
follows lines moved within a file and ``-C`` lines moved from another file that the same
commit changed: a move (the floor plan's regrouping, code lifted out of a module) keeps
the commit that first wrote the line, whichever issue that was (at e647e9f, plain ``-w``
puts 1,012 more lines on the commits since f3dd2f0). A second ``-C`` would also hand a
line to any older file holding the same text when the commit created its file; that is
a copy, not a move (the line exists because that commit added it: RAPTOR's, GraphRAG's and the
encoder server's new modules repeat imports and helpers of older files), so it is shown
only as a check, not as the answer. Each commit that wrote package lines between
f3dd2f0 and e647e9f is classified in ISSUE_OF below by the feature it builds or fixes
(the issue numbers are those of ``issues show N``):

- 23 the authors' experiment: their prompts, paper.yaml and averages, experiments for
  every runnable row, ``hipporag2-download musique_train``;
- 24 LLM failure gates at indexing and one-line operating-system errors;
- 26 encoders in their own environment, embeddings from a server;
- 27 a graph without an LLM (openie=spacy, relation_edges, fusion=rrf);
- 28 RAPTOR, LightRAG, GraphRAG and their loopback endpoint;
- 25 the reshaping itself (ppr package, run path, floor plan, registries, pandas report),
  and refactors that span several features (one wheel locator, one file-hash helper,
  one rule for separate environments): they are not features of another issue.

A lead's fix-up inside one feature's code (RAPTOR's packing helper, the baselines'
shared StoreEncoder, ``--cfg`` without the encoder environment) counts to that feature.
Lines written while resolving a merge are blamed on the merge commit; they are counted
as issue 25's (kept in the total), which can only make the package look bigger.
Commits after e647e9f that are not listed count as issue 25's for the same reason.

The answer: lines at REV minus the lines blamed on issues 23, 24, 26, 27 and 28, against
the 18,070 lines of f3dd2f0; the target is at least 2,000 fewer.
"""
from __future__ import annotations

import argparse
import collections
import subprocess

BASELINE = "f3dd2f0"
TARGET = 2000
PACKAGE = "hipporag2"

ISSUE_OF = {
    # 23: the authors' prompts, paper tables, download of the shared set
    "c9574fe": 23, "1d04ab2": 23, "0c195fe": 23, "932077d": 23, "299cf58": 23,
    "0cc4882": 23, "318837d": 23, "35b4759": 23,
    # 24: LLM failure gates, operating-system errors as one line
    "483bd97": 24, "4eac92f": 24, "353c439": 24, "2d7f58c": 24, "0b78c89": 24,
    # 26: encoders in their own environment, embedding servers
    "2d66c6a": 26, "5b02e42": 26, "7a589d0": 26, "531bd1c": 26, "57ae2bf": 26,
    "ed32fac": 26,
    # 27: graph without an LLM
    "3add3ba": 27, "80d6d66": 27,
    # 28: RAPTOR, GraphRAG, LightRAG, loopback endpoint
    "a4f4e24": 28, "f4a945b": 28, "178f3f3": 28, "9b2dbdb": 28, "6f46419": 28,
    "56e893c": 28, "2a69802": 28, "ac8bab3": 28, "351e5b1": 28, "b96837f": 28,
    "8a6eda9": 28, "e7e761d": 28, "54ef978": 28, "a76fa37": 28, "540480a": 28,
    "457c645": 28, "03c3212": 28, "0345bb2": 28, "527fd15": 28, "fcc9133": 28,
    "7116a58": 28, "7f74e1a": 28, "71205ed": 28, "e647e9f": 28,
    # 25: the reshaping (lib, ppr, ppr2, floor, report, perf) and cross-feature refactors
    "27ddb6a": 25, "d80fa9b": 25, "5d9b998": 25, "fcd1722": 25, "6673f9e": 25,
    "14711bb": 25, "2bcee44": 25, "f4f90cd": 25, "2e53a84": 25, "c1d1acc": 25,
    "91f6e2a": 25, "32fb709": 25, "20f4d2e": 25, "3c9cf75": 25, "11f5b8e": 25,
    "912cbf8": 25, "072c8f5": 25, "56504a1": 25, "8a92bc9": 25, "6f4b1b2": 25,
    "554326e": 25, "f92b077": 25, "6f3df58": 25,
}
OTHER_ISSUES = (23, 24, 26, 27, 28)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True,
                          text=True).stdout


def package_files(rev: str) -> list[str]:
    names = git("ls-tree", "-r", "--name-only", rev, PACKAGE).split()
    return [n for n in names if n.endswith(".py")]


def package_lines(rev: str) -> int:
    return sum(git("show", f"{rev}:{name}").count("\n") for name in package_files(rev))


def blame_counts(rev: str, copies: int) -> collections.Counter:
    """Lines of the package at ``rev`` per writing commit ("base" = before f3dd2f0)."""
    counts: collections.Counter = collections.Counter()
    for name in package_files(rev):
        out = git("blame", "--porcelain", "-w", "-M", *(["-C"] * copies),
                  f"{BASELINE}..{rev}", "--", name)
        boundary, commit = set(), ""
        for line in out.splitlines():
            head = line.split(" ")
            if len(head[0]) == 40 and len(head) >= 3 and head[1].isdigit():
                commit = head[0]
            elif line == "boundary":
                boundary.add(commit)
            elif line.startswith("\t"):
                counts["base" if commit in boundary else commit[:7]] += 1
    return counts


def classify(counts: collections.Counter) -> tuple[collections.Counter, list[str]]:
    by_issue: collections.Counter = collections.Counter()
    unlisted = []
    for commit, n in counts.items():
        if commit == "base":
            by_issue["f3dd2f0 and before"] += n
        elif commit in ISSUE_OF:
            by_issue[f"issue {ISSUE_OF[commit]}"] += n
        elif len(git("rev-list", "--parents", "-n", "1", commit).split()) > 2:
            by_issue["merge resolutions (counted as 25)"] += n
        else:
            by_issue["unlisted commits (counted as 25)"] += n
            unlisted.append(commit)
    return by_issue, unlisted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", default="HEAD")
    rev = git("rev-parse", "--short", parser.parse_args().rev).strip()
    before, now = package_lines(BASELINE), package_lines(rev)
    print(f"package lines (*.py under {PACKAGE}/): {BASELINE} {before:,}; {rev} {now:,}")
    for copies, label in ((1, "-w -M -C (the answer)"), (2, "-w -M -C -C (copies too: a check, not the answer)")):
        counts = blame_counts(rev, copies)
        assert sum(counts.values()) == now
        by_issue, unlisted = classify(counts)
        other = sum(by_issue[f"issue {i}"] for i in OTHER_ISSUES)
        without = now - other
        print(f"\nblame {label}: lines of {rev} by who wrote them")
        for key in sorted(by_issue):
            print(f"  {key:<36} {by_issue[key]:>6,}")
        if unlisted:
            print(f"  unlisted: {' '.join(sorted(unlisted))}")
        print(f"  {rev} without issues {', '.join(map(str, OTHER_ISSUES))}: "
              f"{now:,} - {other:,} = {without:,}")
        verdict = "yes" if before - without >= TARGET else "no"
        print(f"  smaller than {BASELINE} by {before - without:,} lines; "
              f"by at least {TARGET:,}? {verdict}")


if __name__ == "__main__":
    main()
