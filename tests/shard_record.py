"""Turn a recorded run (engine/io/record.h) into the recording of a sharded implementation, for tests/check.sh:

  shard_record.py DIR                 rank r of N holds the r-th contiguous slice of every parameter's gradient
                                      (ceil(count / N) elements, the last slice shorter or empty, as FSDP pads),
                                      declared as "grad_shards"; what a rank does not hold is overwritten with
                                      1e30 at every grab (scratch: ddpsim must not read it)
  shard_record.py DIR --per-grab      the same, said in each grab's held.json instead of the manifest
  shard_record.py DIR RANK GRAB PARAM bump the first element rank RANK holds of PARAM at grab GRAB by 1
"""
import glob
import json
import os
import sys

import numpy as np


def slices(count, nranks):
    per = -(-count // nranks)
    return [(min(r * per, count), max(0, min(per, count - r * per))) for r in range(nranks)]


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    n = m["ranks"]
    counts = {p["name"]: int(np.prod(p["shape"])) for p in m["params"]}
    if len(sys.argv) == 5:
        rank, grab, param = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        start, _ = slices(counts[param], n)[rank]
        path = os.path.join(d, m["impl"], "rank%d" % rank, "grab%d" % grab, param + ".npy")
        a = np.load(path)
        a.reshape(-1)[start] += 1
        np.save(path, a)
        return
    held = [{name: [list(slices(c, n)[r])] for name, c in counts.items() if slices(c, n)[r][1]} for r in range(n)]
    per_grab = sys.argv[2:] == ["--per-grab"]
    if not per_grab:
        m["grad_shards"] = held
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(m, f)
    for r in range(n):
        for g in glob.glob(os.path.join(d, m["impl"], "rank%d" % r, "grab*")):
            if per_grab:
                with open(os.path.join(g, "held.json"), "w") as f:
                    json.dump(held[r], f)
            for name, c in counts.items():
                path = os.path.join(g, name + ".npy")
                a = np.load(path)
                flat = a.reshape(-1)
                start, k = slices(c, n)[r]
                keep = flat[start:start + k].copy()
                flat[:] = 1e30
                flat[start:start + k] = keep
                np.save(path, a)


if __name__ == "__main__":
    main()
