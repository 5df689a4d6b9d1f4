#!/usr/bin/env python3
"""Plots a kopt_bench result file: bandwidth (GB/s by the byte model) vs size for each fused
update variant, with the plain C++ OpenMP loop of the same update (perf/plain_loops.cpp, the
independent ceiling; dotted, same color, host backends) and the ceiling of its own access
pattern (dashed), both measured in the same run, one panel per backend. Needs gnuplot (Debian: gnuplot-nox; bash
scripts/bootstrap-deps.sh --with-plot installs it).

Usage: python3 scripts/plot-perf.py RESULT.json OUT.png
"""
import json
import shutil
import subprocess
import sys


def series(bench):
    """{backend: {variant: [(log2 size, GB/s, ceiling GB/s, plain loop GB/s or NaN)]}} for the
    single-tensor rows."""
    out = {}
    for b in bench["benchmarks"]:
        parts = [p for p in b["name"].split("/") if p != "manual_time"]
        if (len(parts) != 3 or not parts[0].startswith("adamw_") or parts[0].endswith("_split")
                or "ceil_GB/s" not in b):
            continue
        variant, backend, n = parts[0][len("adamw_"):], parts[1], int(parts[2])
        out.setdefault(backend, {}).setdefault(variant, []).append(
            (n.bit_length() - 1, b["GB/s"], b["ceil_GB/s"],
             b["GB/s"] / b["x_plain"] if "x_plain" in b else float("nan")))
    return out


def gnuplot_script(bench, data, png):
    c = bench["context"]
    title = (f"kopt fused AdamW, {c.get('cpu_model')}, {c.get('host_threads')} threads "
             f"({c.get('kopt')}, git {c.get('git_revision')})").replace('"', "'")
    lines = [f'set terminal pngcairo size {700 * len(data)},520 font ",10"',
             f'set output "{png}"',
             f'set multiplot layout 1,{len(data)} title "{title}"',
             "set grid", 'set xlabel "elements (log2)"', 'set ylabel "GB/s (byte model)"',
             "set key top right noenhanced", "set yrange [0:*]", "set xrange [15.5:26.5]",
             "set xtics 1"]
    for backend, variants in data.items():
        for i, (variant, points) in enumerate(sorted(variants.items())):
            lines.append(f"$d{i} << EOD")
            lines += [f"{x} {gbs} {ceil} {plain}" for x, gbs, ceil, plain in sorted(points)]
            lines.append("EOD")
        plots = []
        for i, variant in enumerate(sorted(variants)):
            plots.append(f'$d{i} using 1:2 with linespoints lc {i + 1} pt 7 title "{variant}"')
            plots.append(f'$d{i} using 1:3 with linespoints lc {i + 1} dt 2 pt 6 title "{variant} ceiling"')
            if any(p[3] == p[3] for p in variants[variant]):  # a plain loop was measured
                plots.append(f'$d{i} using 1:4 with linespoints lc {i + 1} dt 3 pt 4 '
                             f'title "{variant} plain loop"')
        lines.append(f'set title "{backend}" noenhanced')
        lines.append("plot " + ", \\\n     ".join(plots))
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


def main(args):
    if len(args) != 2:
        sys.exit(__doc__)
    with open(args[0]) as f:
        bench = json.load(f)
    data = series(bench)
    if not data:
        sys.exit(f"plot-perf: {args[0]} has no adamw_* rows with a ceiling")
    if shutil.which("gnuplot") is None:
        sys.exit("plot-perf: gnuplot not found (bash scripts/bootstrap-deps.sh --with-plot)")
    subprocess.run(["gnuplot"], input=gnuplot_script(bench, data, args[1]), text=True, check=True)
    print(f"plot-perf: wrote {args[1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
