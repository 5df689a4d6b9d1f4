#!/usr/bin/env python3
"""Tests of the peers tooling that need neither torch nor DeepSpeed: the split is kopt's bit for
bit, kopt's row names map to peer configs, ratios are kopt's median over a peer's, kopt's
storage forms that share a peer config keep their own rates, and a peers.py run where no peer
imports writes a file that says why (and passes --check).

Usage: python3 scripts/test_perf_peers.py   (unittest; run by ctest as perf.peers_tooling)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "perf")]

import perf_peers  # noqa: E402
from peers_split import mixed_split  # noqa: E402


def kopt_row(name, gelem_s, threads, **counters):
    return {"name": name + "/manual_time", "run_type": "iteration", "Gelem/s": gelem_s,
            "threads": threads, **counters}


def peer_file(impl, melem_s, n=2**24, tensors=1, threads=1, variant="fp32"):
    row = {"impl": impl, "variant": variant, "tensors": tensors, "n": n, "threads": threads,
           "melem_s": melem_s, "samples": [melem_s]}
    context = {"date": "d", "torch": "2.15.0", "deepspeed": "0.19.8", "cpu_model": "c",
               "threads": threads, "load_average_at_start": "1.00 1.00 1.00", "absent": {}}
    return {"context": context, "rows": [row], "errors": []}


class SplitMatchesKopt(unittest.TestCase):
    def test_sizes_printed_by_the_cpp_mixed_split(self):
        # Values printed by perf/bench_tensors.cpp's algorithm (std::mt19937(7), libstdc++).
        sizes = mixed_split(2**26, 1000)
        self.assertEqual(sum(sizes), 67108872)
        self.assertEqual(sizes[:5], [11389, 16672, 258657, 29427, 15930])
        self.assertEqual(sizes[-5:], [87504, 247729, 84906, 4806, 14606])
        self.assertEqual(sum(mixed_split(2**24, 1000)), 16777214)
        self.assertEqual(sum(mixed_split(2**14, 1000)), 16365)  # kopt_bench --smoke's elements

    def test_one_tensor_is_the_whole_total(self):
        self.assertEqual(mixed_split(2**24, 1), [2**24])


class KoptRowsMapToPeerConfigs(unittest.TestCase):
    def test_names(self):
        config = perf_peers.kopt_config
        self.assertEqual(config(kopt_row("adamw_fp32/OpenMP/16777216", 1, 2)),
                         ("fp32", 1, 2**24, 2))
        self.assertEqual(config(kopt_row("adamw_bf16_master_split/OpenMP/1000/67108864", 1, 1,
                                         elements=67108872)), ("bf16", 1000, 2**26, 1))
        # The older split name (no total) and a --smoke split (nominal total, scaled elements).
        self.assertEqual(config(kopt_row("adamw_fp32_split/OpenMP/1000", 1, 1,
                                         elements=67108872)), ("fp32", 1000, 2**26, 1))
        self.assertEqual(config(kopt_row("adamw_fp32_split/OpenMP/1000/16777216", 1, 2,
                                         elements=16365)), ("fp32", 1000, 2**14, 2))
        # bf16's other storage forms meet the same peer config as adamw_bf16_master.
        for form in ("adamw_bf16_remainder", "adamw_bf16_remainder_bf16_state",
                     "adamw_bf16_no_master_bf16_state", "adamw_bf16_stochastic_bf16_state"):
            self.assertEqual(config(kopt_row(form + "/OpenMP/67108864", 1, 2)),
                             ("bf16", 1, 2**26, 2))
        for name in ("adamw_fp32/Serial/16777216", "adamw_fp16_master/OpenMP/16777216",
                     "stream_copy/OpenMP/67108864"):
            self.assertIsNone(config(kopt_row(name, 1, 1)))


class Ratios(unittest.TestCase):
    def test_kopt_median_over_peer_median(self):
        rounds = [kopt_row("adamw_fp32/OpenMP/16777216", g, 1) for g in (0.8, 0.9, 1.0)]
        kopt_files = [("k", {"context": {"host_threads": "1"}, "benchmarks": [r]})
                      for r in rounds]
        peer_files = [("p", peer_file("deepspeed", m)) for m in (400, 500, 450)]
        peer_files.append(("p", peer_file("torch_fused", 300)))
        peers = perf_peers.Peers(peer_files, kopt_files)
        ratios = peers.ratios(kopt_row("adamw_fp32/OpenMP/16777216", 5.0, 1))
        self.assertAlmostEqual(ratios["deepspeed"], 900 / 450)
        self.assertAlmostEqual(ratios["torch_fused"], 900 / 300)
        self.assertNotIn("torch_foreach", ratios)
        self.assertEqual(peers.ratios(kopt_row("adamw_fp32/OpenMP/16777216", 1.0, 2)), {})
        self.assertTrue(any("fp32 2^24 in 1 tensor(s)" in line for line in peers.summary()))

    def test_forms_of_one_config_are_not_merged(self):
        # Rounds of two bf16 forms at one config: pooled, their median would be 450 for both.
        forms = {"adamw_bf16_master": (0.2, 0.3, 0.25), "adamw_bf16_remainder_bf16_state":
                 (0.6, 0.7, 0.65), "adamw_bf16_stochastic_bf16_state": (0.8, 0.9, 1.0)}
        kopt_files = [("k", {"context": {"host_threads": "1"}, "benchmarks": [
            kopt_row(f + "/OpenMP/16777216", rates[i], 1) for f, rates in forms.items()]})
            for i in range(3)]
        peer_files = [("p", peer_file("deepspeed", 500, variant="bf16")),
                      ("p", peer_file("torch_fused", 200, variant="bf16"))]
        peers = perf_peers.Peers(peer_files, kopt_files)

        def ratio(form):
            return peers.ratios(kopt_row(form + "/OpenMP/16777216", 9.0, 1))
        self.assertAlmostEqual(ratio("adamw_bf16_master")["deepspeed"], 250 / 500)
        self.assertAlmostEqual(ratio("adamw_bf16_remainder_bf16_state")["deepspeed"], 650 / 500)
        self.assertAlmostEqual(ratio("adamw_bf16_stochastic_bf16_state")["torch_fused"],
                               900 / 200)
        # A form without rounds falls back on the row's own rate, not on another form's median.
        self.assertAlmostEqual(ratio("adamw_bf16_remainder")["deepspeed"], 9000 / 500)
        # The summary: one line per measured form, most bytes first, each with its ratios.
        lines = [line for line in peers.summary() if line.startswith("bf16 2^24 in 1 tensor")]
        self.assertEqual(len(lines), 3)
        for line, (label, kopt, x_ds) in zip(lines, [
                ("fp32 master, fp32 m,v (28 B)", "250", "0.50"),
                ("exact master as remainder, bf16 m,v (18 B)", "650", "1.30"),
                ("no master, stochastic, bf16 m,v (14 B)", "900", "1.80")]):
            self.assertIn(label, line)
            cells = line.split()  # torch foreach's cells are empty: no foreach rounds
            self.assertIn(kopt, cells)
            self.assertEqual(cells[-2:], [f"{int(kopt) / 200:.2f}", x_ds])  # x fused, x DS

    def test_a_peer_config_without_kopt_rounds_still_prints(self):
        peers = perf_peers.Peers([("p", peer_file("deepspeed", 500, variant="bf16"))], [])
        lines = [line for line in peers.summary() if line.startswith("bf16 2^24")]
        self.assertEqual(len(lines), 1)
        self.assertIn("500", lines[0].split())

    def test_check_flags_a_bad_row(self):
        data = peer_file("torch_fused", float("nan"))
        self.assertTrue(perf_peers.problems("p", data))
        self.assertEqual(perf_peers.problems("p", peer_file("torch_fused", 10.0)), [])


class AbsentPeers(unittest.TestCase):
    def test_a_python_without_torch_reports_every_peer_absent(self):
        check = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
        if check.returncode == 0:
            self.skipTest("torch imports here; the absent path needs a python without it")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "peers.json")
            run = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "peers.py"),
                                  "--threads", "1", "--smoke", "--out", out],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(out) as f:
                data = json.load(f)
            self.assertEqual(sorted(data["context"]["absent"]), sorted(perf_peers.PEERS))
            self.assertEqual(data["rows"], [])
            report = subprocess.run([sys.executable, os.path.join(HERE, "perf-report.py"),
                                     "--check", "--peers", out], capture_output=True, text=True)
            self.assertEqual(report.returncode, 0, report.stdout + report.stderr)


if __name__ == "__main__":
    unittest.main()
