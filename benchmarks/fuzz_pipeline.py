"""Differential fuzzing of the whole pipeline (issue 17): counts per preset x tune, and reproducers.

    python benchmarks/fuzz_pipeline.py --programs 200 --seed 0
    python benchmarks/fuzz_pipeline.py --programs 40 --seed 0 --tune 50 --presets tpu,host --out /tmp/fz

    python benchmarks/fuzz_pipeline.py --generator models --size mixed --programs 100 --presets npu,tpu --tune 0,20

Program k is `fuzzing.generate(seed + k)` (`--generator ops`, the default), or with
`--generator models` `fuzzing.models.generate_model(seed + k, size)`: a network
shaped as the exporters write them (ONNX built with onnx.helper, imported; `--size small`,
`torchvision` or `mixed`, alternating by seed), whose import is also checked against onnxruntime
(class `import`). Each runs through `optimize` on every
preset at every tune budget and is classified by `fuzzing.check_program` (crash, refused,
not verified, fell back, verified-but-wrong, host C mismatch with 1 / 2 threads). Every
failure is written to `--out` as `<program>-<preset>-t<tune>-<class>.acir` with a JSON line in
`failures.jsonl`; the first failure of each distinct kind (class + place + message shape) is
shrunk first (drop ops, cut the chain, lower dims and dtypes, keeping the failure), the
others are written as generated. Prints the counts table, then each distinct kind with its
count and its smallest reproducer. Exit status 1 when any crash or verified-but-wrong run
was found (so CI can run a slice).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package and benchmarks.fuzzing

from benchmarks import fuzzing as fuzz  # noqa: E402
from benchmarks.fuzzing import models as fuzz_models  # noqa: E402

try:
    import onnx
except ImportError:          # only --generator models needs it
    onnx = None

COLUMNS = (("programs", None), ("crash", "crash"), ("refused", "refused"), ("not verified", "not_verified"),
           ("verified-but-wrong", "wrong"), ("fell back", "fell_back"), ("host C 1t", "host_c_1t"),
           ("host C 2t", "host_c_2t"), ("replay", "replay"), ("import", "import"))


def generated(seed: int, generator: str, size: str):
    """Program `seed` of `generator` ("ops" or "models"; `size` for models: small,
    torchvision, or mixed: torchvision for odd seeds)."""
    if generator == "ops":
        return fuzz.generate(seed)
    if size == "mixed":
        size = "torchvision" if seed % 2 else "small"
    return fuzz_models.generate_model(seed, size)


def run_one(job: tuple) -> list[dict]:
    """Program `seed` on every preset x tune: one record per run (its classes and messages)."""
    seed, presets, tunes, replay, generator, size = job
    gen = generated(seed, generator, size)
    if getattr(gen, "refused", ""):          # the importer refused the generated model
        return [{"seed": seed, "preset": preset, "tune": tune, "dtype": "f32", "kinds": list(gen.kinds),
                 "seconds": 0.0, "verified": None, "text": "", "size": gen.size,
                 "problems": {"refused": [gen.refused, "onnx_import"]}, "notes": []}
                for tune in tunes for preset in presets]
    records = []
    first = True
    for tune in tunes:
        for preset in presets:
            if generator == "ops":
                outcome = fuzz.check_program(gen.text, preset, tune=tune, seed=seed % 1000, replay=replay)
            else:     # the onnxruntime check of the import once per program
                outcome = fuzz_models.check_model(gen, preset, tune=tune, seed=seed % 1000, replay=replay,
                                                  check_onnx=first)
            first = False
            records.append({"seed": seed, "preset": preset, "tune": tune, "dtype": gen.dtype,
                            "kinds": list(gen.kinds), "seconds": round(outcome.seconds, 3),
                            "verified": outcome.verified, "text": gen.text, "size": getattr(gen, "size", ""),
                            "problems": {c: list(v) for c, v in outcome.problems.items()},
                            "notes": outcome.notes})
    return records


def signature(cls: str, message: str, where: str) -> str:
    """The shape of a failure: class, place, and message with names and numbers blanked."""
    text = re.sub(r" \(plan [^)]*\)", "", message)
    text = re.sub(r"\b[A-Z][A-Za-z]*\d+\w*", "T", text)
    text = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    text = re.sub(r"\[N(, N)*\]", "[..]", text)
    return f"{cls} | {where} | {text[:160]}"


def still_fails(preset: str, tune: int, seed: int, cls: str, where: str):
    """The shrinker's test: the same class (and, for a crash, the same place) on this preset."""
    deep = cls in ("wrong", "host_c_1t", "host_c_2t") or (cls == "crash" and "optimize" not in where)
    threads = (1, 2) if cls.startswith("host_c") or cls == "crash" else ()

    def test(text: str) -> bool:
        outcome = fuzz.check_program(text, preset, tune=tune, seed=seed, deep=deep, host_threads=threads)
        if cls not in outcome.problems:
            return False
        return cls != "crash" or outcome.problems[cls][1] == where
    return test


