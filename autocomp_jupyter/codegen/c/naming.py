"""C identifiers for DSL names (`Namer`): C keywords, names the generated file or its headers
define (`RESERVED`), invalid characters, leading digits and collisions all give distinct,
valid identifiers, stable for a given call order. Every name a writer introduces comes from
the kernel's Namer, so the order in which a writer asks for names is part of its output.
"""
from __future__ import annotations

import re

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn
_Static_assert _Thread_local bool true false NULL asm typeof
""".split())
# Identifiers the generated file or its headers define: never reused for DSL names.
RESERVED = frozenset("""
buffers seconds program_run program_run_profiled program_kernel_names ac_now main errno
exp expf sqrt sqrtf tanh tanhf fabs fabsf fmax fmaxf fmin fminf
INFINITY NAN HUGE_VAL size_t ptrdiff_t timespec clock_gettime memset malloc free aligned_alloc madvise
""".split())


class Namer:
    """Gives each DSL name a distinct, valid C identifier (stable for a given call order)."""

    def __init__(self, taken=()):
        self.taken: set[str] = set(taken)
        self.names: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name in self.names:
            return self.names[name]
        self.names[name] = self.fresh(name)
        return self.names[name]

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if base[0].isdigit() or base.startswith("_") or base.startswith("ac_") or base.startswith("AC_"):
            base = "v_" + base.lstrip("_")
        if base in C_KEYWORDS or base in RESERVED or base.startswith("kernel_"):
            base = base + "_"
        candidate, n = base, 2
        while candidate in self.taken:
            candidate, n = f"{base}_{n}", n + 1
        self.taken.add(candidate)
        return candidate

    def child(self) -> "Namer":
        """A scope that sees (and avoids) every name taken so far."""
        return Namer(self.taken)
