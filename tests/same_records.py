#!/usr/bin/env python3
"""same_records.py LIVE.json CHECK.json - the records of a live run and of its
recording replayed by `ddpsim check` are the same, check by check and rank by
rank (every field of --json's "checks": synced, the differences, the ulps,
the digests of both sides). After a failing step both references go on
from the implementation's parameters (doc/SEMANTICS.md "After a
divergence"), so the records agree to the end; except in a sharded run
("shard" in the live run's JSON), whose live reference keeps its own
parameters while the replay takes the recorded ones at every step (ops.h
verify_params_rule): there they are compared up to and including the first
check that fails.
Prints the first difference and exits 1; exits 0 and prints how many
records agreed otherwise."""
import json
import sys


def main():
    live, replay = (json.load(open(p)) for p in sys.argv[1:3])
    a, b = live["checks"], replay["checks"]
    if len(a) != len(b):
        print(f"{len(a)} records live, {len(b)} replayed")
        return 1
    sharded = "shard" in live
    failed_at, agreed = None, 0
    for x, y in zip(a, b):
        if sharded and failed_at is not None and x["check"] != failed_at:
            break
        if x != y:
            keys = sorted(k for k in x if x.get(k) != y.get(k))
            print(f"{x['check']} rank {x['rank']}: "
                  + ", ".join(f"{k} live {x.get(k)!r} replayed {y.get(k)!r}" for k in keys))
            return 1
        agreed += 1
        if not x["match"] and failed_at is None:
            failed_at = x["check"]
    cut = sharded and failed_at is not None and agreed < len(a)
    print(f"{agreed} records agree" + (f" (to the first failure, {failed_at})" if cut else
                                       f" (past the first failure, {failed_at})" if failed_at else ""))
    return 0


sys.exit(main())
