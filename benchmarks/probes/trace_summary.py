#!/usr/bin/env python3
"""Summarises probe_trace.cu files: per-K-block time of the main loops, time after the main loop
(stream-K hand-over / fix-up and the epilogue), gaps between pieces, stream-K owner waits, CTA end times.
usage: trace_summary.py FILE... [--cta N ...]  (--cta: also list that CTA's pieces)"""
import argparse
import collections
import statistics


def load(fn):
    rows, marks, head = [], {}, ""
    for line in open(fn):
        if line.startswith("#"):
            head = line.strip()
        elif line.startswith("MARK"):
            f = line.split()
            marks[int(f[1])] = list(map(int, f[2:]))
        elif line.strip():
            rows.append(list(map(int, line.split())))
    return head, rows, marks


def q(xs):
    xs = sorted(xs)
    return f"min {xs[0]:.2f} med {statistics.median(xs):.2f} max {xs[-1]:.2f}" if xs else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cta", type=int, nargs="*", default=[])
    a = ap.parse_args()
    for fn in a.files:
        head, rows, marks = load(fn)
        # columns: cta, item, kb0, kb1, start, main_end, wait_start, wait_end, end, kernel_start, contrib<<32|slot
        t0 = min(r[9] for r in rows)
        us = lambda x: (x - t0) / 1e3
        by = collections.defaultdict(list)
        for r in rows:
            by[r[0]].append(r)
        print(head, f"| pieces {len(rows)}, span {us(max(r[8] for r in rows)):.1f} us")
        print("  us per K block:", q([(r[5] - r[4]) / 1e3 / max(1, r[3] - r[2]) for r in rows]))
        print("  after the main loop (hand-over / fix-up + epilogue) us:", q([(r[8] - r[5]) / 1e3 for r in rows]))
        gaps = []
        for v in by.values():
            v = sorted(v, key=lambda r: r[4])
            gaps += [(b[4] - a_[8]) / 1e3 for a_, b in zip(v, v[1:])]
        print("  gap between a CTA's pieces us:", q(gaps))
        waits = [(r[7] - r[6]) / 1e3 for r in rows if r[6] > 1]
        if waits:
            print("  stream-K owners, flag wait + partial reads us:", q(waits))
        print("  CTA end times us:", q([us(max(r[8] for r in v)) for v in by.values()]))
        for c in a.cta:
            print(f"  cta {c}:")
            for r in sorted(by.get(c, []), key=lambda r: r[4]):
                w = f" fix-up {us(r[6]):6.2f}-{us(r[7]):6.2f}" if r[6] > 1 else ""
                print(f"    item {r[1]:4d} kb {r[2]:3d}-{r[3]:3d} start {us(r[4]):7.2f} main end {us(r[5]):7.2f}{w} "
                      f"end {us(r[8]):7.2f}")


if __name__ == "__main__":
    main()
