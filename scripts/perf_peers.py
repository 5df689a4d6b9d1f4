"""The peers part of perf-report.py: kopt's rows beside torch's AdamW (fused, foreach) and
DeepSpeed's CPU Adam, from the interleaved rounds of `run-perf.sh --with-peers`.

Two kinds of input: perf/peers.py's JSON (one per round and thread count) and kopt_bench's JSON
from the same rounds (restricted to the rows that have a peer config). A config is (variant,
tensors, n, threads); the rate of each implementation is the median over the rounds of each
round's median, and a ratio is kopt's median / the peer's median. kopt has several storage forms
for one bf16 config (with or without a master, fp32 or bf16 m and v): each keeps its own rates
and ratios, so a 14 B form's rate never lifts the 28 B form's median.
"""
import math
import statistics
from collections import defaultdict

PEERS = {"torch_fused": "torch fused", "torch_foreach": "torch foreach", "deepspeed": "DeepSpeed"}
# kopt's kernel (its split's too) -> (peer variant, label with the bytes per element it moves).
FORMS = {
    "adamw_fp32": ("fp32", "fp32 (28 B)"),
    "adamw_bf16_master": ("bf16", "fp32 master, fp32 m,v (28 B)"),
    "adamw_bf16_remainder": ("bf16", "exact master as remainder, fp32 m,v (26 B)"),
    "adamw_bf16_remainder_bf16_m_f32_v": ("bf16", "exact master as remainder, bf16 m, fp32 v (22 B)"),
    "adamw_bf16_remainder_bf16_state": ("bf16", "exact master as remainder, bf16 m,v (18 B)"),
    "adamw_bf16_no_master_bf16_state": ("bf16", "no master, nearest, bf16 m,v (14 B)"),
    "adamw_bf16_stochastic_bf16_state": ("bf16", "no master, stochastic, bf16 m,v (14 B)"),
}
VARIANTS = {kernel: variant for kernel, (variant, _) in FORMS.items()}
ROW_KEYS = ("impl", "variant", "tensors", "n", "threads", "melem_s", "samples")
CONTEXT = ("date", "torch", "deepspeed", "cpu_model", "threads", "load_average_at_start",
           "absent")


def is_peer_file(data):
    return "rows" in data and "benchmarks" not in data


def kopt_form(b):
    """The kernel of a kopt_bench row without '_split': its storage form, one per FORMS key."""
    kernel = b["name"].split("/")[0]
    return kernel[: -len("_split")] if kernel.endswith("_split") else kernel


def kopt_impl(form):
    """The rates' key for one kopt form: kept apart from the other forms of the same config."""
    return "kopt:" + form


def kopt_config(b):
    """(variant, tensors, n, threads) of a kopt_bench row that has a peer config, else None.

    Rows: adamw_fp32/OpenMP/<n>, adamw_bf16_master/OpenMP/<n> and bf16's other FORMS (one
    tensor), and adamw_fp32_split/OpenMP/<tensors>/<n>, adamw_bf16_master_split/... (or the older
    .../<tensors> form): a split's n is the power of two nearest its 'elements' counter, so a
    --smoke run (sizes / 2^10, names unscaled) matches the peers' smoke sizes too."""
    parts = [p for p in b["name"].split("/") if p != "manual_time"]
    kernel, backend, args = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
    split = kernel.endswith("_split")
    variant = VARIANTS.get(kernel[: -len("_split")] if split else kernel)
    if variant is None or backend != "OpenMP" or not args or "threads" not in b:
        return None
    if split:
        if "elements" not in b:
            return None
        tensors, n = int(args[0]), 1 << round(math.log2(b["elements"]))
    else:
        tensors, n = 1, int(args[0])
    return variant, tensors, n, int(b["threads"])


def first_load(text):
    return text.split()[0] if text else "?"


