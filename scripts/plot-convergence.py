#!/usr/bin/env python3
"""Plots a kopt_convergence CSV (step,option,loss), one line per state storage option: above,
the training loss against the step (log scale); below, each option's loss divided by the
reference's (REFERENCE, default bf16_master), where options a few percent apart can be told
apart. Each line is a moving average over SMOOTH steps (default 25): minibatch losses alone
are too noisy for lines this close. Needs gnuplot (Debian: gnuplot-nox; bash
scripts/bootstrap-deps.sh --with-plot installs it).

Usage: python3 scripts/plot-convergence.py CURVES.csv OUT.png [SMOOTH [REFERENCE]]
"""
import csv
import shutil
import subprocess
import sys


def curves(path):
    """{option: [loss by step]}, options in the file's order."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["option"], []).append((int(row["step"]), float(row["loss"])))
    return {o: [loss for _, loss in sorted(points)] for o, points in out.items()}


def moving_average(values, n):
    """The mean of the last n values (fewer at the start) at each step."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out


def gnuplot_script(data, png, smooth, reference):
    steps = max(len(v) for v in data.values())
    title = (f"kopt AdamW, the convergence harness's MLP (perf/convergence_run.hpp), {steps} "
             f"steps, one line per state storage option; mean of {smooth} steps")
    lines = ['set terminal pngcairo size 1000,900 font ",10"', f'set output "{png}"',
             f'set multiplot layout 2,1 title "{title}" noenhanced', "set grid",
             'set xlabel "step"', "set key top right noenhanced", f"set xrange [0:{steps}]"]
    ref = moving_average(data[reference], smooth)
    for i, (option, losses) in enumerate(data.items()):
        lines.append(f"$d{i} << EOD")
        lines += [f"{k + 1} {v:.9g} {v / r:.9g}"
                  for k, (v, r) in enumerate(zip(moving_average(losses, smooth), ref))]
        lines.append("EOD")

    def plot(column):
        # The reference thick; the forms expected to lie on it thinner, drawn over it.
        return "plot " + ", \\\n     ".join(
            f'$d{i} using 1:{column} with lines lw {3 if o == reference else 1.5} lc {i + 1} '
            f'title "{o}"' for i, o in enumerate(data))

    lines += ["set logscale y", 'set ylabel "training loss (MSE)"', plot(2), "unset logscale y",
              f'set ylabel "loss / {reference}\'s loss" noenhanced', "set autoscale y",
              "set key top left", plot(3), "unset multiplot"]
    return "\n".join(lines) + "\n"


def main(args):
    if not 2 <= len(args) <= 4:
        sys.exit(__doc__)
    data = curves(args[0])
    if not data:
        sys.exit(f"plot-convergence: {args[0]} has no rows")
    if shutil.which("gnuplot") is None:
        sys.exit("plot-convergence: gnuplot not found (bash scripts/bootstrap-deps.sh --with-plot)")
    smooth = int(args[2]) if len(args) > 2 else 25
    reference = args[3] if len(args) > 3 else "bf16_master"
    if reference not in data:
        sys.exit(f"plot-convergence: no option {reference} in {args[0]} "
                 f"(there are {', '.join(data)})")
    subprocess.run(["gnuplot"], input=gnuplot_script(data, args[1], smooth, reference),
                   text=True, check=True)
    print(f"plot-convergence: wrote {args[1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
