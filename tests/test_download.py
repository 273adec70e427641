"""`hipporag2-download musique_train / hotpotqa_train`: pinned files of the reference
repository's legacy branch, checked by sha256 and laid out as the runs read them. No
network: the files are served from a local file:// mirror of the raw-GitHub layout."""
import hashlib
import json
from pathlib import Path

import pytest

from hipporag2.data import download
from hipporag2.data.download import LEGACY, LEGACY_COMMIT, LEGACY_REPO, PinnedFile, main

from tests.conftest import SHARED_DATA


def mirror(root: Path, files) -> str:
    """A file:// base under which BASE/OWNER/REPO/COMMIT/PATH holds each (source, bytes)."""
    for source, data in files:
        p = root / LEGACY_REPO / LEGACY_COMMIT / source
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root.as_uri()


def fake_set(monkeypatch, files):
    """Pin a small made-up set (its own sha256) as `musique_train`."""
    pinned = tuple(PinnedFile(src, tgt, hashlib.sha256(data).hexdigest(), len(data)) for src, tgt, data in files)
    monkeypatch.setitem(LEGACY, "musique_train", pinned)


def test_pinned_files_land_in_the_run_layout_and_bad_bytes_are_refused(tmp_path, monkeypatch, capsys):
    q = json.dumps([{"id": "q0", "question": "?", "answer": "a"}]).encode()
    c = json.dumps([{"title": "t", "text": "x"}]).encode()
    ie = b'{"docs": []}'
    fake_set(monkeypatch, [("data/musique_train.json", "musique_train.json", q),
                           ("data/musique_train_corpus.json", "musique_train_corpus.json", c),
                           ("output/openie_x.json", "openie/musique_train_openie_gpt-3.5-turbo-1106.json", ie)])
    base = mirror(tmp_path / "good", [("data/musique_train.json", q), ("data/musique_train_corpus.json", c), ("output/openie_x.json", ie)])
    out = tmp_path / "data"
    assert main(["musique_train", "--data-dir", str(out), "--raw-base", base]) == 0
    assert (out / "musique_train.json").read_bytes() == q
    assert (out / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json").read_bytes() == ie
    capsys.readouterr()
    # Present with the pinned bytes: kept, nothing fetched (the mirror may be gone).
    assert main(["musique_train", "--data-dir", str(out), "--raw-base", (tmp_path / "gone").as_uri()]) == 0
    assert capsys.readouterr().out.count("present, sha256 ok") == 3
    # Other bytes upstream: refused, one line naming the URL, the good local file untouched.
    (out / "musique_train.json").write_bytes(b"stale")
    bad = mirror(tmp_path / "bad", [("data/musique_train.json", q + b" "), ("data/musique_train_corpus.json", c)])
    assert main(["musique_train", "--data-dir", str(out), "--raw-base", bad]) == 1
    err = capsys.readouterr().err
    assert "data/musique_train.json: sha256" in err and "is not the pinned" in err and LEGACY_COMMIT in err
    assert (out / "musique_train.json").read_bytes() == b"stale"
    assert not [p for p in out.rglob("*.part")]
    # A missing upstream file: one line naming its URL.
    assert main(["musique_train", "--data-dir", str(tmp_path / "d2"), "--raw-base", (tmp_path / "gone").as_uri()]) == 1
    assert "could not download file://" in capsys.readouterr().err


def test_default_urls_are_raw_github_at_the_pinned_commit():
    f = LEGACY["musique_train"][2]
    assert download.url_of(f) == (
        "https://raw.githubusercontent.com/OSU-NLP-Group/HippoRAG/b144c46df14cabe5f5822d8caded4bec5f709461/"
        "output/openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json")
    assert {p.target for p in LEGACY["hotpotqa_train"]} == {"hotpotqa_train.json", "hotpotqa_train_corpus.json"}


def test_the_shared_set_is_the_pinned_bytes(tmp_path):
    """The shared copy (../shared/data) passes the pinned sha256 of every musique_train file."""
    if not (SHARED_DATA / "musique_train.json").is_file():
        pytest.skip(f"shared data absent ({SHARED_DATA})")
    files = [(f.source, (SHARED_DATA / f.target).read_bytes()) for f in LEGACY["musique_train"]]
    base = mirror(tmp_path / "m", files)
    got = download.download_legacy("musique_train", tmp_path / "data", base)
    assert [fetched for _, fetched in got] == [True, True, True]
    for f in LEGACY["musique_train"]:
        assert (tmp_path / "data" / f.target).stat().st_size == f.size
