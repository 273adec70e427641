"""`hipporag2-download NAME...`: fetch the data a run reads into a data folder (needs
network access; nothing else in the project does).

Two sources:

- the seven benchmark sets of the paper (`musique`, `nq`, ...): the authors' release on
  the Hugging Face hub (`osunlp/HippoRAG_2`), `{stem}.json` and `{stem}_corpus.json`;
- the small training sets of the reference repository's `legacy` branch
  (`musique_train`, `hotpotqa_train`): raw GitHub files at one pinned commit, each
  checked against its sha256 before it is put in place, so a user gets the very bytes
  the README's shared-set results were measured on (`../shared/data` is one copy of
  them). `musique_train` also brings the authors' GPT-3.5 OpenIE of its 1,890 passages,
  laid out as `openie/musique_train_openie_gpt-3.5-turbo-1106.json` (the path
  `experiment/setup/musique_train_cpu` imports); the legacy branch has no OpenIE file
  for `hotpotqa_train`.

A file already present with the right sha256 is kept; one with other bytes is replaced
only after the new bytes pass the check (written to a temporary file, then renamed).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Sequence, Tuple

from hipporag2.files.atomicio import sha256_file

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

# The reference repository's `legacy` branch, at the commit that added the training sets.
LEGACY_REPO = "OSU-NLP-Group/HippoRAG"
LEGACY_COMMIT = "b144c46df14cabe5f5822d8caded4bec5f709461"
RAW_BASE = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class PinnedFile:
    source: str  # path in the repository at LEGACY_COMMIT
    target: str  # path under --data-dir
    sha256: str
    size: int


LEGACY: Dict[str, Tuple[PinnedFile, ...]] = {
    "musique_train": (
        PinnedFile("data/musique_train.json", "musique_train.json",
                   "bca674746844637f5c68408a96b67bc0542d98e7c53715f3acafe144bd5e4ff4", 1179088),
        PinnedFile("data/musique_train_corpus.json", "musique_train_corpus.json",
                   "79845dd085f9df49c8ce440208763e2611aeb86c81ee0bdad2094504381bb651", 974514),
        PinnedFile("output/openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json",
                   "openie/musique_train_openie_gpt-3.5-turbo-1106.json",
                   "4258bcc89bb20bb5c20e6700b87e21063521a6c3ef5a136ab0d0d7c0ea237585", 3344000),
    ),
    "hotpotqa_train": (
        PinnedFile("data/hotpotqa_train.json", "hotpotqa_train.json",
                   "6c0e2689d03c94b3bb4d5f94ed806ea4f4eb4f46c12132f8e91df774ad5c5a22", 810836),
        PinnedFile("data/hotpotqa_train_corpus.json", "hotpotqa_train_corpus.json",
                   "2671af600095eabc5b3f3bc3728861682f14fcced84ef1386509a8ae92647f88", 640159),
    ),
}

NAMES = tuple(sorted(STEMS)) + tuple(sorted(LEGACY))


class DownloadError(Exception):
    """One file could not be fetched or is not the pinned bytes (the message names it)."""


def url_of(f: PinnedFile, base: str = RAW_BASE, repo: str = LEGACY_REPO, commit: str = LEGACY_COMMIT) -> str:
    return f"{base.rstrip('/')}/{repo}/{commit}/{f.source}"


def urlopen_bytes(url: str) -> bytes:
    """The bytes at `url` (https or file://)."""
    with urllib.request.urlopen(url, timeout=120) as resp:  # noqa: S310 - fixed scheme set by callers
        return resp.read()


def fetch_pinned(f: PinnedFile, out_dir: Path, base: str = RAW_BASE,
                 fetch: Callable[[str], bytes] = urlopen_bytes) -> Tuple[Path, bool]:
    """(path, fetched): the file at `out_dir/target`, fetched unless already there with
    the pinned sha256; raises DownloadError naming the URL when the bytes differ."""
    target = out_dir / f.target
    if target.is_file() and sha256_file(target) == f.sha256:
        return target, False
    url = url_of(f, base)
    try:
        data = fetch(url)
    except Exception as e:  # network, 404, missing local file: say which URL
        raise DownloadError(f"could not download {url}: {e}") from e
    got = hashlib.sha256(data).hexdigest()
    if got != f.sha256:
        raise DownloadError(
            f"{url}: sha256 {got} ({len(data)} bytes) is not the pinned {f.sha256} ({f.size} bytes); "
            f"nothing written to {target}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target, True


def download_legacy(name: str, out_dir: Path, base: str = RAW_BASE,
                    fetch: Callable[[str], bytes] = urlopen_bytes) -> Sequence[Tuple[Path, bool]]:
    return [fetch_pinned(f, out_dir, base, fetch) for f in LEGACY[name]]


def download_release(name: str, out_dir: Path, repo: str) -> Sequence[Path]:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as e:
        raise DownloadError("hipporag2-download needs huggingface_hub for the benchmark sets (pip install huggingface_hub)") from e
    paths = []
    for suffix in ("", "_corpus"):
        filename = f"{STEMS[name]}{suffix}.json"
        try:
            local = hf_hub_download(repo_id=repo, repo_type="dataset", filename=filename)
        except Exception as e:  # network, auth, missing file: say which file
            raise DownloadError(f"could not download {filename} from {repo}: {e}") from e
        shutil.copyfile(local, out_dir / filename)
        paths.append(out_dir / filename)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hipporag2-download", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=NAMES, help="datasets to fetch")
    parser.add_argument("--data-dir", default="data", help="where to put {stem}.json and {stem}_corpus.json")
    parser.add_argument("--repo", default=RELEASE_REPO, help="Hugging Face dataset repository (benchmark sets)")
    parser.add_argument("--raw-base", default=RAW_BASE,
                        help="where the pinned legacy files are read from: BASE/OWNER/REPO/COMMIT/PATH "
                             "(default raw GitHub; a file:// mirror works too)")
    args = parser.parse_args(argv)
    from hipporag2.files.atomicio import os_errors_exit

    with os_errors_exit():  # a full disk or read-only --data-dir: one line, exit 2
        return _fetch(args)


def _fetch(args) -> int:
    out = Path(args.data_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name in args.names:
            if name in LEGACY:
                for path, fetched in download_legacy(name, out, args.raw_base):
                    print(f"{path}{'' if fetched else '  (present, sha256 ok)'}")
            else:
                for path in download_release(name, out, args.repo):
                    print(path)
    except DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
