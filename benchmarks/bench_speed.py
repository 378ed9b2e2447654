"""CPU seconds of whole-network optimisation: `optimize --tune 0` of exported models on presets,
and of explore points after the first, each run in a fresh process (cold caches).

CPU seconds (this process's user + system time) rather than wall time: the machine is shared.
Each run is one process (`AUTOCOMP_WORKERS=0`: no spare-core workers), so its CPU seconds are
all the work; wall seconds on every core are `bench_exports.py`'s.
Each run's report, less its timings, is hashed, so two trees (before and after a change) can be
compared point for point: equal hashes, equal reports.

    python benchmarks/bench_speed.py --models tv__resnet50,tv__efficientnet_b0 --targets npu,tpu
    python benchmarks/bench_speed.py --models tv__resnet50 --targets npu \
        --explore memory.SRAM.size_bytes=512KiB,1MiB,2MiB
    python benchmarks/bench_speed.py --models tv__resnet50 --targets npu --profile /tmp/r50.prof
    python benchmarks/bench_speed.py --tree /tmp/base --tree . --repeat 2   # alternate two trees

`--models` are stems of ~/.cache/autocomp-exports/<stem>.onnx (bench_exports.py writes them);
`--explore SWEEP` times the points of one sweep in one process: the first point, then each
later one (what a sweep's points after the first cost); `--reuse` adds, per point, each
cache's misses (what that point computed rather than found from the points before it).
`--tree` runs the package of that source tree (repeatable: the trees alternate, run by run,
so both see the same machine load).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path("~/.cache/autocomp-exports").expanduser()
_TIMINGS = ("seconds_by_pass", "seconds", "elapsed_s")
_SECONDS = re.compile(r" in [0-9.]+ s\b")


def _strip(value):
    """The report without its timings (what must not change between two trees)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _TIMINGS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str):          # a search's note says how long it took: "... in 0.14 s"
        return _SECONDS.sub(" in ? s", value)
    return value


def digest(report: dict) -> str:
    return hashlib.sha1(json.dumps(_strip(report), sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_one(model: str, target: str, profile: str | None) -> dict:
    """Optimise one model on one preset in this process: CPU seconds, seconds by pass, digest."""
    from autocomp_jupyter.cli import _finite
    from autocomp_jupyter.pipeline import optimize

    path = str(CACHE / f"{model}.onnx")
    t0 = time.process_time()
    if profile:
        import cProfile

        prof = cProfile.Profile()
        result = prof.runcall(optimize, path, target=target, tune=0)
        prof.dump_stats(profile)
    else:
        result = optimize(path, target=target, tune=0)
    cpu = time.process_time() - t0
    report = json.loads(json.dumps(_finite(result.report), default=str))
    return {"cpu": round(cpu, 2), "verified": bool(result.verified), "digest": digest(report),
            "by_pass": {k: round(v, 2) for k, v in (report.get("seconds_by_pass") or {}).items()}}


def run_explore(model: str, target: str, sweep: str, profile: str | None, reuse: bool = False) -> dict:
    """CPU seconds of each point of `sweep` on `target`, in one process; with `reuse`, each
    cache's misses per point (what a point computed rather than found)."""
    from autocomp_jupyter.cli import _finite
    from autocomp_jupyter.dse import explore

    from autocomp_jupyter import caches

    path = str(CACHE / f"{model}.onnx")
    marks, misses = [], []
    before = [caches.stats()]

    def progress(done, total, point):
        marks.append(time.process_time())
        if not reuse:
            return
        now = caches.stats()          # what this point computed again: each cache's new misses
        misses.append({k: v["misses"] - before[0].get(k, {}).get("misses", 0) for k, v in now.items()
                       if v["misses"] > before[0].get(k, {}).get("misses", 0)})
        before[0] = now

    t0 = time.process_time()
    if profile:
        import cProfile

        prof = cProfile.Profile()
        result = prof.runcall(explore, path, target, [sweep], tune=0, progress=progress)
        prof.dump_stats(profile)
    else:
        result = explore(path, target, [sweep], tune=0, progress=progress)
    per_point = [round(b - a, 2) for a, b in zip([t0] + marks[:-1], marks)]
    out = json.loads(json.dumps(_finite(result.to_json()), default=str))
    row = {"cpu": round(time.process_time() - t0, 2), "per_point": per_point, "digest": digest(out)}
    return {**row, "misses_per_point": misses} if reuse else row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tv__resnet50,tv__efficientnet_b0,tv__maxvit_t")
    p.add_argument("--targets", default="npu,tpu")
    p.add_argument("--explore", metavar="SWEEP", help="time the points of this sweep (PATH=V1,V2,...) instead")
    p.add_argument("--tree", action="append", help="source tree to run (repeatable: alternated)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--profile", help="cProfile output file (one model and target)")
    p.add_argument("--reuse", action="store_true", help="with --explore: each cache's misses per point")
    p.add_argument("--one", help=argparse.SUPPRESS)      # MODEL:TARGET, run here (the child process)
    args = p.parse_args(argv)
    if args.one:
        model, target = args.one.split(":")
        row = (run_explore(model, target, args.explore, args.profile, args.reuse) if args.explore
               else run_one(model, target, args.profile))
        print(json.dumps(row))
        return 0
    trees = [str(Path(t).resolve()) for t in (args.tree or [str(Path(__file__).resolve().parent.parent)])]
    for _ in range(args.repeat):
        for model in args.models.split(","):
            for target in args.targets.split(","):
                for tree in trees:
                    command = [sys.executable, str(Path(__file__).resolve()), "--one", f"{model}:{target}"]
                    command += (["--explore", args.explore] if args.explore else []) + \
                        (["--profile", args.profile] if args.profile else []) + (["--reuse"] if args.reuse else [])
                    # one process: its CPU seconds are the whole work (no spare-core workers)
                    env = dict(os.environ, PYTHONPATH=tree, AUTOCOMP_WORKERS="0")
                    done = subprocess.run(command, capture_output=True, text=True, cwd=tree, env=env)
                    if done.returncode:
                        print(f"{model} {target} {tree}: failed\n{done.stderr[-2000:]}", flush=True)
                        continue
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    print(f"{model:24s} {target:5s} {tree:20s} " + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
