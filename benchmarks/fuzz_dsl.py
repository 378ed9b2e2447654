"""DSL input fuzzer: every input must end in a UserError with a location, or in a program that runs.

    python benchmarks/fuzz_dsl.py --n 10000 --seed 0 [--timeout 10] [--out DIR]

Inputs (seeded, reproducible): mutations of the programs in examples/ and of random valid
programs (deleted, duplicated, swapped or cut text; inserted tokens, keywords and unicode;
numbers made huge, zero, negative or fractional; deep nesting and long sums spliced into
expressions; huge attributes), random token soup, deep nesting (parentheses, signs, calls,
brackets, up to thousands of levels), long sums and products, huge numbers, unicode and
binary text.

Each input runs in a worker process: `autocomp_jupyter.dsl.parse(text)`; when it parses,
its scaled twin (`dsl.scaled_twin(text, max_extent=4)`) runs in `interp.run` after the run budgets
(memory, iteration points) accept it. A worker that exceeds `--timeout` is killed and
restarted. Prints the counts: user errors with a location, user errors without one, programs
that ran, runs refused by a run budget, tracebacks and runs over 5 s; each traceback and slow
input is saved to `--out` (default benchmarks/results/fuzz_dsl/) as a reproducer.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SLOW_S = 5.0
TWIN_EXTENT = 4
FUZZ_MEMORY = 256 * 2**20   # the fuzzer's interpreter runs: small, so runs stay fast
FUZZ_POINTS = 20_000_000

OPS_UNARY = ["relu", "relu6", "gelu", "sigmoid", "tanh", "exp", "softmax", "layernorm", "global_avgpool"]
OPS_ALL = OPS_UNARY + ["matmul", "batch_matmul", "linear", "conv2d", "depthwise_conv2d", "add", "sub", "mul",
                       "bias_add", "batchnorm", "maxpool2d", "avgpool2d", "transpose"]
FUNCS = ["exp", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "max", "min"]
KEYWORDS = ["input", "param", "tensor", "output", "where", "and", "max=", "+=", "=", "f32", "f16", "bf16",
            "i8", "i32", "int", "void", "return", "for", "while", "if", "struct", "float"]
PUNCT = ["(", ")", "[", "]", ",", ":", "+", "-", "*", "/", "<", "=", "==", "<=", "+=", "max=", "#", "\n", " "]
WEIRD = ["\u00e9", "\u03bb", "\u4e2d", "\U0001f600", "\u200b", "\u202e", "\ufeff", "\x00", "\x07", "\t", "\r",
         "\u0301", "\ufffd", "\\", "$", "@", "`", "'", '"', "\x1b[31m", "\u2028", "\U000e0041"]
HUGE = ["0", "-1", "1.5", "1e309", "99999999999999999999", "9" * 400, "2147483648", "4294967297", "65", "1e-400",
        "00000000000000000000000001", "4096", "4097", "1000000", ".5", "1e5", "7"]


# --------------------------------------------------------------------------- generators


def random_valid_program(rng: random.Random) -> str:
    """A small program that parses: library ops and comprehensions (every form) on odd shapes."""
    dims = [1, 2, 3, 4, 5, 7, 8, 16]
    lines: list[str] = []
    shapes: dict[str, list[int]] = {}

    def new(shape, role="input"):
        name = f"T{len(shapes)}"
        lines.append(f"{role} {name}: {rng.choice(['f32', 'f32', 'f16', 'bf16', 'i8', 'i32'])}"
                     f"[{', '.join(map(str, shape))}]")
        shapes[name] = list(shape)
        return name

    n, c, h, w = (rng.choice(dims) for _ in range(4))
    x4 = new([n, c, h + 2, w + 2])
    x2 = new([rng.choice(dims), rng.choice(dims)])
    for k in range(rng.randint(1, 6)):
        out = f"Y{k}"
        x = rng.choice(list(shapes))
        shape = shapes[x]
        kind = rng.randrange(9)
        idx = "ijklmn"[:len(shape)]
        if kind == 0:
            op = rng.choice(["relu", "relu6", "gelu", "sigmoid", "tanh", "exp", "softmax"])
            lines.append(f"{out} = {op}({x})")
            shapes[out] = shape
        elif kind == 1 and len(shape) == 2:
            b = new([shape[1], rng.choice(dims)], "param")
            lines.append(f"{out} = matmul({x}, {b})")
            shapes[out] = [shape[0], shapes[b][1]]
        elif kind == 2 and len(shape) == 4:
            r = rng.choice([1, 2, 3])
            wt = new([rng.choice(dims), shape[1], r, r], "param")
            pad, stride = rng.choice([0, 1, 2]), rng.choice([1, 2])
            lines.append(f"{out} = conv2d({x}, {wt}, stride={stride}, padding={pad})")
            shapes[out] = [shape[0], shapes[wt][0], (shape[2] + 2 * pad - r) // stride + 1,
                           (shape[3] + 2 * pad - r) // stride + 1]
            if min(shapes[out]) < 1:
                lines.pop()
                del shapes[out]
        elif kind == 3:
            other = new(shape, "param")
            lines.append(f"{out} = {rng.choice(['add', 'sub', 'mul'])}({x}, {other})")
            shapes[out] = shape
        elif kind == 4:
            ix = ", ".join(idx)
            fn = rng.choice(FUNCS[:7])
            lines.append(f"{out}[{ix}] = {fn}({x}[{ix}]) * {rng.choice(['2', '0.5', '-1.25'])} - {x}[{ix}]")
            shapes[out] = shape
        elif kind == 5 and len(shape) >= 2:
            lhs = ", ".join(idx[:-1])
            op = rng.choice(["+=", "max="])
            lines.append(f"{out}[{lhs}] {op} {x}[{', '.join(idx)}]")
            shapes[out] = shape[:-1]
        elif kind == 6:
            ix = ", ".join(idx)
            shifted = ", ".join(f"{v} + {rng.choice([-1, 0, 1])}" for v in idx)
            lines.append(f"{out}[{ix}] = {x}[{shifted}] + {x}[{ix}]")
            shapes[out] = shape
        elif kind == 7 and len(shape) == 1:
            lines.append(f"{out}[i, r] = {x}[i] * 2 where r < 3")
            shapes[out] = shape + [3]
        elif kind == 8 and len(shape) >= 2:
            perm = list(range(len(shape)))
            rng.shuffle(perm)
            lines.append(f"{out} = transpose({x}, perm=[{', '.join(map(str, perm))}])")
            shapes[out] = [shape[p] for p in perm]
    if not any("=" in line for line in lines):
        lines.append(f"Y = relu({x2})")
    return "\n".join(lines) + "\n"


def deep_nesting(rng: random.Random) -> str:
    depth = rng.choice([10, 60, 63, 64, 65, 100, 161, 500, 1000, 3000])
    kind = rng.randrange(6)
    if kind == 0:
        expr = "(" * depth + "X[i, j]" + ")" * depth
    elif kind == 1:
        expr = "-" * depth + "X[i, j]"
    elif kind == 2:
        expr = "exp(" * depth + "X[i, j]" + ")" * depth
    elif kind == 3:
        expr = " + ".join(["X[i, j]"] * depth)
    elif kind == 4:
        expr = " * ".join(["X[i, j]"] * depth) if depth < 700 else " - ".join(["1.5"] * depth) + " + X[i, j]"
    else:
        expr = "X[" + "i + " * depth + "0, j]"
    return f"input X: f32[4, 4]\nY[i, j] = {expr}\n"


def token_soup(rng: random.Random) -> str:
    vocab = KEYWORDS + PUNCT + OPS_ALL + FUNCS + HUGE + ["X", "Y", "i", "j", "k", "A", "B"] + WEIRD
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 80)))


def huge_numbers(rng: random.Random) -> str:
    number = rng.choice(HUGE)
    forms = [
        f"input X: f32[{number}, 4]\nY = relu(X)\n",
        f"input X: f32[1, 1, 4, 4]\ninput W: f32[1, 1, 3, 3]\nY = conv2d(X, W, {rng.choice(['padding', 'stride', 'dilation', 'groups'])}={number})\n",
        f"input X: f32[1, 2, 8, 8]\nY = maxpool2d(X, kernel={number})\n",
        f"input X: f32[4]\nY[i] = X[i + {number}]\n",
        f"input X: f32[4]\nY[i, r] = X[i] where r < {number}\n",
        f"input X: f32[4, 4]\nY = transpose(X, perm=[{number}, 0])\n",
        f"input X: f32[4, 4]\nY = softmax(X, axis={number})\n",
        f"input X: f32[4]\nY[i] = X[i] * {number}\n",
        "input X: f32[" + ", ".join([number] * rng.randint(1, 70)) + "]\nY = relu(X)\n",
        "input X: f32[" + ", ".join(["2"] * rng.randint(10, 70)) + "]\nY = relu(X)\n",
    ]
    return rng.choice(forms)


def binary_text(rng: random.Random) -> str:
    data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    return data.decode(rng.choice(["latin-1", "utf-8"]), errors="replace")


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        if not text:
            text = rng.choice(PUNCT + KEYWORDS)
        pos = rng.randrange(len(text) + 1)
        end = min(len(text), pos + rng.randint(1, 20))
        lines = text.split("\n")
        kind = rng.randrange(12)
        if kind == 0:
            text = text[:pos] + text[end:]
        elif kind == 1:
            text = text[:pos] + rng.choice(KEYWORDS + PUNCT + OPS_ALL + FUNCS) + text[pos:]
        elif kind == 2:
            text = text[:pos] + rng.choice(WEIRD) + text[pos:]
        elif kind == 3:
            import re
            numbers = list(re.finditer(r"\d+(\.\d*)?", text))
            if numbers:
                m = rng.choice(numbers)
                text = text[:m.start()] + rng.choice(HUGE) + text[m.end():]
        elif kind == 4 and len(lines) > 1:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == 5:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == 6:
            text = text[:pos]
        elif kind == 7:
            wrap = rng.choice([("(" * 200, ")" * 200), ("-" * 300, ""), ("exp(" * 100, ")" * 100)])
            text = text[:pos] + wrap[0] + text[pos:end] + wrap[1] + text[end:]
        elif kind == 8:
            text = text[:pos] + " + ".join(["X[i]"] * rng.choice([10, 200, 2000])) + text[pos:]
        elif kind == 9:
            text = text.replace(rng.choice(OPS_ALL + FUNCS + ["f32", "input", "output"]),
                                rng.choice(OPS_ALL + FUNCS + KEYWORDS), 1)
        elif kind == 10:
            text = text.replace(")", f", {rng.choice(['padding', 'stride', 'kernel', 'axis', 'perm', 'eps', 'foo'])}="
                                     f"{rng.choice(HUGE + ['[0, 1]', '[]', 'relu'])})", 1)
        else:
            text = text[:pos] + rng.choice(["\noutput " + ", ".join(f"Q{k}" for k in range(rng.choice([3, 3000]))),
                                            "\ntensor S: f32[8, 8]\nS[i, j] = X[i, j]\n", "\n\n\n", "#", "where r < 3",
                                            "\ninput Z: i8[2]\n", "[i, j]", "\n" + "\n".join(["Y = relu(X)"] * 50)]) + text[pos:]
    return text


def inputs(n: int, seed: int):
    """The fuzzer's n inputs, as (category, text), reproducible from the seed."""
    rng = random.Random(seed)
    examples = [p.read_text() for p in sorted((ROOT / "examples").glob("*.acir"))]
    for k in range(n):
        r = rng.random()
        if r < 0.30:
            yield "mutated example", mutate(rng.choice(examples), rng)
        elif r < 0.45:
            yield "mutated random program", mutate(random_valid_program(rng), rng)
        elif r < 0.60:
            yield "random program", random_valid_program(rng)
        elif r < 0.72:
            yield "token soup", token_soup(rng)
        elif r < 0.82:
            yield "deep nesting", deep_nesting(rng)
        elif r < 0.92:
            yield "huge numbers", huge_numbers(rng)
        elif r < 0.96:
            yield "unicode", "".join(rng.choice(WEIRD + PUNCT + ["X", "relu", "input"]) for _ in range(rng.randint(1, 60)))
        else:
            yield "binary", binary_text(rng)


