#!/usr/bin/env python3
"""Measures kopt's Python peers on the host CPU, on the configs of kopt's own rows: torch's
AdamW(fused=True) and AdamW(foreach=True), and DeepSpeed's DeepSpeedCPUAdam (adamw_mode=True),
all with torch.optim.AdamW's defaults; variants fp32 and bf16 (see peers_impls.py for what each
keeps), 1 tensor or the same total split into kopt's mixed sizes (peers_split.py). Each config
is warmed up (the first step allocates the state), then timed step by step; the median rate is
reported. One process runs one thread count: OpenMP reads OMP_NUM_THREADS once.

Usage: peers.py --threads T --out FILE.json [--sizes 24,26] [--tensors 1,1000]
                [--variants fp32,bf16] [--impls torch_fused,torch_foreach,deepspeed]
                [--steps 7] [--warmup 2] [--smoke]
       peers.py --build-only   (compiles DeepSpeed's CPU Adam op, once; exit 1 if it fails)
A peer that does not import, build or step is reported under "absent" with the reason.
"""
import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time

import peers_impls as impls
from peers_split import mixed_split


def parse_args(argv):
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    words = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="the JSON file to write")
    p.add_argument("--sizes", type=ints, help="log2 of the total elements (default 24,26)")
    p.add_argument("--tensors", type=ints, default=[1, 1000])
    p.add_argument("--variants", type=words, default=["fp32", "bf16"])
    p.add_argument("--impls", type=words, default=list(impls.IMPLS))
    p.add_argument("--steps", type=int, default=7, help="timed steps per config")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--smoke", action="store_true",
                   help="kopt_bench --smoke's sizes (2^14, 2^16), 1 + 3 steps")
    p.add_argument("--build-only", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup = 3, 1
    if args.sizes is None:
        args.sizes = [14, 16] if args.smoke else [24, 26]
    if not args.build_only and not args.out:
        p.error("--out is required")
    for v in args.variants:
        if v not in impls.DTYPES:
            p.error(f"unknown variant '{v}' (fp32, bf16)")
    return args


def first_line(path, key=""):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip() if key else line.strip()
    except OSError:
        pass
    return "unknown"


def make_params(torch, sizes, dtype, seed):
    """Params and grads uniform in [-1, 1), one allocation each, as a model's would be."""
    gen = torch.Generator().manual_seed(seed)
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.empty(n, dtype=dtype).uniform_(-1, 1, generator=gen))
        p.grad = torch.empty(n, dtype=dtype).uniform_(-1, 1, generator=gen)
        params.append(p)
    return params


def measure(torch, impl, variant, sizes, args):
    """Median M elements/s of `impl` over args.steps timed steps, and every sample."""
    params = make_params(torch, sizes, getattr(torch, impls.DTYPES[variant]), seed=1)
    opt = impls.make_optimizer(impl, params)
    elements = sum(sizes)
    for _ in range(args.warmup):
        opt.step()
    samples = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.step()
        samples.append(elements / (time.perf_counter() - t0) / 1e6)
    del opt, params  # free this config's memory before the next one allocates
    gc.collect()
    return statistics.median(samples), samples


def context(torch, args, absent, simd, load_at_start):
    ctx = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **impls.versions(),
        "deepspeed_op_flags": simd,
        "python": platform.python_version(),
        "cpu_model": first_line("/proc/cpuinfo", "model name"),
        "hardware_threads": os.cpu_count(),
        "threads": args.threads,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_PROC_BIND": os.environ.get("OMP_PROC_BIND", "unset"),
        "OMP_PLACES": os.environ.get("OMP_PLACES", "unset"),
        "load_average_at_start": " ".join(load_at_start.split()[:3]),
        "steps": args.steps,
        "warmup": args.warmup,
        "split": "1 tensor, or kopt's mixed split (std::mt19937 seed 7, sizes log-uniform "
                 "over 64x; perf/bench_tensors.cpp): n is the nominal total, elements the sum",
        "absent": absent,
    }
    if torch is not None:
        ctx["torch_threads"] = torch.get_num_threads()
        ctx["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return ctx


def main(argv):
    args = parse_args(argv)
    impls.set_up_environment(args.threads)
    load_at_start = first_line("/proc/loadavg")
    if args.build_only:
        try:
            print(f"peers: DeepSpeed's CPU Adam op ready ({impls.deepspeed_op()})")
            return 0
        except Exception as e:
            print(f"peers: DeepSpeed's CPU Adam op did not build: {e}", file=sys.stderr)
            return 1
    try:
        import torch
    except Exception as e:  # no torch: every peer is absent, and the file says why
        torch, reason = None, f"torch does not import: {type(e).__name__}: {e}"
    simd, absent = "", {}
    if torch is not None:
        torch.set_num_threads(args.threads)
        if "deepspeed" in args.impls:
            try:
                simd = impls.deepspeed_op()
            except Exception as e:
                absent["deepspeed"] = f"CPU Adam op does not build: {type(e).__name__}: {e}"
        for impl in args.impls:
            reason = absent.get(impl) or impls.probe(impl)
            if reason:
                absent[impl] = reason
    else:
        absent = {impl: reason for impl in args.impls}
    rows, errors = [], []
    for variant in args.variants:
        for log2n in args.sizes:
            for tensors in args.tensors:
                sizes = mixed_split(2**log2n, tensors)
                for impl in [i for i in args.impls if i not in absent]:
                    lay, bytes_per_elem = impls.layout(impl, variant)
                    try:
                        melem_s, samples = measure(torch, impl, variant, sizes, args)
                    except Exception as e:  # e.g. out of memory: record it, go on
                        errors.append({"impl": impl, "variant": variant, "tensors": tensors,
                                       "n": 2**log2n, "error": f"{type(e).__name__}: {e}"})
                        gc.collect()
                        continue
                    rows.append({"impl": impl, "variant": variant, "tensors": tensors,
                                 "n": 2**log2n, "elements": sum(sizes), "threads": args.threads,
                                 "melem_s": round(melem_s, 1),
                                 "samples": [round(s, 1) for s in samples],
                                 "layout": lay, "bytes_per_element": bytes_per_elem})
                    print(f"peers: {impl} {variant} 2^{log2n} in {tensors} tensor(s), "
                          f"{args.threads} thread(s): {melem_s:.0f} M elem/s", flush=True)
    ctx = context(torch, args, absent, simd, load_at_start)
    with open(args.out, "w") as f:
        json.dump({"context": ctx, "rows": rows, "errors": errors}, f, indent=1)
    for impl, why in absent.items():
        print(f"peers: {impl} absent: {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
