#!/usr/bin/env python3
"""Draws one DDP training step as a timeline PNG with gnuplot: per rank, one row of backward
pieces (the gradient of each parameter block, the activations' gradients) and one row of
bucket all-reduces (from the layer's launch to the time braid completed it, braid_test_time's;
with --no-overlap they start after the whole backward).

    perf/ddp_timeline.py -o step.png [--title T] FILE.0 FILE.1 ...

The inputs are the CSV files ddp_mlp --timeline FILE writes (rank,kind,name,t0,t1 in
CLOCK_MONOTONIC seconds, comparable across the ranks of one machine, namespaces included)."""
import argparse
import csv
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="one DDP step")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    rows = []
    for f in a.files:
        with open(f) as fh:
            rows += [r for r in csv.DictReader(fh)]
    if not rows:
        sys.exit("no events")
    t0 = min(float(r["t0"]) for r in rows if r["kind"] == "backward")
    ranks = sorted({int(r["rank"]) for r in rows})
    colors = {"backward": "#4C72B0", "allreduce": "#DD8452", "finish": "#999999"}
    tmp = tempfile.mkdtemp()
    dat = os.path.join(tmp, "ev.dat")
    labels = []
    with open(dat, "w") as out:
        for r in rows:
            rank = int(r["rank"])
            base = (len(ranks) - 1 - ranks.index(rank)) * 3
            kind = r["kind"]
            y = base + (1.6 if kind == "backward" else 0.8 if kind == "allreduce" else 0.2)
            h = 0.3 if kind != "finish" else 0.1
            x0 = (float(r["t0"]) - t0) * 1e3
            x1 = max((float(r["t1"]) - t0) * 1e3, x0 + 0.01)
            c = int(colors[kind][1:], 16)
            out.write(f"{(x0 + x1) / 2} {y} {(x1 - x0) / 2} {h} {c}\n")
            if kind == "allreduce" or (kind == "backward" and x1 - x0 > 0.5):
                name = r["name"].split(" (")[0].replace("bucket ", "B")
                labels.append((x0, y + h + 0.08, name))
        ymax = len(ranks) * 3
    gp = [
        "set terminal pngcairo noenhanced size 1100,%d font ',10'" % (140 + 110 * len(ranks)),
        "set output '%s'" % a.output,
        "set title '%s'" % a.title.replace("'", ""),
        "set xlabel 'ms since the start of backward (rank 0 and the others on one clock)'",
        "set yrange [-0.2:%g]" % ymax,
        "set ytics (%s)" % ", ".join(
            "'rank %d backward' %g, 'rank %d all-reduce' %g" %
            (rk, (len(ranks) - 1 - i) * 3 + 1.6, rk, (len(ranks) - 1 - i) * 3 + 0.8)
            for i, rk in enumerate(ranks)),
        "set grid xtics",
        "unset key",
        "set style fill solid 0.85 border lc rgb '#333333'",
    ]
    for x, y, t in labels:
        gp.append("set label '%s' at %g,%g font ',7'" % (t, x, y))
    gp.append("plot '%s' using 1:2:3:4:5 with boxxyerror lc rgb variable" % dat)
    p = subprocess.run(["gnuplot"], input="\n".join(gp) + "\n", text=True)
    os.remove(dat)
    os.rmdir(tmp)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
