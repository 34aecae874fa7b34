#!/usr/bin/env python3
"""Table and accuracy-vs-time plot of perf/dp_variants.sh's runs.

    perf/dp_variants.py OUT_DIR ROW... --setups SETUP... [--rounds R]

Reads OUT_DIR/<setup>-<row>.log (a full run: ddp_mlp's `eval step S wall_s W test_acc A` lines
and its `comm_bytes_per_step ...` line) and OUT_DIR/steps/<setup>-<row>.<k>.log for k = 1..R
(the step-time runs: the `step_ms ... mean_step_ms X` line), writes OUT_DIR/table.md (also
printed) and OUT_DIR/accuracy_vs_time.png (gnuplot; skipped with a note if it is missing). A
run whose log ends in `dp_variants.sh: exit RC ...` with RC != 0 counts as failed (RC 124: it
reached its cap), whatever it printed before."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

NAMES = {"shm2": "shm, 2 ranks", "net2": "2 hosts, 1 Gbit/s"}


def parse(path):
    """(evals, the comm_bytes_per_step line's keys, mean_step_ms or None, failure or None)"""
    evals, kv, step, failed = [], {}, None, None
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 8 and w[0] == "server" and w[2] == "state_bytes":
                # async: the largest server state, next to rank 0's (a worker's)
                sv = {w[i]: float(w[i + 1]) for i in range(2, len(w) - 1, 2)}
                if sv["state_bytes"] > kv.get("server", {}).get("state_bytes", -1):
                    kv["server"] = sv
            elif len(w) >= 7 and w[0] == "eval":
                evals.append((int(w[2]), float(w[4]), float(w[6])))
            elif w and w[0] == "comm_bytes_per_step":
                kv.update({w[i]: float(w[i + 1]) for i in range(0, len(w) - 1, 2)})
            elif w and w[0] == "step_ms" and "mean_step_ms" in w:
                step = float(w[w.index("mean_step_ms") + 1])
            elif line.startswith("dp_variants.sh: exit ") and w[2] != "0":
                failed = line.split(": ", 1)[1].strip()
                if w[2] == "124":
                    failed = f"timed out ({failed})"
    evals.sort()
    return evals, kv, step, failed


def step_times(out, setup, row, rounds):
    """The step-time runs' mean_step_ms values, and how many of the rounds failed."""
    vals, bad = [], 0
    for k in range(1, rounds + 1):
        p = os.path.join(out, "steps", f"{setup}-{row}.{k}.log")
        if not os.path.exists(p):
            bad += 1
            continue
        _, _, step, failed = parse(p)
        if failed or step is None:
            bad += 1
        else:
            vals.append(step)
    return vals, bad


def time_to(evals, target):
    prev = (0.0, 0.0)
    for _, t, a in evals:
        if a >= target:
            if a == prev[1]:
                return t
            return prev[0] + (t - prev[0]) * (target - prev[1]) / (a - prev[1])
        prev = (t, a)
    return None


def mb(x):
    return f"{x / 1e6:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--setups", nargs="+", default=["shm2"])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    lines = ["| setup | row | final test acc | time to 85% (s) | MB sent/step/rank | "
             "state MB/rank (grad + opt + extra) | step ms, median (min-max) |",
             "|---|---|---|---|---|---|---|"]
    curves = {}
    for s in a.setups:
        for r in a.rows:
            vals, bad = step_times(a.out, s, r, a.rounds)
            step = "-"
            if vals:
                step = (f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})" +
                        (f", {len(vals)} of {a.rounds} runs" if bad else ""))
            elif a.rounds:
                step = "failed (see steps/)"
            p = os.path.join(a.out, f"{s}-{r}.log")
            if not os.path.exists(p):
                continue
            ev, kv, _, failed = parse(p)
            if failed or not ev or "comm_bytes_per_step" not in kv:
                why = failed or "no output"
                lines.append(f"| {NAMES.get(s, s)} | {r} | failed: {why} (see "
                             f"{os.path.basename(p)}) | | | | {step} |")
                continue
            curves.setdefault(s, []).append((r, ev))
            t85 = time_to(ev, 0.85)
            _, _, acc = ev[-1]
            extra = kv.get("staging_bytes", 0) + kv.get("hook_bytes", 0)
            state = "-"  # a mode that prints only comm_bytes_per_step
            if "state_bytes" in kv:
                state = (f"{mb(kv['state_bytes'])} ({mb(kv['grad_bytes'])} + "
                         f"{mb(kv['optimizer_bytes'])} + {mb(extra)})")
            if "server" in kv and "state_bytes" in kv:
                sv = kv["server"]
                state = (f"worker {state}; server {mb(sv['state_bytes'])} (0 + "
                         f"{mb(sv['optimizer_bytes'])} + {mb(sv['buffer_bytes'])})")
            lines.append(
                f"| {NAMES.get(s, s)} | {r} | {acc * 100:.2f}% | "
                f"{'-' if t85 is None else f'{t85:.1f}'} | {mb(kv['comm_bytes_per_step'])} | "
                f"{state} | {step} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    print(table, end="")
    if not curves:
        return 1
    # the plot with gnuplot, as the other perf scripts draw theirs
    gp = ["set terminal pngcairo noenhanced size %d,480 font ',10'" % (620 * len(curves)),
          "set output '%s'" % os.path.join(a.out, "accuracy_vs_time.png"),
          "set multiplot layout 1,%d" % len(curves)]
    tmp = []
    for s, cs in curves.items():
        plots = []
        for r, ev in cs:
            f = tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False)
            f.write("".join(f"{e[1]} {e[2] * 100}\n" for e in ev))
            f.close()
            tmp.append(f.name)
            plots.append(f"'{f.name}' using 1:2 with linespoints pt 7 ps 0.5 title '{r}'")
        gp += [f"set title 'ddp_mlp on Fashion-MNIST, {NAMES.get(s, s)}'",
               "set xlabel 'training time (s, evaluations excluded)'",
               "set ylabel 'test accuracy (%)'", "set grid", "set key bottom right",
               "plot " + ", ".join(plots) + ", 85 with lines dt 2 lc 'grey' title '85%'"]
    gp.append("unset multiplot")
    try:
        p = subprocess.run(["gnuplot"], input="\n".join(gp) + "\n", text=True)
    except FileNotFoundError:
        print("gnuplot missing: no plot", file=sys.stderr)
        return 0
    finally:
        for t in tmp:
            os.remove(t)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
