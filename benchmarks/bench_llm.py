"""LLM inference workloads on every preset: attention at 2,048 tokens (comprehensions, an
additive table, a causal domain, library ops), a Llama-style decoder layer at prefill, a GPT-2
block, one decode step over a 4,096-position KV cache with and without its cache write, a
grouped-query decode step over 8,192 positions, a mixture-of-experts feed-forward at decode and
an embedding lookup (`benchmarks/workloads/*.acir`).

Each is optimised rules-only (`tune=0`) and printed beside the tuned per-op library (what a
vendor library ships: the report's `library` plan): the speedup over it, `limit_fraction`
(the physical limit's time over the optimised time), the optimised time, whether it
verified, and the optimise seconds. Then the ratios the LLM issue asks for, from the same
run: causal over unmasked attention, decode with over without its cache write, and the
embedding kernel's flops per element it moves; and for each decode step what the split-K
rule (FlashDecoding, `rules/split_k.py`) decided and why.

    python benchmarks/bench_llm.py                              # every workload, every accelerator
    python benchmarks/bench_llm.py --workloads attention_2048_causal --targets npu,tpu
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autocomp_jupyter as autocomp  # noqa: E402

WORKLOADS = Path(__file__).resolve().parent / "workloads"
DEFAULT = ["attention_2048", "attention_2048_table", "attention_2048_causal", "attention_2048_library",
           "llama_layer_prefill_2048", "gpt2_block_1024", "decode_4096", "decode_4096_nowrite", "decode_gqa_8192",
           "moe_decode", "embedding_32000x2048"]
TARGETS = ["npu", "tpu", "gpu", "gemmini"]


def run(names: list[str], targets: list[str]) -> dict:
    rows = {}
    print(f"{'workload':<28} {'target':<8} {'vs library':>10} {'limit':>6} {'optimised':>11} {'verified':>8} {'seconds':>8}")
    for name in names:
        for target in targets:
            start = time.perf_counter()
            report = autocomp.optimize(WORKLOADS / f"{name}.acir", target=target, tune=0).report
            seconds = time.perf_counter() - start
            rows[name, target] = report
            print(f"{name:<28} {target:<8} {report['speedup_vs_library']:>9.2f}x {report['limit_fraction']:>6.2f} "
                  f"{report['optimized']['time_s'] * 1e6:>9.1f}us {str(report['verified']):>8} {seconds:>8.1f}",
                  flush=True)
    return rows


def ratios(rows: dict, targets: list[str]) -> None:
    print()
    for target in targets:
        def t(name):
            report = rows.get((name, target))
            return report["optimized"]["time_s"] if report else None
        causal, full = t("attention_2048_causal"), t("attention_2048")
        if causal and full:
            print(f"{target}: causal / unmasked attention {causal / full:.2f}")
        write, nowrite = t("decode_4096"), t("decode_4096_nowrite")
        if write and nowrite:
            print(f"{target}: decode with / without the cache write {write / nowrite:.2f}")
        emb = rows.get(("embedding_32000x2048", target))
        if emb:
            kernel = emb["kernels"][0]
            moved = 64 * 2048
            print(f"{target}: embedding flops per element moved {kernel['metrics']['flops'] / moved:.2f}")


def split_decisions(rows: dict) -> None:
    """What the split-K rule decided on each workload it looked at (its rule-log line)."""
    lines = []
    for (name, target), report in rows.items():
        entry = next((r for r in report["rules"] if r["rule"] == "split_k"), None)
        if entry is not None:
            verdict = "split" if entry["applied"] else "not split"
            lines.append(f"{name} {target}: {verdict}: {entry['why']}")
    if lines:
        print()
        print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT))
    parser.add_argument("--targets", default=",".join(TARGETS))
    args = parser.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    targets = [t for t in args.targets.split(",") if t]
    rows = run(names, targets)
    ratios(rows, targets)
    split_decisions(rows)


if __name__ == "__main__":
    main()
