"""tests/html.sh's reading of an --html page's DOM (as a browser left it, or the file itself):
html_dom.py FILE NPARAMS NRANKS pass|fail [SECTIONS] - every heatmap has a row per parameter and the tables a
section needs (one per rank); a failing page marks its failing cells (td.bad) and outlines exactly one first
divergence per failing run (td#first-N.first.bad); a passing page has neither. Prints what it found; exits 1 on a mismatch."""
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self)
        self.sections, self.tables, self.rows = 0, [], None
        self.in_tbody = False
        self.bad = self.first = self.first_bad = self.selects = self.cells = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "section" and "run" in cls:
            self.sections += 1
        elif tag == "table" and "heatmap" in cls:
            self.tables.append(0)
        elif tag == "tbody" and self.tables:
            self.in_tbody = True
        elif tag == "tr" and self.in_tbody:
            self.tables[-1] += 1
        elif tag == "td" and "c" in cls:
            self.cells += 1
            self.bad += "bad" in cls
            if (a.get("id") or "").startswith("first-"):
                self.first += 1
                self.first_bad += "bad" in cls and "first" in cls
        elif tag == "select" and "rank" in cls:
            self.selects += 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self.in_tbody = False


def main():
    path, nparams, nranks, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sections = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    wrong = []
    if p.sections != sections:
        wrong.append("%d sections, expected %d" % (p.sections, sections))
    if len(p.tables) != sections * nranks:
        wrong.append("%d heatmaps, expected %d (one per rank)" % (len(p.tables), sections * nranks))
    if sections == 1 and any(rows != nparams for rows in p.tables):
        wrong.append("heatmap rows %s, expected %d (one per parameter)" % (p.tables, nparams))
    if p.selects != sections:
        wrong.append("%d rank selectors" % p.selects)
    if want == "fail" and (p.bad == 0 or not 1 <= p.first <= sections or p.first_bad != p.first):
        wrong.append("failing page: %d failing cells, %d outlined first divergences (%d of them failing)" % (
            p.bad, p.first, p.first_bad))
    if want == "pass" and (p.bad or p.first):
        wrong.append("passing page: %d failing cells, %d first divergences" % (p.bad, p.first))
    print("%d sections, heatmaps %s rows, %d cells, %d failing, %d first" % (
        p.sections, p.tables[:4], p.cells, p.bad, p.first))
    if wrong:
        print("; ".join(wrong))
        sys.exit(1)


if __name__ == "__main__":
    main()
