#!/usr/bin/env python3
"""Turns kopt perf-suite result files (Google Benchmark JSON) into the compact table the main
job prints: kernel, backend, size, GB/s, fraction of its own ceiling, ratio to the plain C++
loop and to each peer, and a note (many tensors vs one, clipping vs none, offload overlap, MPI
scaling).

Usage: python3 scripts/perf-report.py [--check] RESULT.json [MORE.json ...] [--peers ROUND.json ...]
Files from kopt_bench_mpi (one per world size) are combined into scaling rows. Files after
--peers come from the interleaved rounds of `run-perf.sh --with-peers`: perf/peers.py's JSON
and kopt_bench's JSON restricted to the peer configs; they give the "x DeepSpeed" and "x torch
fused" columns (kopt's median over the rounds / the peer's; torch foreach in the note) and a
peers block under the table (scripts/perf_peers.py). --check also fails (exit 1) when a file
lacks the context a figure needs, holds no rows, or a row's rate or fraction of ceiling is
missing or absurd (the perf suite's smoke test), and checks the peer files likewise.
"""
import json
import math
import sys

import perf_peers


def size_text(n):
    n = int(n)
    k = max(n.bit_length() - 1, 0)
    if n > 0 and n & (n - 1) == 0:
        return f"2^{k}"
    k = round(math.log2(n)) if n > 0 else 0  # the nearest power of two, above or below
    if k > 10 and abs(n - 2**k) < 2**k / 1000:  # a split of 2^k into tensors of whole sizes
        return f"~2^{k}"
    return f"{n:,}"


def fmt(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def split_name(name):
    """'adamw_fp32/OpenMP/65536/manual_time' -> ('adamw_fp32', 'OpenMP', ['65536'])."""
    parts = [p for p in name.split("/") if p != "manual_time"]
    return parts[0], parts[1] if len(parts) > 1 else "", parts[2:]


def kopt_rows(bench, peers=None):
    rows = []
    for b in bench["benchmarks"]:
        if b.get("run_type") == "aggregate" or "error_occurred" in b and b["error_occurred"]:
            continue
        kernel, backend, args = split_name(b["name"])
        size = size_text(args[0]) if args else ""
        note = ""
        x_naive = b.get("x_naive")
        x_torch = b.get("x_libtorch")
        if kernel.endswith("_split"):
            size = f"{size_text(b['elements'])} in {int(args[0]):,} tensors"
            note = f"{b['of_one_tensor']:.2f} of one tensor's rate"
        elif "of_plain_step" in b:
            note = f"{b['of_plain_step']:.2f} of the step without clip/scaling"
        elif kernel.startswith("offload_tiny"):
            size = f"{size_text(b['elements'])} in {int(args[0]):,} params"
            note = (f"{b['tiny_over_one']:.2f} of one param's step time ({b['tiny_ms']:.1f} vs "
                    f"{b['one_ms']:.1f} ms); each copy on its own {b['each_over_one']:.2f}")
        elif kernel.startswith("offload"):
            note = (f"total {b['total_ms']:.1f} ms, copies {b['copy_ms']:.1f}, update "
                    f"{b['update_ms']:.1f}; overlap {b['overlap']:.2f} (1 = perfect, 2 = none)")
            if "host_state_B" in b:
                note += f"; host state {b['host_state_B']:.0f} B, copies {b['copy_B']:.0f} B per element"
        elif kernel.startswith("peers"):
            note = f"naive {b['naive_GB/s']:.1f} GB/s (1 thread)"
            if "libtorch_GB/s" in b:
                note += f", libtorch {b['libtorch_GB/s']:.1f} GB/s"
            else:
                note += ", libtorch not built"
        elif kernel.startswith("many_params"):
            size = f"{int(b['params']):,} params in {int(b['groups']):,} groups"
            note = ", ".join(f"{p} {b[p + '_s']:.2f} s ({b[p + '_us_per_param']:.1f} us/param)"
                             for p in ("add", "construct", "first_step", "save", "load"))
        elif kernel.startswith("adafactor_"):
            note = (f"state {b['state_B/elem']:.4f} B/elem, workspace "
                    f"{b.get('workspace_B/elem', float('nan')):.4f} ({int(b['rows']):,} rows); "
                    f"ceiling: the least traffic its step needs")
        elif kernel.startswith("muon_"):
            size = kernel[len("muon_"):]
            note = (f"{b['GFLOP/s']:.1f} GFLOP/s; its gemms alone {b['gemm_GFLOP/s']:.1f} "
                    f"(of ceil: the step's share that is gemm); state "
                    f"{b.get('state_B/elem', float('nan')):.1f} B/elem, workspace "
                    f"{b.get('workspace_B/elem', float('nan')):.1f}")
        elif "of_slower" in b:
            note = f"{b['of_slower']:.2f} of the slower group alone"
        gbs = b.get("GB/s", b.get("copy_GB/s"))
        x_peer = peers.ratios(b) if peers else {}
        if "torch_foreach" in x_peer:
            note += ("; " if note else "") + f"x torch foreach {x_peer['torch_foreach']:.2f}"
        rows.append([kernel, backend, size, str(int(b.get("threads", 0))), fmt(gbs, 1),
                     fmt(b.get("of_ceiling")), fmt(b.get("x_plain")), fmt(x_naive, 1),
                     fmt(x_torch, 1), fmt(x_peer.get("deepspeed")),
                     fmt(x_peer.get("torch_fused")), note])
    return rows


def mpi_rows(files):
    """One row per (kernel, scaling, size, ranks): step time and efficiency vs 1 rank."""
    runs = {}
    for bench in files:
        for b in bench["benchmarks"]:
            kernel, scaling, args = split_name(b["name"])
            runs[(kernel, scaling, args[0], int(b["ranks"]))] = b
    rows = []
    for (kernel, scaling, arg, ranks), b in sorted(runs.items()):
        one = runs.get((kernel, scaling, arg, 1))
        if one is None:
            eff = ""
        elif scaling == "strong":  # ideal: time / ranks
            eff = f"speedup {one['ms'] / b['ms']:.2f} of {ranks}"
        else:  # weak: ideal is constant time
            eff = f"efficiency {one['ms'] / b['ms']:.2f}"
        size = f"{size_text(b['elements'])} ({scaling})"
        rows.append([kernel, f"MPI x{ranks}", size, str(int(b["threads"])),
                     "", "", "", "", "", "", "", f"{b['ms']:.1f} ms/step, {eff}" +
                     (f"; its MPI collectives alone {b['mpi_ms']:.1f} ms" if "mpi_ms" in b else "")])
    return rows


def print_table(rows):
    header = ["kernel", "backend", "size", "thr", "GB/s", "of ceil", "x plain", "x naive",
              "x libtorch", "x DeepSpeed", "x torch fused", "note"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header) - 1)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[-1]
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])


