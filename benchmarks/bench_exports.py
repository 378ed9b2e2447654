"""Models as today's exporters write them: torchvision, timm and transformers, exported by
torch.onnx (dynamo, opset 18) with random weights, checked against onnxruntime and optimised
on every preset.

Torch is never a dependency of the project: the export runs in a separate environment that
has torch (`--torch-python`, a subprocess running this file with `--export-only`), the check
and the optimisation in this one. Exported files are cached (`--cache`, default
~/.cache/autocomp-exports: `<model>.onnx`, its weights, `<model>.inputs.npz` with the example
inputs), so a second run only optimises.

    python3 -m venv /work/torchenv && /work/torchenv/bin/pip install torch torchvision timm transformers onnx onnxscript
    python benchmarks/bench_exports.py --torch-python /work/torchenv/bin/python --targets npu
    python benchmarks/bench_exports.py --torch-python /work/torchenv/bin/python --models tv:resnet18,timm:efficientnet_b0
    python benchmarks/bench_exports.py --list                  # every model name the script knows
    python benchmarks/bench_exports.py --markdown docs/results/exports.md \
        --from-json docs/results/exports.json,npu.json --json docs/results/exports.json

Model names are `tv:<torchvision name>` (every classification model of
`torchvision.models.list_models(module=torchvision.models)`), `timm:<name>` (TIMM_MODELS) and
`hf:<name>` (TRANSFORMERS_MODELS: built from their Config classes, random weights, nothing
downloaded). `--models` takes names, `tv`, `timm`, `hf` or `all` (the default: the three lists).

One row per model x preset: `numerics` is max |interpreter - onnxruntime| / max |y| on the
example input (`!` above 1e-4; `const` when the output does not depend on the input: the
random weights let every activation die, as GoogLeNet's initialisation does); `verified`, `seconds` (the rules-only `optimize`, cold
caches, every core: `autocomp_jupyter.workers`), `cpu` (the CPU seconds of this process and its workers), `slowest pass`
(the report's `seconds_by_pass`, its largest entry; the JSON rows keep them all), `vs_lib` (speedup_vs_library), `limit` (limit_fraction) and `chain` (the smallest
factor of the report's gain chain library -> fused -> tiled -> optimised, as in bench_onnx.py)
from the report; `error` the first line of an export, import or optimise failure with the
innermost place in the package.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TARGETS = ("tpu", "gpu", "npu", "gemmini", "host")
TIMM_MODELS = ("efficientnet_b0", "mobilenetv3_large_100", "convnext_tiny", "swin_tiny_patch4_window7_224",
               "regnety_004", "vit_tiny_patch16_224", "resnet18")
# name -> (Config class, its arguments, model class); default configs are the named checkpoints' shapes.
TRANSFORMERS_MODELS = {
    "bert-base-uncased": ("BertConfig", {}, "BertModel"),
    "distilbert-base-uncased": ("DistilBertConfig", {}, "DistilBertModel"),
    "gpt2": ("GPT2Config", {}, "GPT2LMHeadModel"),
    "tiny-llama": ("LlamaConfig", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                       max_position_embeddings=256), "LlamaForCausalLM"),
    "tiny-qwen2": ("Qwen2Config", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                       max_position_embeddings=256), "Qwen2ForCausalLM"),
}
IMAGE_SIZE = {"tv:inception_v3": 299}
NUMERICS_TOLERANCE = 1e-4


# --------------------------------------------------------------------------- export (torch's environment)


def torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def build(name: str, seq: int):
    """(torch module in eval mode, tuple of example inputs) for a model name; random weights."""
    import torch

    torch.manual_seed(0)
    source, _, model = name.partition(":")
    if source in ("tv", "timm"):
        size = IMAGE_SIZE.get(name, 224)
        if source == "tv":
            import torchvision
            module = torchvision.models.get_model(model, weights=None)
        else:
            import timm
            module = timm.create_model(model, pretrained=False)
        return _FirstOutput(module.eval()), (torch.randn(1, 3, size, size),)
    if source == "hf":
        import transformers

        config_name, kwargs, model_name = TRANSFORMERS_MODELS[model]
        config = getattr(transformers, config_name)(**kwargs)
        config._attn_implementation = "eager"         # plain MatMul/Softmax, not an SDPA kernel
        if hasattr(config, "use_cache"):
            config.use_cache = False
        module = getattr(transformers, model_name)(config).eval()
        ids = torch.randint(0, min(config.vocab_size, 1000), (1, seq))
        return _FirstOutput(module), (ids,)
    raise SystemExit(f"unknown model {name!r}: names are tv:<name>, timm:<name> or hf:<name>")


def _FirstOutput(module):
    """The module with its first output only (logits or the last hidden state)."""
    import torch

    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x):
            out = self.inner(x)
            if hasattr(out, "to_tuple"):
                out = out.to_tuple()
            return out[0] if isinstance(out, (tuple, list)) else out

    return First().eval()


def export_one(name: str, cache: Path, seq: int) -> None:
    """Export `name` to `cache/<stem>.onnx` with its example inputs in `<stem>.inputs.npz`."""
    import torch

    module, example = build(name, seq)
    path = cache / f"{stem(name)}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, example, str(path), input_names=[f"input{i}" for i in range(len(example))],
                          output_names=["output"], opset_version=18, dynamo=True)
    np.savez(cache / f"{stem(name)}.inputs.npz", **{f"input{i}": t.numpy() for i, t in enumerate(example)})


def stem(name: str) -> str:
    return name.replace(":", "__").replace("/", "_")


def export_main(args) -> int:
    cache = Path(args.cache).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.models.split(","):
        t0 = time.perf_counter()
        try:
            export_one(name, cache, args.seq)
            print(f"exported {name} in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as err:  # noqa: BLE001 - one model's failure is its row, not the end of the run
            failed += 1
            (cache / f"{stem(name)}.export_error.txt").write_text(traceback.format_exc())
            print(f"export of {name} failed: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}",
                  flush=True)
    return 1 if failed else 0


# --------------------------------------------------------------------------- check and optimise (this environment)


def model_names(spec: str, torch_python: str | None) -> list[str]:
    """The names `spec` asks for: model names, or the groups tv, timm, hf and all."""
    names = []
    for part in (p.strip() for p in spec.split(",")):
        if part in ("tv", "all"):
            names += _torchvision_list(torch_python)
        if part in ("timm", "all"):
            names += [f"timm:{m}" for m in TIMM_MODELS]
        if part in ("hf", "all"):
            names += [f"hf:{m}" for m in TRANSFORMERS_MODELS]
        if part and part not in ("tv", "timm", "hf", "all"):
            names.append(part)
    return list(dict.fromkeys(names))


def _torchvision_list(torch_python: str | None) -> list[str]:
    try:
        names = torchvision_names()
    except ImportError:
        if not torch_python:
            raise SystemExit("torchvision is not importable here: pass --torch-python PATH (a python with torch)")
        out = subprocess.run([torch_python, "-c", "import torchvision, json; print(json.dumps(sorted("
                              "torchvision.models.list_models(module=torchvision.models))))"],
                             capture_output=True, text=True, check=True).stdout
        names = json.loads(out)
    return [f"tv:{n}" for n in names]


def ensure_exported(name: str, args) -> tuple[Path | None, str, float]:
    """(path of the cached .onnx or None, the export error, export seconds; 0 when cached)."""
    cache = Path(args.cache).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{stem(name)}.onnx"
    if path.exists() and (cache / f"{stem(name)}.inputs.npz").exists() and not args.reexport:
        return path, "", 0.0
    t0 = time.perf_counter()
    command = [args.torch_python or sys.executable, str(Path(__file__).resolve()), "--export-only",
               "--models", name, "--cache", str(cache), "--seq", str(args.seq)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.export_timeout)
        message = (done.stdout + done.stderr).strip().splitlines()
    except subprocess.TimeoutExpired:
        return None, f"export: no result within {args.export_timeout:g} s", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if path.exists():
        return path, "", seconds
    failure = next((m for m in message if "failed" in m), message[-1] if message else "no output")
    return None, f"export: {failure[:300]}", seconds


def numerics(path: Path, program) -> float:
    """max |interpreter - onnxruntime| / max |y| on the cached example inputs; -1 when the
    output does not depend on the input (onnxruntime gives the same y for another input: the
    random weights let every activation die, and the check would prove nothing)."""
    import onnxruntime as ort

    from autocomp_jupyter.onnx_import import run_with_values

    example = dict(np.load(str(path).replace(".onnx", ".inputs.npz")))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: example[i.name] for i in session.get_inputs() if i.name in example}
    want = session.run(None, feeds)[0].astype(np.float64)
    other = {k: (v * 2 + 1 if v.dtype.kind == "f" else (v + 1) % max(int(v.max()) + 1, 2)) for k, v in feeds.items()}
    if np.array_equal(session.run(None, other)[0], want.astype(np.float32)):
        return -1.0
    program_inputs = [t.name for t in program.inputs if t.role == "input"]
    values = {p: example[o] for p, o in zip(program_inputs, feeds)}
    got = np.asarray(run_with_values(program, values)[program.outputs[0]], np.float64).reshape(want.shape)
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


def one_line(err: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "autocomp_jupyter" in f.filename]
    where = ""
    if frames:
        f = frames[-1]
        where = f" [{f.filename[f.filename.rindex('autocomp_jupyter'):]}:{f.name}:{f.lineno}]"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:240] if text else ''}{where}"


class _Timeout(Exception):
    pass


def optimise_row(program, target: str, tune: int, timeout: float, executor: str | None = None) -> dict:
    from autocomp_jupyter import optimize
    from bench_onnx import chain_floor, clear_caches

    clear_caches()

    def on_alarm(signum, frame):
        raise _Timeout(f"no result within {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    from autocomp_jupyter import workers

    t0, cpu0 = time.perf_counter(), time.process_time() + workers.cpu_seconds()
    try:
        r = optimize(program, target=target, tune=tune, executor=executor).report
        return {"verified": bool(r["verified"]), "seconds": time.perf_counter() - t0,
                "cpu": time.process_time() + workers.cpu_seconds() - cpu0, "vs_lib": r["speedup_vs_library"], "limit": r["limit_fraction"],
                "chain": chain_floor(r), "kernels": len(r["kernels"]), "seconds_by_pass": r["seconds_by_pass"],
                "workers": workers.spare_cores(),
                "error": ""}
    except Exception as err:  # noqa: BLE001 - the traceback is the finding: one line in the table
        return {"verified": None, "seconds": time.perf_counter() - t0,
                "cpu": time.process_time() + workers.cpu_seconds() - cpu0,
                "error": f"optimize: {one_line(err)}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


HEADER = (f"| {'model':38} | {'target':7} | {'nodes':>5} | {'numerics':>8} | {'verified':>8} | {'seconds':>7} | "
          f"{'cpu':>6} | {'slowest pass':>20} | {'vs_lib':>6} | {'limit':>5} | {'chain':>5} | error |")


def row_text(name, target, nodes, err, row) -> str:
    def num(key, fmt):
        v = row.get(key)
        return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"
    numer = "-" if err is None or math.isnan(err) else "const" if err < 0 else \
        f"{err:.1e}" + ("" if err <= NUMERICS_TOLERANCE else "!")
    verified = {True: "yes", False: "NO", None: "-"}[row.get("verified")]
    passes = row.get("seconds_by_pass") or {}
    slowest = max(passes, key=passes.get) if passes else ""
    slowest = f"{slowest} {passes[slowest]:.1f}" if slowest else "-"
    return (f"| {name:38} | {target:7} | {nodes:>5} | {numer:>8} | {verified:>8} | {num('seconds', '.1f'):>7} | "
            f"{num('cpu', '.1f'):>6} | {slowest:>20} | {num('vs_lib', '.2f'):>6} | {num('limit', '.2f'):>5} | "
            f"{num('chain', '.3f'):>5} | {row.get('error', '')} |")


def run_model(name: str, targets, args, results: list) -> None:
    import onnx

    from autocomp_jupyter import from_onnx

    path, error, _ = ensure_exported(name, args)
    if path is None:
        print(row_text(name, "-", "-", None, {"error": error}), flush=True)
        results.append({"model": name, "error": error})
        return
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    try:
        program = from_onnx(str(path))
    except Exception as err:  # noqa: BLE001 - a refusal (UserError) or a traceback: one line either way
        error = f"import: {one_line(err)}"
        print(row_text(name, "-", nodes, None, {"error": error}), flush=True)
        results.append({"model": name, "nodes": nodes, "error": error})
        return
    try:
        err = numerics(path, program)
    except Exception as exc:  # noqa: BLE001
        err, error = float("nan"), f"numerics: {one_line(exc)}"
    for target in targets:
        row = optimise_row(program, target, args.tune, args.timeout, args.executor)
        if error and not row["error"]:
            row["error"] = error
        print(row_text(name, target, nodes, err, row), flush=True)
        results.append({"model": name, "target": target, "nodes": nodes, "numerics": err, **row,
                        "machine_s": getattr(args, "machine_s", None)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all", help="names, or tv / timm / hf / all (comma-separated)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--torch-python", default=None, help="a python that has torch (runs the exports)")
    ap.add_argument("--cache", default="~/.cache/autocomp-exports", help="where exported models are kept")
    ap.add_argument("--seq", type=int, default=64, help="sequence length of the transformers models")
    ap.add_argument("--executor", default=None,
                    help="optimize()'s executor for the library's per-kernel searches, e.g. processes:2 (same results)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per optimise before it counts as a hang")
    ap.add_argument("--export-timeout", type=float, default=1800.0, help="seconds per export")
    ap.add_argument("--reexport", action="store_true", help="export again even when cached")
    ap.add_argument("--json", default="", help="also write the rows to this JSON file (with --markdown: the merged rows)")
    ap.add_argument("--list", action="store_true", help="print the model names and stop")
    ap.add_argument("--markdown", default="", metavar="OUT",
                    help="write the results page from the JSON files of earlier runs (--from-json) and stop")
    ap.add_argument("--from-json", default="", metavar="FILES", help="comma-separated --json files, for --markdown")
    ap.add_argument("--export-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.export_only:
        return export_main(args)
    if args.markdown:
        rows = latest([row for f in args.from_json.split(",") if f for row in json.loads(Path(f).read_text())])
        Path(args.markdown).write_text(markdown(rows))
        if args.json:           # the merged rows, for the next run to add to
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    names = model_names(args.models, args.torch_python)
    if args.list:
        print("\n".join(names))
        return 0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    print(f"# {len(names)} models x {', '.join(targets)}, tune {args.tune}, cache {args.cache}")
    print(HEADER)
    print("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
    results: list[dict] = []
    args.machine_s = reference_seconds()
    print(f"# reference workload: {args.machine_s:.2f} s on this machine (bench_exports.reference_seconds)")
    for name in names:
        run_model(name, targets, args, results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    for line in summary(results, targets):
        print(line)
    bad = [r for r in results if r.get("error") or r.get("verified") is False]
    return 1 if bad else 0


SLOW_S = 20.0       # the bar: a model optimises in this many seconds per preset


def markdown(results: list[dict]) -> str:
    """The results page of one or more runs (their JSON rows): per preset, how many models
    verified, the median limit fraction, the lowest gain step and how many took over SLOW_S
    CPU seconds, then each preset's rows as `row_text` prints them (the error column kept
    only where a row has one)."""
    targets = list(dict.fromkeys(r["target"] for r in results if r.get("target")))
    models = list(dict.fromkeys(r["model"] for r in results))
    kinds = {k: sum(m.startswith(k + ":") for m in models) for k in ("tv", "timm", "hf")}
    out = ["# Exported models", "",
           f"{kinds['tv']} torchvision classification models, {kinds['timm']} timm and {kinds['hf']} transformers "
           "models, exported by `torch.onnx.export(dynamo=True, opset_version=18)` with random weights, checked "
           "against onnxruntime and optimised (`optimize`, tune 0, cold caches) on each preset. One run of "
           "`python benchmarks/bench_exports.py --models <names> --targets <preset> --json <preset>.json` per "
           "preset on a 2-core machine; this page is "
           "`python benchmarks/bench_exports.py --markdown docs/results/exports.md --from-json "
           "docs/results/exports.json` (every run's rows, a later run of a model replacing an earlier one). "
           "A run on every core (its spare-core workers column above 0) ran alone, and its wall seconds are the "
           "time to compare with 20 s; a run in one process (workers 0) shared the machine with another, and its "
           "CPU seconds are the time one quiet core takes: `over 20 s` counts the one or the other.", "",
           "Columns: `numerics` max |interpreter - onnxruntime| / max |y| (`const`: the random weights make the "
           "output independent of the input); `seconds` wall and `cpu` CPU seconds of the optimisation (this "
           "process's and its workers'); "
           "`slowest pass` the pass that took longest; `vs_lib` the speedup over the tuned per-op library; "
           "`limit` the limit fraction; `chain` the smallest step of the gain chain.", "",
           "`machine` is the seconds the run's machine took for a fixed workload "
           "(`bench_exports.reference_seconds`; `-`: a run before it was recorded): an optimisation's seconds "
           "scale with it, so rows from machines of different speed compare through it.", "",
           "| preset | models | verified | errors | median limit | lowest gain step | workers | machine | over "
           f"{SLOW_S:g} s | slowest |", "|---|---:|---:|---:|---:|---|---:|---|---:|---|"]
    counts = []
    for target in targets:
        rows, ok, median, low = _preset_stats(results, target)
        counts.append(len(rows))
        slow = max(ok, key=_time) if ok else None
        spare = max((r.get("workers", 0) for r in ok), default=0)
        out.append(f"| {target} | {len(rows)} | {len(ok)} | {sum(bool(r.get('error')) for r in rows)} | "
                   + (f"{median:.2f} | {low['chain']:.3f} ({low['model']}) | {spare} | {_machines(rows)} | "
                      f"{sum(_time(r) > SLOW_S for r in ok)} | {_time(slow):.1f} s ({slow['model']}) |"
                      if ok else "- | - | - | - | - | - |"))
    if len(set(counts)) > 1:
        out += ["", f"A preset with fewer than {max(counts)} models has not been run on the others yet: its "
                "section lists the ones it has."]
    unimported = [r for r in results if not r.get("target")]
    if unimported:
        out += ["", "Not imported: " + "; ".join(f"{r['model']}: {r.get('error', '')}" for r in unimported)]
    errors = any(r.get("error") for r in results)
    by_cell = {(r["model"], r["target"]): r for r in results if r.get("target")}
    for target in targets:
        out += ["", f"## {target}", ""]
        head = HEADER if errors else HEADER.rsplit(" error |", 1)[0]
        names = [c.strip() for c in head.strip("|").split("|")]
        out += ["| " + " | ".join(names[:7] + ["machine"] + names[7:]) + " |",
                "|---|---|---:|---:|---|---:|---:|---|---|---:|---:|---:|" + ("---|" if errors else "")]
        for name in models:
            r = by_cell.get((name, target))
            if r is not None:
                cells = [c.strip() for c in row_text(name, target, r.get("nodes", 0), r.get("numerics"), r)
                         .strip("|").split("|")]
                cells = cells[:7] + [_machines([r])] + cells[7:]
                out.append("| " + " | ".join(cells if errors else cells[:-1]) + " |")
    return "\n".join(out) + "\n"


def latest(rows: list[dict]) -> list[dict]:
    """`rows` with one row per model and preset, the last given (a later run of a model
    replaces an earlier one), in the order the models first appear."""
    last = {(r["model"], r.get("target")): r for r in rows}
    refused = {r["model"]: i for i, r in enumerate(rows) if not r.get("target")}    # its last refusal
    for model, i in refused.items():    # a model refused, then imported by a later run
        if any(s["model"] == model and s.get("target") for s in rows[i + 1:]):
            del last[(model, None)]
    seen, out = set(), []
    for r in rows:
        key = (r["model"], r.get("target"))
        if key not in seen and key in last:
            seen.add(key)
            out.append(last[key])
    return out


def reference_seconds(repeats: int = 3) -> float:
    """Seconds this machine takes for a fixed workload (a pure-Python loop and a small numpy
    product; the fastest of `repeats`): stored with each row, so the seconds of runs made on
    different machines compare (an optimisation's time scales with it)."""
    best = float("inf")
    for _ in range(repeats):
        a = np.linspace(-1.0, 1.0, 64).reshape(8, 8)
        t0 = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i & 7
        for _ in range(50_000):
            a = np.tanh(a @ a)
        best = min(best, time.perf_counter() - t0)
    return best


def _machines(rows: list[dict]) -> str:
    """The reference seconds of the machines `rows` ran on, as the page shows them."""
    seen = sorted({f"{r['machine_s']:.2f} s" if r.get("machine_s") else "-" for r in rows})
    return ", ".join(seen) if seen else "-"


def _time(row: dict) -> float:
    """The row's time to compare with SLOW_S: wall seconds of a run on every core (it ran
    alone), CPU seconds of a run in one process (it may have shared the machine)."""
    return row["seconds"] if row.get("workers", 0) else row["cpu"]


def _preset_stats(results: list[dict], target: str):
    """(its rows, the verified ones, their median limit fraction, the row of the lowest gain
    step) of one preset; the last two None where none verified."""
    import statistics

    rows = [r for r in results if r.get("target") == target]
    ok = [r for r in rows if r.get("verified")]
    if not ok:
        return rows, ok, None, None
    return rows, ok, statistics.median(r["limit"] for r in ok), min(ok, key=lambda r: r["chain"])


def summary(results: list[dict], targets) -> list[str]:
    """Per target: verified rows, median limit_fraction, the lowest gain step, the slowest run."""
    lines = []
    for target in targets:
        _, rows, median, low = _preset_stats(results, target)
        if not rows:
            continue
        slow = max(rows, key=lambda r: r["seconds"])
        lines.append(f"# {target}: {len(rows)} verified, median limit {median:.2f}, "
                     f"lowest gain step {low['chain']:.3f} ({low['model']}), slowest {slow['seconds']:.1f} s "
                     f"({slow['model']}, cpu {slow['cpu']:.1f} s)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