class Peers:
    """The rounds' rates per (implementation, config), and the load at each process's start."""

    def __init__(self, peer_files, kopt_files):
        self.rates = defaultdict(list)
        self.loads = defaultdict(list)  # (who, threads) -> 1-minute load at each start
        self.absent, self.context = {}, {}
        for _, data in peer_files:
            c = data["context"]
            self.context = c
            self.absent.update(c.get("absent", {}))
            load = first_load(c.get("load_average_at_start"))
            self.loads[("peers", c.get("threads"))].append(load)
            for r in data["rows"]:
                key = (r["impl"], r["variant"], r["tensors"], r["n"], r["threads"])
                self.rates[key].append(r["melem_s"])
        for _, bench in kopt_files:
            c = bench["context"]
            self.loads[("kopt", int(c.get("host_threads", 0)))].append(
                first_load(c.get("load_average_at_start")))
            for b in bench["benchmarks"]:
                cfg = None if b.get("error_occurred") else kopt_config(b)
                if cfg and b.get("run_type") != "aggregate" and "Gelem/s" in b:
                    self.rates[(kopt_impl(kopt_form(b)),) + cfg].append(b["Gelem/s"] * 1e3)

    def median(self, impl, cfg):
        values = self.rates.get((impl,) + cfg)
        return statistics.median(values) if values else None

    def ratios(self, b):
        """{peer: kopt / peer} for a kopt row: kopt's median over the rounds where there are
        rounds, else this row's own rate. Empty when no peer has this row's config."""
        cfg = kopt_config(b)
        if cfg is None:
            return {}
        kopt = self.median(kopt_impl(kopt_form(b)), cfg) or b.get("Gelem/s", 0) * 1e3
        found = {}
        for impl in PEERS:
            peer = self.median(impl, cfg)
            if peer and kopt:
                found[impl] = kopt / peer
        return found

    def configs(self):
        """The configs some peer measured: fp32 first, then by size, tensors, threads."""
        found = {key[1:] for key in self.rates if key[0] in PEERS}
        return sorted(found, key=lambda c: (c[0] != "fp32", c[0], c[2], c[1], c[3]))

    def forms(self, cfg):
        """The kopt forms measured on a config, in FORMS' order (most bytes first); [None], one
        line without kopt, where a peer has the config and kopt has none."""
        found = [f for f in FORMS if (kopt_impl(f),) + cfg in self.rates]
        return found or [None]

    def summary(self):
        """The block printed under the table: per config and kopt form the medians and the
        ratios (kopt form / peer)."""
        c = self.context
        lines = [f"peers (perf/peers.py; M elements/s, medians over interleaved rounds): torch "
                 f"{c.get('torch')}, deepspeed {c.get('deepspeed')} (op built with "
                 f"{c.get('deepspeed_op_flags') or '?'}); absent: "
                 + ("; ".join(f"{k}: {v}" for k, v in self.absent.items()) or "none")]
        head = ["config", "thr", "kopt form", "rounds", "kopt"] + list(PEERS.values()) + \
            [f"x {p}" for p in PEERS.values()]
        rows = []
        for variant, tensors, n, threads in self.configs():
            cfg = (variant, tensors, n, threads)
            peers = [self.median(i, cfg) for i in PEERS]
            for form in self.forms(cfg):
                impl = kopt_impl(form) if form else None
                kopt = self.median(impl, cfg) if form else None
                rounds = max(len(self.rates.get((i,) + cfg, [])) for i in (impl,) + tuple(PEERS))
                rows.append([f"{variant} 2^{n.bit_length() - 1} in {tensors:,} tensor(s)",
                             str(threads), FORMS[form][1] if form else "", str(rounds),
                             num(kopt, 0)] + [num(p, 0) for p in peers] +
                            [num(kopt / p if kopt and p else None, 2) for p in peers])
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        for (who, threads), loads in sorted(self.loads.items(), key=str):
            lines.append(f"load average (1 min) at the start of each {who} process, {threads} "
                         f"thread(s): {' '.join(loads)}")
        lines.append("bf16 layouts (B/element moved per step): kopt bf16 param and grad plus "
                     "fp32 master, m, v (28 B); an exact master kept as a 16-bit remainder, fp32 "
                     "m, v (26 B), bf16 m and fp32 v (22 B) or bf16 m, v (18 B); no master, bf16 m, v, rounded to nearest "
                     "or stochastically (14 B); torch bf16 param, grad, m, v (14 B); DeepSpeed "
                     "bf16 param and grad, fp32 m and v, no master (22 B). fp32: 28 B for all.")
        return lines


def num(x, digits):
    return "" if x is None else f"{x:.{digits}f}"


def problems(path, data):
    """What makes a peers.py file unusable: missing context, no rows and no reason, bad rows."""
    c = data.get("context", {})
    found = [f"{path}: no context '{k}'" for k in CONTEXT if k not in c]
    if not data.get("rows") and not c.get("absent"):
        found.append(f"{path}: no rows and no peer reported absent")
    for e in data.get("errors", []):
        found.append(f"{path}: {e.get('impl')} {e.get('variant')} failed: {e.get('error')}")
    for r in data.get("rows", []):
        missing = [k for k in ROW_KEYS if k not in r]
        rate = r.get("melem_s")
        if missing:
            found.append(f"{path}: a row lacks {', '.join(missing)}")
        elif r["impl"] not in PEERS or r["variant"] not in ("fp32", "bf16"):
            found.append(f"{path}: unknown impl/variant {r['impl']}/{r['variant']}")
        elif not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0) \
                or not r["samples"]:
            found.append(f"{path}: {r['impl']} {r['variant']} {r['n']}: rate {rate}")
    return found