def shrink_job(job: tuple[dict, str, float]) -> tuple[str, str]:
    """(smallest program, its failure message) for one record's failure class."""
    record, cls, seconds = job
    message, where = record["problems"][cls]
    if cls == "import" or not record["text"]:     # an ONNX-level failure: the model is the reproducer
        return record["text"], message
    test = still_fails(record["preset"], record["tune"], record["seed"] % 1000, cls, where)
    text = fuzz.shrink(record["text"], test, max_seconds=seconds)
    if text != record["text"]:
        again = fuzz.check_program(text, record["preset"], tune=record["tune"], seed=record["seed"] % 1000)
        message = again.problems.get(cls, (message,))[0]
    return text, message


def table(records: list[dict], presets, tunes) -> str:
    rows = []
    header = ["preset", "tune"] + [name for name, _ in COLUMNS]
    for tune in tunes:
        for preset in presets:
            mine = [r for r in records if r["preset"] == preset and r["tune"] == tune]
            row = [preset, str(tune)]
            for name, cls in COLUMNS:
                row.append(str(len(mine)) if cls is None else str(sum(cls in r["problems"] for r in mine)))
            rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=50, help="number of generated programs")
    ap.add_argument("--seed", type=int, default=0, help="program k uses seed + k")
    ap.add_argument("--presets", default=",".join(fuzz.PRESETS), help="comma-separated preset targets")
    ap.add_argument("--tune", default="0", help="comma-separated tuning budgets, e.g. 0,50")
    ap.add_argument("--out", default="benchmarks/results/fuzz", help="directory for reproducers + failures.jsonl")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--generator", choices=("ops", "models"), default="ops",
                    help="ops: random op chains (fuzz.generate); models: exporter-shaped networks (fuzz_models)")
    ap.add_argument("--size", choices=("small", "torchvision", "mixed"), default="small",
                    help="sizes of --generator models (mixed: torchvision for odd seeds)")
    ap.add_argument("--kernel-twins", action="store_true",
                    help="run every tiled check on the kernel's own twin (ir/twin.py), never the program's")
    ap.add_argument("--shrink-seconds", type=float, default=60.0, help="shrinking time per distinct failure")
    ap.add_argument("--no-shrink", action="store_true", help="write reproducers as generated")
    ap.add_argument("--replay", action="store_true",
                    help="also replay each report's traces: refused, unverified or a different time is class 'replay'")
    args = ap.parse_args(argv)
    presets = tuple(p.strip() for p in args.presets.split(",") if p.strip())
    unknown = [p for p in presets if p not in fuzz.PRESETS]
    try:
        tunes = tuple(int(t) for t in args.tune.split(",") if t.strip())
    except ValueError:
        ap.error(f"--tune takes comma-separated integers, got {args.tune!r}")
    if unknown:
        ap.error(f"unknown preset(s) {', '.join(unknown)}; choose from {', '.join(fuzz.PRESETS)}")
    if args.programs < 1 or args.jobs < 1 or any(t < 0 for t in tunes):
        ap.error("--programs and --jobs must be >= 1, --tune values >= 0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "failures.jsonl").write_text("")

    started = time.perf_counter()
    if args.kernel_twins:
        # Workers are forked from here, so they inherit it.
        from autocomp_jupyter import verify
        verify._program_twin = lambda program: None
    jobs = [(args.seed + k, presets, tunes, args.replay, args.generator, args.size) for k in range(args.programs)]
    records: list[dict] = []
    if args.jobs == 1:
        for k, job in enumerate(jobs):
            records.extend(run_one(job))
            if (k + 1) % 10 == 0:
                print(f"  {k + 1}/{len(jobs)} programs, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            for k, recs in enumerate(pool.map(run_one, jobs, chunksize=2)):
                records.extend(recs)
                if (k + 1) % 10 == 0:
                    print(f"  {k + 1}/{len(jobs)} programs, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    run_seconds = time.perf_counter() - started

    # Distinct kinds of failure: the first of each is shrunk, the rest written as generated.
    kinds: dict[str, list[tuple[dict, str]]] = defaultdict(list)
    for r in records:
        for cls, (message, where) in r["problems"].items():
            kinds[signature(cls, message, where)].append((r, cls))
    firsts = [(sig, runs[0]) for sig, runs in kinds.items()]
    smallest: dict[str, str] = {}
    if not args.no_shrink and firsts:
        print(f"  shrinking {len(firsts)} distinct failures ...", file=sys.stderr)
        shrink_jobs = [(rec, cls, args.shrink_seconds) for _, (rec, cls) in firsts]
        if args.jobs == 1:
            shrunk = [shrink_job(j) for j in shrink_jobs]
        else:
            with ProcessPoolExecutor(args.jobs) as pool:
                shrunk = list(pool.map(shrink_job, shrink_jobs))
        smallest = {sig: result for (sig, _), result in zip(firsts, shrunk)}
    repro_of: dict[str, str] = {}
    for sig, runs in kinds.items():
        for i, (r, cls) in enumerate(runs):
            message, where = r["problems"][cls]
            text = r["text"]
            if i == 0 and sig in smallest:
                text, message = smallest[sig]
            stem = f"{r['seed']}-{r['preset']}-t{r['tune']}-{cls}"
            path = fuzz.write_reproducer(out, stem, text, {
                "seed": r["seed"], "preset": r["preset"], "tune": r["tune"], "class": cls, "dtype": r["dtype"],
                "message": message, "where": where, "signature": sig, "shrunk": i == 0 and sig in smallest})
            if args.generator == "models" and (cls == "import" or not text):
                onnx.save(generated(r["seed"], "models", args.size).model, str(path.with_suffix(".onnx")))
            if i == 0:
                repro_of[sig] = str(path)

    print(f"\n{args.programs} programs (seeds {args.seed}..{args.seed + args.programs - 1}) x "
          f"{len(presets)} presets x tune {','.join(map(str, tunes))}: {len(records)} runs in {run_seconds:.0f} s "
          f"(mean {sum(r['seconds'] for r in records) / len(records):.2f} s/run, "
          f"{sum(r['seconds'] > 2 for r in records)} runs over 2 s)\n")
    print(table(records, presets, tunes))
    by_dtype = Counter((r["dtype"], cls) for r in records for cls in r["problems"])
    dtypes = sorted({r["dtype"] for r in records})
    print("\nfailures by program dtype (runs):")
    for cls in fuzz.CLASSES:
        counts = ", ".join(f"{d} {by_dtype[(d, cls)]}" for d in dtypes if by_dtype[(d, cls)])
        if counts:
            print(f"  {cls:13s} {counts}")
    print(f"\n{len(kinds)} distinct failures (class | where | message shape), most frequent first:")
    for sig, runs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        size = len(Path(repro_of[sig]).read_text().splitlines())
        print(f"  {len(runs):4d}x  {sig}\n         smallest reproducer: {repro_of[sig]} ({size} lines)")
    (out / "summary.json").write_text(json.dumps({
        "command": " ".join(sys.argv), "programs": args.programs, "seed": args.seed, "presets": presets,
        "tunes": tunes, "seconds": run_seconds,
        "counts": {f"{p}/t{t}": {cls or "programs": (sum(1 for r in records if r["preset"] == p and r["tune"] == t)
                                                     if cls is None else
                                                     sum(1 for r in records if r["preset"] == p and r["tune"] == t
                                                         and cls in r["problems"]))
                                 for _, cls in COLUMNS} for t in tunes for p in presets},
        "distinct": {sig: {"count": len(runs), "repro": repro_of[sig]} for sig, runs in kinds.items()}},
        indent=1))
    bad = sum(("crash" in r["problems"]) or ("wrong" in r["problems"]) or ("replay" in r["problems"]) for r in records)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
