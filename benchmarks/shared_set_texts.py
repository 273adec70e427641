"""The texts the shared-set API index embeds, in the order the store encodes them.

Writes OUT/calls.json ([{"desc": "embed passages", "texts": [...]}, ...]) for
benchmarks/bench_encoder_bits.py. The store's encoding is replaced by random vectors
(this only records the texts; the graph is built on them), so it takes minutes, not the
~470 CPU s of the real embedding. Run from the repository root:

    python -m benchmarks.shared_set_texts OUT
"""
import json
import sys
from pathlib import Path

import numpy as np

from hipporag2 import HippoRAG
from hipporag2.embed import store as st
from tests.conftest import SHARED_DATA, musique_api_overrides, musique_docs


def main() -> None:
    calls = []

    def record(self, todo, instruction, desc, progress):
        items = list(todo.items())
        calls.append({"desc": desc, "texts": [t for _, t in items]})
        vecs = np.random.default_rng(0).standard_normal((len(items), 384)).astype(np.float32)
        with st.FileLock(str(self.dir / ".lock")):
            self._write_shard([k for k, _ in items], vecs)
        self._load()

    st.EmbeddingStore._encode_missing = record
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    HippoRAG(out / "api", musique_api_overrides(out / "cache")).index(musique_docs(SHARED_DATA))
    (out / "calls.json").write_text(json.dumps(calls))
    print([(c["desc"], len(c["texts"])) for c in calls])


if __name__ == "__main__":
    main()
