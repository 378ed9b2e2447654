"""Every library op alone and every transformer/CNN block, on every preset, at tune 0 and 200:
counts of verified / fell back / not verified, and on host the generated C against the
interpreter (--measure); with --replay, each report's kernel traces replayed
(`optimize(schedule=report)`): the replay must verify and reproduce the optimised time
exactly. The programs are the ones `tests/test_library_ops.py` runs (that
test runs a slice: ops at tune 0, blocks at tune 200).

    python benchmarks/verify_matrix.py [--tunes 0,200] [--presets tpu,gpu,npu,gemmini,host] [--no-measure] [--replay]
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import autocomp_jupyter as autocomp

ROOT = Path(__file__).resolve().parent.parent


def programs() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("library_ops", ROOT / "tests" / "test_library_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {**{f"op:{k}": v for k, v in module.OPS.items()}, **{f"block:{k}": v for k, v in module.BLOCKS.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tunes", default="0,200")
    parser.add_argument("--presets", default="tpu,gpu,npu,gemmini,host")
    parser.add_argument("--no-measure", action="store_true", help="skip compiling and running the C on host")
    parser.add_argument("--replay", action="store_true",
                        help="also replay every report's traces: verified, the same optimised time")
    args = parser.parse_args(argv)
    tunes = [int(t) for t in args.tunes.split(",")]
    presets = args.presets.split(",")
    counts = {"runs": 0, "verified": 0, "fell back": 0, "NOT VERIFIED": 0, "host C mismatch": 0, "crash": 0}
    if args.replay:
        counts["replay differs"] = 0
    started = time.perf_counter()
    for name, src in programs().items():
        for target in presets:
            for tune in tunes:
                counts["runs"] += 1
                measure = target == "host" and not args.no_measure
                try:
                    res = autocomp.optimize(src, target=target, tune=tune, seed=0, measure=measure)
                except Exception as err:  # a crash is a finding: count and show it
                    counts["crash"] += 1
                    print(f"CRASH {name} {target} tune={tune}: {type(err).__name__}: {err}")
                    continue
                r = res.report
                status = "verified" if r["verified"] and not r.get("fell_back") else (
                    "fell back" if r.get("fell_back") else "NOT VERIFIED")
                counts[status] += 1
                if measure and not r["measured"]["matches_interpreter"]:
                    counts["host C mismatch"] += 1
                    status += ", host C mismatch"
                if args.replay:
                    again = autocomp.optimize(src, target=target, schedule=r, measure=measure)
                    if not again.verified or again.report["optimized"]["time_s"] != r["optimized"]["time_s"]:
                        counts["replay differs"] += 1
                        status += (f", replay {'verified' if again.verified else 'NOT verified'} at "
                                   f"{again.report['optimized']['time_s']:.4g} s vs {r['optimized']['time_s']:.4g} s")
                if status != "verified":
                    print(f"{status}: {name} {target} tune={tune}: {r['rollbacks'][-1:]}")
    print(", ".join(f"{k}: {v}" for k, v in counts.items()) + f"  ({time.perf_counter() - started:.0f} s)")
    return 0 if counts["runs"] == counts["verified"] and not counts.get("replay differs") else 1


if __name__ == "__main__":
    raise SystemExit(main())
