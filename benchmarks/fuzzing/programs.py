"""Random valid programs for differential fuzzing of the whole pipeline (issue 17).

    gen = generate(seed)                       # a valid DSL program: gen.text, gen.kinds, gen.dtype

`generate` owns the program generator: seeded (numpy's Generator, nothing global), it emits DSL
text over every library op with its attributes, every comprehension form (`=`, `+=`, `max=`,
affine, strided and padded indices, `where` bounds, declared shapes), every dtype, and odd or
tiny shapes (1, primes, sizes no tile divides), as chains of 1-6 ops that mostly feed each
other (fusion opportunities), sometimes fan out (extra outputs) and sometimes form residual
blocks (two branches from one tensor joined by an add). A rough
magnitude estimate keeps values finite in their dtype, so a failure is the pipeline's, not
overflow noise. Sizes stay small enough that one pipeline run takes well under 2 s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DTYPES = ("f32", "f16", "bf16", "i8", "i32")
LIBRARY_KINDS = ("matmul", "batch_matmul", "linear", "linear_bias", "conv2d", "depthwise_conv2d",
                 "relu", "relu6", "gelu", "sigmoid", "tanh", "exp", "add", "sub", "mul", "bias_add",
                 "batchnorm", "layernorm", "softmax", "maxpool2d", "avgpool2d", "global_avgpool", "transpose",
                 "div", "erf", "reshape", "flatten", "concat", "gather", "scatter")
COMPREHENSION_KINDS = ("comp_map", "comp_transpose", "comp_sum", "comp_contract", "comp_max", "comp_bcast",
                       "comp_pad", "comp_stride", "comp_attention")
KINDS = LIBRARY_KINDS + COMPREHENSION_KINDS
# Contractions carry the fusion and tiling decisions: drawn more often than the rest.
_WEIGHT = {"matmul": 4, "batch_matmul": 3, "linear": 3, "linear_bias": 3, "conv2d": 4, "depthwise_conv2d": 3,
           "comp_contract": 3, "maxpool2d": 2, "avgpool2d": 2, "global_avgpool": 2}

# Dimension pool: tiny, primes, and sizes no power-of-two tile divides.
_DIMS = (1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 19, 23, 24, 29, 31, 32)
_MAX_ELEMENTS = 3072        # per tensor
_MAX_POINTS = 120_000       # per statement's iteration domain (interpreter speed)
# Largest magnitude a tensor of each dtype should reach (integers saturate by definition).
_MAGNITUDE_LIMIT = {"f32": 1e30, "bf16": 1e30, "f16": 2e3, "i8": math.inf, "i32": math.inf}
_INDEX = ("i", "j", "l", "m")


@dataclass(frozen=True)
class Generated:
    """One generated program: its DSL text, the op kinds it uses, its main dtype."""

    seed: int
    text: str
    kinds: tuple[str, ...]
    dtype: str


class _Generator:
    def __init__(self, seed: int, max_ops: int):
        self.rng = np.random.default_rng(seed)
        self.max_ops = max_ops
        self.dtype = DTYPES[int(self.rng.integers(len(DTYPES)))]
        self.decls: list[str] = []
        self.body: list[str] = []
        self.shape: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        self.mag: dict[str, float] = {}
        self.kinds: list[str] = []
        self.results: list[str] = []
        self.count = 0

    # ------------------------------------------------------------ helpers
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def dim(self, lo: int = 1, hi: int = 32) -> int:
        pool = [d for d in _DIMS if lo <= d <= hi] or [lo]
        return self.pick(pool)

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def declare(self, shape, role: str = "param", dtype: str | None = None, prefix: str = "P") -> str:
        if dtype is None:
            dtype = self.dtype if not self.chance(0.06) else self.pick(DTYPES)
        name = self.name(prefix)
        self.decls.append(f"{role} {name}: {dtype}[{', '.join(map(str, shape))}]")
        self.shape[name], self.dtypes[name], self.mag[name] = tuple(shape), dtype, 3.0
        return name

    def result(self, name: str, shape, mag: float, dtype: str) -> str:
        self.shape[name], self.dtypes[name], self.mag[name] = tuple(shape), dtype, mag
        self.results.append(name)
        return name

    def fits(self, shape) -> bool:
        return math.prod(shape) <= _MAX_ELEMENTS and all(d >= 1 for d in shape)

    def limit(self, name: str) -> float:
        return _MAGNITUDE_LIMIT[self.dtypes[name]]

    def first_shape(self) -> tuple[int, ...]:
        rank = self.pick((1, 2, 2, 2, 3, 4, 4, 4))
        if rank == 4:
            shape = (self.pick((1, 1, 2)), self.dim(1, 8), self.dim(1, 13), self.dim(1, 13))
        else:
            shape = tuple(self.dim(1, 32) for _ in range(rank))
        while not self.fits(shape):
            shape = tuple(max(1, d // 2) for d in shape)
        return shape

    @staticmethod
    def acc(name: str, idx) -> str:
        return f"{name}[{', '.join(idx)}]"

    @staticmethod
    def attrs(pairs) -> str:
        return "".join(f", {k}={v}" for k, v in pairs)

    # ------------------------------------------------------------ the program
    def build(self) -> Generated:
        x = self.declare(self.first_shape(), role="input", dtype=self.dtype, prefix="X")
        n_ops = int(self.rng.integers(1, self.max_ops + 1))
        cur = x
        for _ in range(n_ops):
            source = cur
            if self.results and self.chance(0.15):     # fan out from an earlier tensor
                source = self.pick(self.results + [x])
            if self.chance(0.12):
                made = self.residual(source)
                if made is not None:
                    cur = made
                    continue
            made = self.any_op(source)
            cur = made if made is not None else cur
        outputs = ""
        r = self.rng.random()
        if r < 0.3:
            outputs = f"output {cur}\n"
        elif r < 0.5 and len(self.results) > 1:
            extra = self.pick(self.results[:-1])
            outputs = f"output {extra}, {cur}\n" if extra != cur else f"output {cur}\n"
        text = "\n".join(self.decls + self.body) + "\n" + outputs
        return Generated(0, text, tuple(self.kinds), self.dtype)

    def any_op(self, source: str) -> str | None:
        """One op on `source`, its kind drawn by weight (a few tries: some refuse a shape)."""
        kinds = [k for k in KINDS if self.applicable(k, source)]
        weights = np.array([_WEIGHT.get(k, 1) for k in kinds], dtype=float)
        for _attempt in range(6):
            kind = kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))]
            made = getattr(self, "op_" + kind)(source)
            if made is not None:
                self.kinds.append(kind)
                return made
        return None

    def residual(self, source: str) -> str | None:
        """Two branches from `source` joined by an add, the first branch's result read by the
        add alone (a residual block): fused with its producer, the add must run after the
        second branch's kernel (found as C reading a branch unwritten on torch's ResNet-18)."""
        first = self.any_op(source)
        if first is None:
            return None
        for _attempt in range(4):
            second = self.any_op(source)
            if second is None:
                return first
            if self.shape[second] == self.shape[first] and self.dtypes[second] == self.dtypes[first]:
                mag = self.mag[first] + self.mag[second]
                if mag > self.limit(first) / 10:
                    return second
                out = self.name("T")
                self.body.append(f"{out} = add({first}, {second})")
                self.kinds.append("add")
                return self.result(out, self.shape[first], mag, self.dtypes[first])
        return first

    def applicable(self, kind: str, x: str) -> bool:
        rank = len(self.shape[x])
        need = {"matmul": (2,), "linear": (2,), "linear_bias": (2,), "batch_matmul": (3,), "conv2d": (4,),
                "depthwise_conv2d": (4,), "maxpool2d": (4,), "avgpool2d": (4,), "global_avgpool": (4,),
                "batchnorm": (2, 3, 4), "comp_sum": (2, 3, 4), "comp_max": (2, 3, 4), "comp_bcast": (2, 3, 4),
                "comp_transpose": (2, 3, 4), "transpose": (2, 3, 4), "comp_attention": (2, 3, 4)}
        if kind in need and rank not in need[kind]:
            return False
        if kind == "exp" and math.exp(min(self.mag[x], 700)) > self.limit(x):
            return False
        return True

    # ------------------------------------------------------------ contractions
    def contraction_ok(self, x: str, other_mag: float, k: int) -> float | None:
        mag = self.mag[x] * other_mag * math.sqrt(k) * 1.5
        return mag if mag < self.limit(x) / 10 else None

    def op_matmul(self, x):
        m, k = self.shape[x]
        if self.chance(0.25):  # x as the right operand
            m2 = self.dim(1, 24)
            mag = self.contraction_ok(x, 3.0, m)
            if mag is None or not self.fits((m2, k)) or m2 * m * k > _MAX_POINTS:
                return None
            p = self.declare((m2, m))
            out = self.name("T")
            self.body.append(f"{out} = matmul({p}, {x})")
            return self.result(out, (m2, k), mag, self.dtypes[p])
        n = self.dim(1, 24)
        mag = self.contraction_ok(x, 3.0, k)
        if mag is None or not self.fits((m, n)) or not self.fits((k, n)) or m * n * k > _MAX_POINTS:
            return None
        p = self.declare((k, n), role=self.pick(("param", "param", "input")))
        out = self.name("T")
        self.body.append(f"{out} = matmul({x}, {p})")
        return self.result(out, (m, n), mag, self.dtypes[x])

    def op_batch_matmul(self, x):
        b, m, k = self.shape[x]
        n = self.dim(1, 16)
        mag = self.contraction_ok(x, 3.0, k)
        if mag is None or not self.fits((b, m, n)) or not self.fits((b, k, n)) or b * m * n * k > _MAX_POINTS:
            return None
        p = self.declare((b, k, n))
        out = self.name("T")
        self.body.append(f"{out} = batch_matmul({x}, {p})")
        return self.result(out, (b, m, n), mag, self.dtypes[x])

    def _linear(self, x, bias: bool):
        m, k = self.shape[x]
        n = self.dim(1, 24)
        mag = self.contraction_ok(x, 3.0, k)
        if mag is None or not self.fits((m, n)) or not self.fits((k, n)) or m * n * k > _MAX_POINTS:
            return None
        w = self.declare((k, n))
        args = f"{x}, {w}"
        if bias:
            args += f", {self.declare((n,))}"
            mag += 3.0
        out = self.name("T")
        self.body.append(f"{out} = linear({args})")
        return self.result(out, (m, n), mag, self.dtypes[x])

    def op_linear(self, x):
        return self._linear(x, False)

    def op_linear_bias(self, x):
        return self._linear(x, True)

    def op_conv2d(self, x):
        n, c, h, w = self.shape[x]
        divisors = [g for g in range(1, c + 1) if c % g == 0]
        groups = self.pick(divisors) if self.chance(0.35) else 1
        f = groups * self.pick((1, 1, 2, 3, 4))
        r, s = self.pick((1, 1, 2, 3, 3)), self.pick((1, 2, 3, 3))
        stride = self.pick((1, 1, 1, 2, 3))
        padding = self.pick((0, 0, 1, 1, 2))
        dilation = self.pick((1, 1, 1, 2))
        ho = (h + 2 * padding - dilation * (r - 1) - 1) // stride + 1
        wo = (w + 2 * padding - dilation * (s - 1) - 1) // stride + 1
        if ho < 1 or wo < 1:
            return None
        out_shape = (n, f, ho, wo)
        k = (c // groups) * r * s
        mag = self.contraction_ok(x, 3.0, k)
        if mag is None or not self.fits(out_shape) or math.prod(out_shape) * k > _MAX_POINTS:
            return None
        wt = self.declare((f, c // groups, r, s))
        attrs = [(key, val) for key, val, default in (("stride", stride, 1), ("padding", padding, 0),
                                                      ("dilation", dilation, 1), ("groups", groups, 1))
                 if val != default or self.chance(0.2)]
        out = self.name("T")
        self.body.append(f"{out} = conv2d({x}, {wt}{self.attrs(attrs)})")
        return self.result(out, out_shape, mag, self.dtypes[x])

    def op_depthwise_conv2d(self, x):
        n, c, h, w = self.shape[x]
        r, s = self.pick((1, 2, 3, 3)), self.pick((1, 3, 3))
        stride, padding = self.pick((1, 1, 2)), self.pick((0, 1, 1, 2))
        ho, wo = (h + 2 * padding - r) // stride + 1, (w + 2 * padding - s) // stride + 1
        if ho < 1 or wo < 1:
            return None
        mag = self.contraction_ok(x, 3.0, r * s)
        if mag is None:
            return None
        wt = self.declare((c, 1, r, s))
        attrs = [(key, val) for key, val, default in (("stride", stride, 1), ("padding", padding, 0))
                 if val != default or self.chance(0.2)]
        out = self.name("T")
        self.body.append(f"{out} = depthwise_conv2d({x}, {wt}{self.attrs(attrs)})")
        return self.result(out, (n, c, ho, wo), mag, self.dtypes[x])

    # ------------------------------------------------------------ elementwise and broadcast
    def _unary(self, x, op: str, mag: float):
        out = self.name("T")
        self.body.append(f"{out} = {op}({x})")
        return self.result(out, self.shape[x], mag, self.dtypes[x])

    def op_relu(self, x):
        return self._unary(x, "relu", self.mag[x])

    def op_relu6(self, x):
        return self._unary(x, "relu6", min(self.mag[x], 6.0))

    def op_gelu(self, x):
        return self._unary(x, "gelu", self.mag[x])

    def op_sigmoid(self, x):
        return self._unary(x, "sigmoid", 1.0)

    def op_tanh(self, x):
        return self._unary(x, "tanh", 1.0)

    def op_exp(self, x):
        return self._unary(x, "exp", math.exp(min(self.mag[x], 700)))

    def _partner(self, x) -> tuple[str, tuple[int, ...]]:
        """A second operand that broadcasts with x: an existing tensor of x's shape, or a new
        one with some dimensions 1 or dropped (or, where x has a 1, widened)."""
        shape = self.shape[x]
        same = [t for t in self.results + [n for n in self.shape if n.startswith("X")]
                if t != x and self.shape[t] == shape]
        if same and self.chance(0.3):
            return self.pick(same), shape
        dims = [d if not self.chance(0.35) else 1 for d in shape]
        widened = [self.dim(2, 8) if s == 1 and self.chance(0.3) else d for d, s in zip(dims, shape)]
        if self.fits(tuple(max(a, b) for a, b in zip(widened, shape))):
            dims = widened
        drop = int(self.rng.integers(0, len(dims))) if self.chance(0.4) else 0
        dims = dims[drop:]
        role = self.pick(("param", "param", "input"))
        return self.declare(tuple(dims), role=role), tuple(dims)

    def _binary(self, x, op: str):
        y, _ = self._partner(x)
        a, b = (x, y) if self.chance(0.7) else (y, x)
        sa, sb = self.shape[a], self.shape[b]
        rank = max(len(sa), len(sb))
        pa, pb = (1,) * (rank - len(sa)) + sa, (1,) * (rank - len(sb)) + sb
        shape = tuple(max(u, v) for u, v in zip(pa, pb))
        mag = self.mag[a] * self.mag[b] if op == "mul" else self.mag[a] + self.mag[b]
        if mag > self.limit(a) / 10:
            return None
        out = self.name("T")
        self.body.append(f"{out} = {op}({a}, {b})")
        return self.result(out, shape, mag, self.dtypes[a])

    def op_add(self, x):
        return self._binary(x, "add")

    def op_sub(self, x):
        return self._binary(x, "sub")

    def op_mul(self, x):
        return self._binary(x, "mul")

    def op_bias_add(self, x):
        shape = self.shape[x]
        axis = 1 if len(shape) == 4 else len(shape) - 1
        b = self.declare((shape[axis],))
        out = self.name("T")
        self.body.append(f"{out} = bias_add({x}, {b})")
        return self.result(out, shape, self.mag[x] + 3.0, self.dtypes[x])

    def op_batchnorm(self, x):
        shape = self.shape[x]
        scale, shift = self.declare((shape[1],)), self.declare((shape[1],))
        out = self.name("T")
        self.body.append(f"{out} = batchnorm({x}, {scale}, {shift})")
        return self.result(out, shape, self.mag[x] * 3.0 + 3.0, self.dtypes[x])

    def op_layernorm(self, x):
        shape = self.shape[x]
        gamma, beta = self.declare((shape[-1],)), self.declare((shape[-1],))
        eps = self.pick(("", "", ", eps=0.001", ", eps=1e-05", ", eps=0.1"))
        out = self.name("T")
        self.body.append(f"{out} = layernorm({x}, {gamma}, {beta}{eps})")
        return self.result(out, shape, 3.0 * math.sqrt(shape[-1]) * 3.0 + 3.0, self.dtypes[x])

    def op_softmax(self, x):
        rank = len(self.shape[x])
        axis = "" if self.chance(0.3) else f", axis={int(self.rng.integers(-rank, rank))}"
        out = self.name("T")
        self.body.append(f"{out} = softmax({x}{axis})")
        return self.result(out, self.shape[x], 1.0, self.dtypes[x])

    def _pool(self, x, kind: str):
        n, c, h, w = self.shape[x]
        kernel = self.pick((1, 2, 2, 3))
        stride = self.pick((None, None, 1, 2, 3))
        padding = self.pick((0, 0, 1)) if kernel >= 2 else 0
        st = kernel if stride is None else stride
        ho, wo = (h + 2 * padding - kernel) // st + 1, (w + 2 * padding - kernel) // st + 1
        if ho < 1 or wo < 1:
            return None
        attrs = [("kernel", kernel)] if kernel != 2 or self.chance(0.5) else []
        if stride is not None:
            attrs.append(("stride", stride))
        if padding or self.chance(0.2):
            attrs.append(("padding", padding))
        out = self.name("T")
        self.body.append(f"{out} = {kind}({x}{self.attrs(attrs)})")
        return self.result(out, (n, c, ho, wo), self.mag[x], self.dtypes[x])

    def op_maxpool2d(self, x):
        return self._pool(x, "maxpool2d")

    def op_avgpool2d(self, x):
        return self._pool(x, "avgpool2d")

    def op_global_avgpool(self, x):
        n, c, _, _ = self.shape[x]
        out = self.name("T")
        self.body.append(f"{out} = global_avgpool({x})")
        return self.result(out, (n, c), self.mag[x], self.dtypes[x])

    def op_transpose(self, x):
        shape = self.shape[x]
        rank = len(shape)
        if self.chance(0.3):
            perm = tuple(reversed(range(rank)))
            text = ""
        else:
            perm = tuple(int(p) for p in self.rng.permutation(rank))
            text = f", perm=[{', '.join(map(str, perm))}]"
        out = self.name("T")
        self.body.append(f"{out} = transpose({x}{text})")
        return self.result(out, tuple(shape[p] for p in perm), self.mag[x], self.dtypes[x])

    def op_div(self, x):
        if self.dtypes[x] not in ("f32", "f16", "bf16"):
            return None     # integer division by a zero element has no value to saturate to
        shape = self.shape[x]
        d = self.declare(shape[-1:], dtype=self.dtypes[x])
        out = self.name("T")
        self.body.append(f"{out} = div({x}, {d})")
        return self.result(out, shape, self.mag[x] * 1e3, self.dtypes[x])

    def op_erf(self, x):
        return self._unary(x, "erf", 1.0)

    def op_reshape(self, x):
        """Merge two adjacent dimensions, or split one by a factor (affine either way)."""
        shape = list(self.shape[x])
        splittable = [d for d, n in enumerate(shape) if any(n % f == 0 for f in (2, 3)) and n > 3]
        if splittable and (len(shape) < 2 or self.chance(0.5)) and len(shape) < 4:
            d = self.pick(splittable)
            f = 2 if shape[d] % 2 == 0 else 3
            new = shape[:d] + [f, shape[d] // f] + shape[d + 1:]
        elif len(shape) >= 2:
            d = int(self.rng.integers(0, len(shape) - 1))
            new = shape[:d] + [shape[d] * shape[d + 1]] + shape[d + 2:]
        else:
            return None
        if self.chance(0.3):    # one -1 allowed
            new_text = [str(n) for n in new]
            new_text[int(self.rng.integers(0, len(new)))] = "-1"
        else:
            new_text = [str(n) for n in new]
        out = self.name("T")
        self.body.append(f"{out} = reshape({x}, shape=[{', '.join(new_text)}])")
        return self.result(out, tuple(new), self.mag[x], self.dtypes[x])

    def op_flatten(self, x):
        shape = self.shape[x]
        if len(shape) < 2:
            return None
        axis = int(self.rng.integers(1, len(shape)))
        new = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        out = self.name("T")
        self.body.append(f"{out} = flatten({x}, axis={axis})")
        return self.result(out, new, self.mag[x], self.dtypes[x])

    def op_concat(self, x):
        shape = self.shape[x]
        axis = int(self.rng.integers(0, len(shape)))
        extra = list(shape)
        extra[axis] = self.dim(1, 8)
        if not self.fits(tuple(n + e if d == axis else n for d, (n, e) in enumerate(zip(shape, extra)))):
            return None
        y = self.declare(tuple(extra), role=self.pick(("param", "input")))
        first, second = (x, y) if self.chance(0.6) else (y, x)
        out = self.name("T")
        self.body.append(f"{out} = concat({first}, {second}, axis={axis})")
        new = tuple(n + e if d == axis else n for d, (n, e) in enumerate(zip(shape, extra)))
        return self.result(out, new, max(self.mag[x], 3.0), self.dtypes[x])

    def op_gather(self, x):
        """X's slices along an axis named by an integer input (ONNX Gather; random ids stay
        within the axis, negative ones count from its end)."""
        shape = self.shape[x]
        axis = int(self.rng.integers(0, len(shape)))
        count = self.dim(1, 6)
        new = shape[:axis] + (count,) + shape[axis + 1:]
        if not self.fits(new):
            return None
        ids = self.declare((count,), role="input", dtype="i32", prefix="I")
        out = self.name("T")
        self.body.append(f"{out} = gather({x}, {ids}, axis={axis})")
        return self.result(out, new, self.mag[x], self.dtypes[x])

    def op_scatter(self, x):
        """X with updates written along an axis at integer positions (ONNX ScatterElements)."""
        shape = self.shape[x]
        axis = int(self.rng.integers(0, len(shape)))
        at = tuple(self.dim(1, 4) if d == axis else int(self.rng.integers(1, n + 1)) for d, n in enumerate(shape))
        idx = self.declare(at, role="input", dtype="i32", prefix="I")
        updates = self.declare(at, role=self.pick(("param", "input")), dtype=self.dtypes[x])
        out = self.name("T")
        self.body.append(f"{out} = scatter({x}, {idx}, {updates}, axis={axis})")
        return self.result(out, shape, max(self.mag[x], 3.0), self.dtypes[x])

    # ------------------------------------------------------------ comprehensions
    def expression(self, leaves: list[tuple[str, float]], depth: int, limit: float) -> tuple[str, float]:
        """A random expression over `leaves` ((text, magnitude)) with every DSL function."""
        if depth == 0 or self.chance(0.3):
            if self.chance(0.2):
                value = self.pick((0.5, 2, 3, 0.125, 1.5))
                return str(value), float(value)
            return self.pick(leaves)
        r = self.rng.random()
        if r < 0.45:
            a, ma = self.expression(leaves, depth - 1, limit)
            b, mb = self.expression(leaves, depth - 1, limit)
            op = self.pick(("+", "-", "*", "/"))
            if op == "/":
                return f"{a} / (1 + abs({b}))", ma
            if op == "*":
                return f"({a}) * ({b})", ma * mb
            return f"{a} {op} {b}", ma + mb
        a, ma = self.expression(leaves, depth - 1, limit)
        # floor is left out: it jumps by 1 where the interpreter's float64 and C's float differ
        # in the last bit. A comparison only picks between its own operands (continuous).
        fn = self.pick(("exp", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "max", "min", "neg",
                        "log", "pow", "compare"))
        if fn == "exp":
            if math.exp(min(ma, 700)) > limit / 10:
                return f"tanh({a})", 1.0
            return f"exp({a})", math.exp(min(ma, 700))
        if fn == "sqrt":
            return f"sqrt(abs({a}))", math.sqrt(ma)
        if fn in ("max", "min"):
            b, mb = self.expression(leaves, depth - 1, limit)
            return f"{fn}({a}, {b})", max(ma, mb)
        if fn == "neg":
            return f"-({a})", ma
        if fn == "log":     # log(1 + |a|): finite, at most log(1 + ma)
            return f"log(1 + abs({a}))", math.log1p(ma)
        if fn == "pow":     # |a| ^ y for y in [0, 2]: no NaN, at most max(1, ma)^2
            if max(1.0, ma) ** 2 > limit / 10:
                return f"tanh({a})", 1.0
            return f"pow(abs({a}), 1 + tanh({a}))", max(1.0, ma) ** 2
        if fn == "compare":  # select(less|less_equal|equal(a, b), a, b)
            b, mb = self.expression(leaves, depth - 1, limit)
            test = self.pick(("less", "less_equal", "equal"))
            return f"select({test}({a}, {b}), {a}, {b})", max(ma, mb)
        return f"{fn}({a})", (1.0 if fn in ("tanh", "sigmoid") else ma)

    def where(self, loops) -> str:
        """Sometimes a `where` relation between two of `loops` (`j <= i + 1`): the statement's
        domain cut to it (an `=` statement's elements outside are 0, a sum skips them)."""
        loops = list(loops)
        if len(loops) < 2 or not self.chance(0.25):
            return ""
        a, b = (loops[int(k)] for k in self.rng.choice(len(loops), 2, replace=False))
        shift = int(self.rng.integers(-1, 3))
        return f" where {a} <= {b}" + (f" + {shift}" if shift > 0 else f" - {-shift}" if shift < 0 else "")

    def op_comp_map(self, x):
        shape = self.shape[x]
        idx = _INDEX[:len(shape)]
        leaves = [(self.acc(x, idx), self.mag[x])]
        if self.chance(0.2):       # an index read as a number
            leaves.append((f"{self.pick(idx)} * 0.5", max(shape) * 0.5))
        if self.chance(0.5):  # a vector broadcast along one axis
            axis = int(self.rng.integers(len(shape)))
            v = self.declare((shape[axis],))
            leaves.append((self.acc(v, (idx[axis],)), 3.0))
        expr, mag = self.expression(leaves, 3, self.limit(x))
        if x not in expr:
            expr = f"{expr} + {self.acc(x, idx)}"
            mag += self.mag[x]
        if mag > self.limit(x) / 10:
            return None
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(idx)}] = {expr}{self.where(idx)}")
        return self.result(out, shape, mag, self.dtypes[x])

    def op_comp_transpose(self, x):
        shape = self.shape[x]
        idx = _INDEX[:len(shape)]
        perm = [int(p) for p in self.rng.permutation(len(shape))]
        lhs = [idx[p] for p in perm]
        scale = self.pick(("", " * 2", " + 1"))
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(lhs)}] = {self.acc(x, idx)}{scale}")
        return self.result(out, tuple(shape[p] for p in perm), self.mag[x] * 2 + 1, self.dtypes[x])

    def _reduce_axis(self, x) -> tuple[list[str], list[str], int]:
        shape = self.shape[x]
        idx = list(_INDEX[:len(shape)])
        axis = int(self.rng.integers(len(shape)))
        lhs = [i for d, i in enumerate(idx) if d != axis]
        return idx, lhs, axis

    def op_comp_sum(self, x):
        idx, lhs, axis = self._reduce_axis(x)
        shape = self.shape[x]
        mag = self.mag[x] * shape[axis]
        if mag > self.limit(x) / 10:
            return None
        factor = self.pick(("", " * 0.5", f" * {1 / shape[axis]:.6g}"))
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(lhs)}] += {self.acc(x, idx)}{factor}{self.where(idx)}")
        return self.result(out, tuple(d for k, d in enumerate(shape) if k != axis), mag, self.dtypes[x])

    def op_comp_contract(self, x):
        shape = self.shape[x]
        idx = list(_INDEX[:len(shape) - 1]) + ["k"]
        n = self.dim(1, 16)
        out_shape = shape[:-1] + (n,)
        mag = self.contraction_ok(x, 3.0, shape[-1])
        if mag is None or not self.fits(out_shape) or math.prod(out_shape) * shape[-1] > _MAX_POINTS:
            return None
        p = self.declare((shape[-1], n))
        lhs = idx[:-1] + ["q"]
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(lhs)}] += {self.acc(x, idx)} * {p}[k, q]{self.where(lhs + ['k'])}")
        return self.result(out, out_shape, mag, self.dtypes[x])

    def op_comp_max(self, x):
        idx, lhs, axis = self._reduce_axis(x)
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(lhs)}] max= {self.acc(x, idx)}")
        return self.result(out, tuple(d for k, d in enumerate(self.shape[x]) if k != axis), self.mag[x],
                           self.dtypes[x])

    def op_comp_bcast(self, x):
        """The softmax pattern spelled out: a max (or sum) over an axis, then its broadcast back."""
        idx, lhs, axis = self._reduce_axis(x)
        shape = self.shape[x]
        red = self.name("T")
        if self.chance(0.5):
            self.body.append(f"{red}[{', '.join(lhs)}] max= {self.acc(x, idx)}")
            self.result(red, tuple(d for k, d in enumerate(shape) if k != axis), self.mag[x], self.dtypes[x])
            out = self.name("T")
            self.body.append(f"{out}[{', '.join(idx)}] = exp({self.acc(x, idx)} - {self.acc(red, lhs)})")
            return self.result(out, shape, 1.0, self.dtypes[x])
        self.body.append(f"{red}[{', '.join(lhs)}] += {self.acc(x, idx)}")
        self.result(red, tuple(d for k, d in enumerate(shape) if k != axis), self.mag[x] * shape[axis],
                    self.dtypes[x])
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(idx)}] = {self.acc(x, idx)} - {self.acc(red, lhs)} * 0.25")
        return self.result(out, shape, self.mag[x] * (1 + shape[axis] / 4), self.dtypes[x])

    def op_comp_attention(self, x):
        """Attention over `x` as queries [.., n, d]: scores against new keys, a softmax (the
        library op, or spelled out with its scale in one of the forms people write) and the
        weighted sum of new values; keys shared across heads now and then (multi-query)."""
        shape = self.shape[x]
        if len(shape) < 2 or len(shape) > 4 or self.dtypes[x] in ("i8", "i32"):
            return None
        batch = ["b", "c"][:len(shape) - 2]
        n, d = shape[-2], shape[-1]
        m, e = self.dim(2, 32), self.dim(1, 16)
        heads = tuple(shape[:-2])
        shared = bool(batch) and self.chance(0.3)
        k_shape = ((m, d) if shared else heads + (m, d))
        v_shape = ((m, e) if shared else heads + (m, e))
        if not (self.fits(heads + (n, m)) and self.fits(k_shape) and self.fits(v_shape) and self.fits(heads + (n, e))):
            return None
        if math.prod(heads + (n, m, max(d, e))) > _MAX_POINTS:
            return None
        mag = self.contraction_ok(x, 3.0, d)
        if mag is None:
            return None
        K = self.declare(k_shape, dtype=self.dtypes[x])
        V = self.declare(v_shape, dtype=self.dtypes[x])
        kv = [] if shared else batch
        S, M, E, Z, P, O = (self.name("T") for _ in range(6))
        rows, keys = batch + ["i"], batch + ["i", "j"]
        self.body.append(f"{S}[{', '.join(keys)}] += {self.acc(x, batch + ['i', 'k'])} * {self.acc(K, kv + ['j', 'k'])}")
        c = self.pick((1.0, 0.5, 0.125, 0.37))
        if self.chance(0.3):
            self.body.append(f"{P} = softmax({S})")
        else:
            s_, m_ = self.acc(S, keys), self.acc(M, rows)
            form = self.pick((f"exp(({s_} - {m_}) * {c:g})", f"exp({s_} * {c:g} - {m_} * {c:g})",
                              f"exp({c:g} * {s_} - {c:g} * {m_})"))
            self.body.append(f"{M}[{', '.join(rows)}] max= {s_}")
            self.body.append(f"{E}[{', '.join(keys)}] = {form}")
            self.body.append(f"{Z}[{', '.join(rows)}] += {self.acc(E, keys)}")
            self.body.append(f"{P}[{', '.join(keys)}] = {self.acc(E, keys)} / {m_.replace(M, Z)}")
            for t, sh in ((M, heads + (n,)), (E, heads + (n, m)), (Z, heads + (n,))):
                self.result(t, sh, 1.0, self.dtypes[x])
        self.result(S, heads + (n, m), mag, self.dtypes[x])
        self.result(P, heads + (n, m), 1.0, self.dtypes[x])
        self.body.append(f"{O}[{', '.join(batch + ['i', 'q'])}] += {self.acc(P, keys)} * {self.acc(V, kv + ['j', 'q'])}")
        return self.result(O, heads + (n, e), 3.0, self.dtypes[x])    # a weighted mean of V

    def op_comp_pad(self, x):
        """A 1-D window along the last axis with implicit zero padding: `i + r - p`."""
        shape = self.shape[x]
        idx = list(_INDEX[:len(shape)])
        n = shape[-1]
        window = self.pick((2, 3, 3, 5))
        pad = int(self.rng.integers(0, window))
        n_out = n + 2 * pad - window + 1
        if n_out < 1:
            return None
        last = idx[-1]
        src = idx[:-1] + [f"{last} + r - {pad}" if pad else f"{last} + r"]
        out = self.name("T")
        out_shape = shape[:-1] + (n_out,)
        reduce = self.pick(("+=", "+=", "max="))
        if reduce == "+=" and self.chance(0.6):
            w = self.declare((window,))
            expr = f"{self.acc(x, src)} * {w}[r]"
            bounds = [] if self.chance(0.5) else [f"r < {window}"]
            mag = self.mag[x] * 3.0 * window
        else:
            expr = self.acc(x, src)
            bounds = [f"r < {window}"]
            mag = self.mag[x] * window
        if mag > self.limit(x) / 10:
            return None
        if self.chance(0.5):
            self.decls.append(f"tensor {out}: {self.dtypes[x]}[{', '.join(map(str, out_shape))}]")
        else:
            bounds.append(f"{last} < {n_out}")
        where = f" where {self.pick((', ', ' and ')).join(bounds)}" if bounds else ""
        self.body.append(f"{out}[{', '.join(idx)}] {reduce} {expr}{where}")
        return self.result(out, out_shape, mag, self.dtypes[x])

    def op_comp_stride(self, x):
        """A strided window along the last axis: `2*i + r` (pooling spelled out)."""
        shape = self.shape[x]
        idx = list(_INDEX[:len(shape)])
        n = shape[-1]
        stride, window = self.pick((2, 2, 3)), self.pick((1, 2, 3))
        if n < window:
            return None
        n_out = (n - window) // stride + 1
        last = idx[-1]
        term = self.pick((f"{stride}*{last} + r", f"{last}*{stride} + r", f"r + {stride} * {last}"))
        reduce = self.pick(("max=", "+="))
        out = self.name("T")
        self.body.append(f"{out}[{', '.join(idx)}] {reduce} {self.acc(x, idx[:-1] + [term])} "
                         f"where r < {window}, {last} < {n_out}")
        return self.result(out, shape[:-1] + (n_out,), self.mag[x] * window, self.dtypes[x])


def generate(seed: int, max_ops: int = 6) -> Generated:
    """A random valid program, the same for the same seed."""
    gen = _Generator(seed, max_ops).build()
    return Generated(seed, gen.text, gen.kinds, gen.dtype)
