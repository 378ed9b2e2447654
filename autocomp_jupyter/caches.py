"""Every cache of the package, registered in one place: `clear_all()` empties them all.

Two kinds: `LRU`, the bounded value-keyed map the modules keep verdicts in (isl verdicts,
tiling searches, library schedules, tiled-run checks, costs by canonical schedule), and
`cached(name, maxsize)`, `functools.lru_cache` for functions of hashable arguments (isl
parses, polyhedra, cost-model instances). Benchmarks timing a cold start and tests counting
work call `clear_all()`; `stats()` says how much work each cache saved.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict

_REGISTRY: list["LRU"] = []


def hash_once(self) -> int:
    """`__hash__` for an immutable dataclass that keys the caches (a kernel, a target): the
    hash of its compared fields, computed once and kept on the object. A class takes it with
    `__hash__ = hash_once` and `__getstate__ = state_without_hash` in its body."""
    cached = self.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare))
        object.__setattr__(self, "_hash", cached)
    return cached


def state_without_hash(self) -> dict:
    """The object's state for pickling, without `hash_once`'s memo: string hashes differ
    between processes (an executor's workers), so each process hashes again."""
    state = dict(self.__dict__)
    state.pop("_hash", None)
    return state


class LRU:
    """A bounded least-recently-used map keyed by value, with hit/miss counts."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self.data: OrderedDict = OrderedDict()
        self.hits = self.misses = 0
        _REGISTRY.append(self)

    def get(self, key, default=None):
        if key in self.data:
            self.data.move_to_end(key)
            self.hits += 1
            return self.data[key]
        self.misses += 1
        return default

    def put(self, key, value) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)

    def new_since(self, keys: set) -> list:
        """[(key, value)] of the entries whose key is not in `keys` (a worker's new entries,
        sent back to the process that asked: `workers`)."""
        return [(k, v) for k, v in self.data.items() if k not in keys]

    def absorb(self, entries) -> None:
        """Take another process's entries: those this cache lacks, and for a dict it holds
        already (a memo of scores filled as a search goes), the items it lacks."""
        for key, value in entries:
            mine = self.data.get(key)
            if mine is None:
                self.put(key, value)
            elif isinstance(mine, dict) and isinstance(value, dict):
                for k, v in value.items():
                    mine.setdefault(k, v)

    def of(self, obj, extra, make):
        """The value kept for the object `obj`, by identity, and `extra` (hashable), made by
        `make()` the first time. For objects compared by value at great cost (a program of a
        thousand ops) that a pass asks about again and again: the entry holds `obj` itself, so
        the id it is keyed on is not reused by another object while the entry lives."""
        key = (id(obj), extra)
        hit = self.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = make()
        self.put(key, (obj, value))
        return value

    def __contains__(self, key) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data.clear()
        self.hits = self.misses = 0


_FUNCTIONS: list[tuple[str, object]] = []   # (name, functools.lru_cache-wrapped function)


def cached(name: str, maxsize: int):
    """`functools.lru_cache(maxsize)`, registered here under `name` so that `clear_all`
    empties it with the others (for functions of hashable arguments: isl texts, kernels)."""
    def wrap(fn):
        memo = functools.lru_cache(maxsize=maxsize)(fn)
        _FUNCTIONS.append((name, memo))
        return memo
    return wrap


def named(name: str) -> LRU:
    """The registered LRU called `name` (KeyError where there is none)."""
    for cache in _REGISTRY:
        if cache.name == name:
            return cache
    raise KeyError(name)


def clear_all() -> None:
    """Empty every cache of the package: the canonical-form LRUs (library schedules, isl
    verdicts, searches, checks) and the `cached` functions (isl parses, polyhedra)."""
    for cache in _REGISTRY:
        cache.clear()
    for _, memo in _FUNCTIONS:
        memo.cache_clear()


def stats() -> dict[str, dict[str, int]]:
    """{cache name: {entries, hits, misses}}: how much work the caches saved."""
    out = {c.name: {"entries": len(c), "hits": c.hits, "misses": c.misses} for c in _REGISTRY}
    for name, memo in _FUNCTIONS:
        info = memo.cache_info()
        out[name] = {"entries": info.currsize, "hits": info.hits, "misses": info.misses}
    return out
