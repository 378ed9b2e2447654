"""Every example program x preset x tune budget: the optimised (and library) time per run,
written as JSON; and the diff of two such files (which runs got slower, which faster).

The check behind "nothing gets worse" for a change that should not move results (or
should only improve them): record before, record after, diff.

    python benchmarks/compare_examples.py record before.json [--tunes 0,100] [--presets tpu,gpu,npu,gemmini,host]
    python benchmarks/compare_examples.py diff before.json after.json      # exit 1 if any run is slower

Programs: examples/*.acir of the repository, plus any other .acir in --examples DIRS.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))        # this checkout's package, not whichever one is installed


def example_files(dirs: list[str]) -> dict[str, Path]:
    """Programs by file stem; a stem seen in an earlier directory is not run twice (the
    shared examples are copies of the repository's)."""
    found: dict[str, Path] = {}
    for d in [str(ROOT / "examples")] + dirs:
        for path in sorted(Path(d).glob("*.acir")):
            found.setdefault(path.stem, path)
    return found


def record(out: str, tunes: list[int], presets: list[str], dirs: list[str]) -> int:
    import autocomp_jupyter as autocomp

    rows = {}
    started = time.perf_counter()
    for name, path in example_files(dirs).items():
        src = path.read_text()
        for target in presets:
            for tune in tunes:
                key = f"{name}|{target}|{tune}"
                t0 = time.perf_counter()
                res = autocomp.optimize(src, target=target, tune=tune, seed=0)
                r = res.report
                rows[key] = {"optimized_s": r["optimized"]["time_s"], "library_s": r["library"]["time_s"],
                             "verified": bool(r["verified"]), "wall_s": round(time.perf_counter() - t0, 2)}
                print(f"{key:45s} optimized {rows[key]['optimized_s']:.6e} s  library {rows[key]['library_s']:.6e} s"
                      f"  ({rows[key]['wall_s']} s)", flush=True)
    meta = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "package": autocomp.__file__,
            "wall_s": round(time.perf_counter() - started, 1)}
    Path(out).write_text(json.dumps({"meta": meta, "runs": rows}, indent=1, sort_keys=True))
    print(f"{len(rows)} runs -> {out} ({meta['wall_s']} s)")
    return 0


def diff(before: str, after: str, field: str = "optimized_s") -> int:
    a = json.loads(Path(before).read_text())["runs"]
    b = json.loads(Path(after).read_text())["runs"]
    same = faster = slower = 0
    missing = sorted(set(a) ^ set(b))
    for key in sorted(set(a) & set(b)):
        x, y = a[key][field], b[key][field]
        if y == x:
            same += 1
            continue
        if y < x:
            faster += 1
            word = "faster"
        else:
            slower += 1
            word = "SLOWER"
        print(f"{key:45s} {x:.6e} -> {y:.6e} s  {x / y:.4f}x  {word}")
    for key in missing:
        print(f"{key:45s} only in {'the first' if key in a else 'the second'} file")
    unverified = [k for k in b if not b[k]["verified"]]
    print(f"{field}: {same} the same, {faster} faster, {slower} slower, {len(missing)} unmatched, "
          f"{len(unverified)} not verified (of {len(set(a) | set(b))})")
    return 1 if slower or missing or unverified else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run every example and write the times as JSON")
    rec.add_argument("out")
    rec.add_argument("--tunes", default="0,100")
    rec.add_argument("--presets", default="tpu,gpu,npu,gemmini,host")
    rec.add_argument("--examples", nargs="*", default=["/work/shared/examples"],
                     help="more directories of .acir programs (besides the repository's examples/)")
    dif = sub.add_parser("diff", help="compare two recorded files; exit 1 if a run got slower")
    dif.add_argument("before")
    dif.add_argument("after")
    dif.add_argument("--field", default="optimized_s", choices=["optimized_s", "library_s"])
    args = parser.parse_args(argv)
    if args.cmd == "record":
        dirs = [d for d in args.examples if Path(d).is_dir()]
        return record(args.out, [int(t) for t in args.tunes.split(",")], args.presets.split(","), dirs)
    return diff(args.before, args.after, args.field)


if __name__ == "__main__":
    sys.exit(main())