# --------------------------------------------------------------------------- running one input


def check_one(text: str) -> tuple[str, str]:
    """(outcome, detail): 'located' / 'unlocated' user error, 'ran', 'budget', or 'traceback'."""
    from autocomp_jupyter import dsl, interp
    from autocomp_jupyter.errors import UserError
    from autocomp_jupyter.limits import check_memory_budget, check_work_budget

    try:
        dsl.parse(text)
    except UserError as err:
        located = all(d.line > 0 for d in err.diagnostics)
        err.format()  # formatting must not crash either
        return ("located" if located else "unlocated"), err.diagnostics[0].message[:200]
    except BaseException:
        return "traceback", traceback.format_exc()
    try:
        twin = dsl.scaled_twin(text, max_extent=TWIN_EXTENT)
        try:
            check_memory_budget(twin, budget=FUZZ_MEMORY)
            check_work_budget(twin, FUZZ_POINTS)
        except UserError as err:
            return "budget", err.diagnostics[0].message[:200]
        interp.run(twin)
        return "ran", ""
    except BaseException:
        return "traceback", traceback.format_exc()


def _worker(conn) -> None:
    import warnings

    warnings.simplefilter("ignore")  # overflow in f16/f32 rounding of huge constants is expected
    while True:
        text = conn.recv()
        started = time.perf_counter()
        outcome, detail = check_one(text)
        conn.send((outcome, detail, time.perf_counter() - started))


