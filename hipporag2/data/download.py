"""`hipporag2-download NAME...`: fetch the authors' benchmark release from the Hugging
Face hub into a data folder (needs network access; nothing else in the project does)."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

RELEASE_REPO = "osunlp/HippoRAG_2"
# Dataset config name -> file stem in the release.
STEMS = {
    "musique": "musique",
    "2wikimultihopqa": "2wikimultihopqa",
    "hotpotqa": "hotpotqa",
    "nq": "nq_rear",
    "popqa": "popqa",
    "lveval": "lveval",
    "narrativeqa": "narrativeqa",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="+", choices=sorted(STEMS), help="datasets to fetch")
    parser.add_argument("--data-dir", default="data", help="where to put {stem}.json and {stem}_corpus.json")
    parser.add_argument("--repo", default=RELEASE_REPO, help="Hugging Face dataset repository")
    args = parser.parse_args(argv)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        print("hipporag2-download needs huggingface_hub (pip install huggingface_hub)", file=sys.stderr)
        return 2
    from hipporag2.atomicio import os_errors_exit

    with os_errors_exit():  # a full disk or read-only --data-dir: one line, exit 2
        return _fetch(args, hf_hub_download)


def _fetch(args, hf_hub_download) -> int:
    out = Path(args.data_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        for suffix in ("", "_corpus"):
            filename = f"{STEMS[name]}{suffix}.json"
            try:
                local = hf_hub_download(repo_id=args.repo, repo_type="dataset", filename=filename)
            except Exception as e:  # network, auth, missing file: say which file
                print(f"could not download {filename} from {args.repo}: {e}", file=sys.stderr)
                return 1
            shutil.copyfile(local, out / filename)
            print(f"{out / filename}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
