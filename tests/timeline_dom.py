"""tests/html.sh's reading of an --html page's timeline against the trace it was drawn from:
timeline_dom.py PAGE TRACE NRANKS - per rank, an op bar per op the trace says started, a ready tick per ready
event, a bar per collective the implementation called, an outlined bar per bucket its thread worked and a mark
per launch, "(stopped...)" exactly when the rank did not finish (no end event, or its supervisor's). Prints what it found; exits 1 on a mismatch,
so a page drawn from another run's trace fails it."""
import json
import sys
from collections import Counter
from html.parser import HTMLParser

OPS = {"fwd", "bwd", "grab", "zero", "step", "enter", "exit", "join_enter", "join_exit", "clip"}


class Timeline(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self)
        self.rank, self.svgs = None, 0
        self.seen = Counter()
        self.label = None
        self.labels = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "svg" and "timeline" in cls:
            self.svgs += 1
        elif tag == "g" and "rank" in cls:
            self.rank = int(a["data-rank"])
        elif self.rank is None:
            return
        elif tag == "rect" and "op" in cls and "setup" not in cls:
            self.seen[self.rank, "op"] += 1
        elif tag == "rect" and "coll" in cls:
            self.seen[self.rank, "coll"] += 1
        elif tag == "rect" and "item" in cls:
            self.seen[self.rank, "reduced"] += 1
        elif tag == "path" and "launch" in cls:
            self.seen[self.rank, "launch"] += 1
        elif tag == "path" and "ready" in cls:
            self.seen[self.rank, "ready"] += a["d"].count("M")
        elif tag == "text" and "rank-label" in cls:
            self.label = self.rank

    def handle_data(self, data):
        if self.label is not None:
            self.labels[self.label] = data
            self.label = None

    def handle_endtag(self, tag):
        if tag == "g":
            self.rank = None


def main():
    page, trace, nranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    want, ended = Counter(), set()
    with open(trace, encoding="utf-8") as f:
        next(f)
        for line in f:
            e = json.loads(line)
            ev = e["ev"]
            if ev == "end":
                if "how" not in e:  # the supervisor's end of a rank that did not finish says how it stopped
                    ended.add(e["rank"])
            elif ev in OPS:
                want[e["rank"], "op"] += 1
            elif ev in ("ready", "coll", "reduced", "launch"):
                want[e["rank"], ev] += 1
    t = Timeline()
    with open(page, encoding="utf-8") as f:
        t.feed(f.read())
    wrong = []
    if t.svgs != 1:
        wrong.append("%d timelines, expected 1" % t.svgs)
    for r in range(nranks):
        for kind in ("op", "ready", "coll", "reduced", "launch"):
            if t.seen[r, kind] != want[r, kind]:
                wrong.append("rank %d: %d %s drawn, the trace has %d" % (r, t.seen[r, kind], kind, want[r, kind]))
        stopped = "(stopped" in t.labels.get(r, "")
        if stopped == (r in ended):
            wrong.append("rank %d labelled %r, ended: %s" % (r, t.labels.get(r), r in ended))
    print("rank 0: %s" % ", ".join("%d %s" % (t.seen[0, k], k) for k in ("op", "ready", "coll", "reduced", "launch")))
    if wrong:
        print("; ".join(wrong[:6]))
        sys.exit(1)


if __name__ == "__main__":
    main()