class Runner:
    """A worker process that checks inputs one by one; killed and restarted on a timeout."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.ctx = mp.get_context("fork")
        self.proc = None
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def check(self, text: str) -> tuple[str, str, float]:
        started = time.perf_counter()
        self.conn.send(text)
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        code = self.proc.exitcode
        self.close()
        self._start()
        elapsed = time.perf_counter() - started
        if code is not None:
            return "traceback", f"the worker died (exit code {code})", elapsed
        return "timeout", f"no answer within {self.timeout:g} s", elapsed

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join()


def run_fuzz(n: int, seed: int, timeout: float = 10.0, out: Path | None = None, progress: bool = False) -> dict:
    """Counts of outcomes over `n` inputs; failures (tracebacks, runs over 5 s) saved to `out`."""
    counts: Counter = Counter()
    by_category: dict[str, Counter] = {}
    failures: list[dict] = []
    runner = Runner(timeout)
    started = time.perf_counter()
    try:
        for k, (category, text) in enumerate(inputs(n, seed)):
            outcome, detail, seconds = runner.check(text)
            if seconds > SLOW_S and outcome != "timeout":
                counts["over 5 s"] += 1
                failures.append({"index": k, "category": category, "outcome": f"{outcome}, {seconds:.1f} s",
                                 "detail": detail, "text": text})
            if outcome in ("traceback", "timeout"):
                failures.append({"index": k, "category": category, "outcome": outcome, "detail": detail, "text": text})
            counts[outcome] += 1
            by_category.setdefault(category, Counter())[outcome] += 1
            if progress and (k + 1) % 1000 == 0:
                print(f"  {k + 1} inputs, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        runner.close()
    if out is not None and failures:
        out.mkdir(parents=True, exist_ok=True)
        for f in failures:
            stem = out / f"seed{seed}_input{f['index']}"
            stem.with_suffix(".acir").write_text(f["text"], errors="surrogatepass")
            stem.with_suffix(".txt").write_text(f"{f['category']}: {f['outcome']}\n\n{f['detail']}\n")
    return {"n": n, "seed": seed, "seconds": time.perf_counter() - started, "counts": dict(counts),
            "by_category": {c: dict(v) for c, v in by_category.items()},
            "failures": [{k: v for k, v in f.items() if k != "text"} for f in failures]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="inputs to try")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a worker is killed")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz_dsl",
                        help="where reproducers of failures go")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run_fuzz(args.n, args.seed, args.timeout, args.out, progress=not args.json)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    c = result["counts"]
    rows = [("user errors with a location", c.get("located", 0)),
            ("user errors without a location", c.get("unlocated", 0)),
            ("programs that ran (scaled twin)", c.get("ran", 0)),
            ("runs refused by a run budget", c.get("budget", 0)),
            ("tracebacks", c.get("traceback", 0)),
            (f"timeouts (> {args.timeout:g} s, killed)", c.get("timeout", 0)),
            ("runs over 5 s", c.get("over 5 s", 0) + c.get("timeout", 0))]
    print(f"fuzz_dsl: {args.n} inputs, seed {args.seed}, {result['seconds']:.1f} s")
    for label, value in rows:
        print(f"  {label:<36} {value:>7}")
    print("by category:")
    for category, counts in sorted(result["by_category"].items()):
        print(f"  {category:<24} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if result["failures"]:
        print(f"{len(result['failures'])} reproducers in {args.out}")
        for f in result["failures"][:10]:
            print(f"  input {f['index']} ({f['category']}): {f['outcome']}: {(f['detail'].strip().splitlines() or [''])[-1][:150]}")
    sys.exit(1 if c.get("traceback") or c.get("timeout") or c.get("over 5 s") else 0)


if __name__ == "__main__":
    main()