CONTEXT = ["kopt", "cpu_model", "host_threads", "OMP_PROC_BIND", "OMP_PLACES", "git_revision",
           "build", "load_average_at_start"]


def problems(path, bench):
    """What makes a result file unusable: missing context, no rows, absurd counters."""
    found = [f"{path}: no context '{k}'" for k in CONTEXT if k not in bench["context"]]
    rows = [b for b in bench["benchmarks"] if b.get("run_type") != "aggregate"]
    if not rows:
        found.append(f"{path}: no rows")
    for b in rows:
        rate = b.get("Gelem/s")
        if b.get("error_occurred"):
            found.append(f"{b['name']}: {b.get('error_message')}")
        elif b["name"].startswith("many_params"):  # times per phase, not a rate
            for p in ("add", "construct", "first_step", "save", "load"):
                t = b.get(p + "_s")
                if t is None or not math.isfinite(t) or t < 0:
                    found.append(f"{b['name']}: {p}_s = {t}")
        elif rate is None or not math.isfinite(rate) or rate <= 0:
            found.append(f"{b['name']}: no rate (Gelem/s = {rate})")
        for key in ("of_ceiling", "of_one_tensor", "of_plain_step", "x_plain", "x_naive",
                    "x_libtorch"):
            x = b.get(key)
            if x is not None and not (math.isfinite(x) and 0 < x < 1e4):
                found.append(f"{b['name']}: {key} = {x}")
    return found


def load(paths):
    files = []
    for path in paths:
        with open(path) as f:
            files.append((path, json.load(f)))
    return files


def main(args):
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    split = args.index("--peers") if "--peers" in args else len(args)
    paths, round_paths = args[:split], args[split + 1:]
    if not paths and not round_paths:
        sys.exit(__doc__)
    kopt_files, mpi_files = [], []
    for path, bench in load(paths):
        (mpi_files if "mpi_ranks" in bench["context"] else kopt_files).append((path, bench))
    rounds = load(round_paths)
    peer_files = [(p, d) for p, d in rounds if perf_peers.is_peer_file(d)]
    kopt_round_files = [(p, d) for p, d in rounds if not perf_peers.is_peer_file(d)]
    peers = perf_peers.Peers(peer_files, kopt_round_files) if rounds else None
    for path, bench in kopt_files:
        c = bench["context"]
        print(f"\n{path}\n  {c.get('kopt')}; {c.get('cpu_model')} ({c.get('hardware_threads')} "
              f"hardware threads); {c.get('host_threads')} threads, OMP_PROC_BIND="
              f"{c.get('OMP_PROC_BIND')} OMP_PLACES={c.get('OMP_PLACES')}; git "
              f"{c.get('git_revision')}; load {c.get('load_average_at_start')}\n"
              f"  libtorch: {c.get('libtorch')}\n")
        print_table(kopt_rows(bench, peers))
    if mpi_files:
        print("\nsharded step (kopt_bench_mpi; " +
              ", ".join(f"{b['context']['mpi_ranks']} ranks: {p}" for p, b in mpi_files) + ")\n")
        print_table(mpi_rows([b for _, b in mpi_files]))
    if peers:
        print("\n" + "\n".join(peers.summary()))
    if check:
        found = [p for path, bench in kopt_files + mpi_files + kopt_round_files
                 for p in problems(path, bench)]
        found += [p for path, data in peer_files for p in perf_peers.problems(path, data)]
        if found:
            sys.exit("perf-report --check failed:\n  " + "\n  ".join(found))
        print(f"\nperf-report --check: {len(paths) + len(round_paths)} file(s) complete, "
              "every row sane")


if __name__ == "__main__":
    main(sys.argv[1:])
