"""Legality of genomes, asked of isl lazily and predicted while every verdict agrees
(`_Legality`; the search's step 3 in the package docstring)."""
from __future__ import annotations

import time

import numpy as np

from .. import poly
from ..caches import LRU
from ..canon import canonical_kernel
from ..ir.loopnest import loop_dims, lower
from ..ir.schedule import Schedule
from .constants import PREDICT_LEGALITY
from ..accel.search_space import SearchSpace


# --------------------------------------------------------------------------- legality


# Verdicts outlive one tune_plan call: notebooks re-run cells, the Tune tab re-tunes.
LEGALITY_CACHE_SIZE = 20000
_LEGALITY_CACHE = LRU("tune.legality", LEGALITY_CACHE_SIZE)


class _Legality:
    """Legality per loop orders of one kernel, asked of poly once per orders.

    poly checks parallel loops one by one (a loop is parallel iff it carries no
    dependence), so one check with every loop marked parallel tells both whether the
    orders are legal and which loops may run in parallel under them.

    Prediction. A search asks about a new loop nest every few candidates, but the verdicts
    of one kernel rarely differ: on a network's per-op and fused kernels every nest the
    searches try is legal, with the same parallel loops (reductions reorderable). So, while
    every verdict this search has obtained agrees — orders legal, one set of parallel loops
    — a nest it has not asked about is *predicted* to have that verdict: it may enter the
    population on the prediction, but it becomes a result (a version, the best time) only
    once poly has checked it (`exact`), and the population's leader is checked every
    generation until CONFIRMED_VERDICTS nests agree. A checked verdict that disagrees (there,
    or when results are taken) ends prediction for the search: from then
    on every nest is checked before it enters the population, as without prediction.
    Predictions and checks depend only on what this search asked (never on which verdicts
    other searches left in the shared cache), so the search is deterministic.
    """

    def __init__(self, space: SearchSpace, predict: bool | None = None):
        self.space = space
        self.cache = _LEGALITY_CACHE
        self.asked: dict = {}      # nest key -> verdict, for the nests this search asked about
        self.seconds = 0.0
        self.predicting = PREDICT_LEGALITY if predict is None else predict
        self._agreed: tuple | None = None   # (True, may) every verdict asked so far agrees on
        self._plain = _plain_verdict(space)  # every nest's verdict, where the kernel's shape decides it

    def _key(self, tiles, orders) -> bytes:
        # Which loops iterate at which level shapes the nest (fission, tile loops), so it is
        # part of the key; the sizes themselves do not change what depends on what.
        extents = np.array([l.extent for l in self.space.kernel.loops])
        enclosing = np.concatenate([extents[:, None], np.asarray(tiles)[:, :-1]], axis=1)
        iterates = np.asarray(tiles) < enclosing
        return np.asarray(orders, dtype=np.int64).tobytes() + iterates.tobytes()

    def verdict(self, tiles, orders) -> tuple[bool, np.ndarray]:
        """(orders legal, bool [D]: loops that may be parallel under them), from poly (or from the
        kernel's shape, `_plain_verdict`)."""
        nest = self._key(tiles, orders)
        found = self.asked.get(nest)
        if found is not None:
            return found
        found = self._plain if self._plain is not None else self._from_poly(tiles, orders, nest)
        self.asked[nest] = found
        if self._agreed is None:
            self._agreed = found
        if not found[0] or not np.array_equal(found[1], self._agreed[1]):
            self.predicting = False          # the verdicts differ: check every nest from now on
        return found

    def _from_poly(self, tiles, orders, nest: bytes) -> tuple[bool, np.ndarray]:
        # Keyed by the kernel's canonical form: a network's repeated layers share verdicts.
        key = (canonical_kernel(self.space.kernel), poly._isl_names_ok(self.space.kernel), self.space.levels, nest)
        found = self.cache.get(key)
        if found is None:
            started = time.perf_counter()
            sp = self.space
            D = sp.D
            schedule = sp.schedule(tiles, orders, np.ones(D, dtype=bool), -1, fit_unroll=False)
            verdict = poly.check_schedule(schedule)
            refused = {v.loop for v in verdict.violated if v.loop is not None}
            order_ok = not any(v.loop is None for v in verdict.violated)
            nest_loops = lower(schedule)
            may = np.array([not (set(loop_dims(nest_loops, name)) & refused) for name in sp.kernel.loop_names])
            found = (order_ok, may)
            self.cache.put(key, found)
            self.seconds += time.perf_counter() - started
        return found

    def judge(self, tiles, orders, exact: bool) -> tuple[tuple[bool, np.ndarray], bool]:
        """(verdict, whether it is a prediction): poly's verdict if this search asked it (or
        `exact`, or prediction is off), else the verdict every one asked so far agrees on."""
        if not exact and self.predicting and self._agreed is not None:
            nest = self._key(tiles, orders)
            if nest not in self.asked:
                return self._agreed, True
        return self.verdict(tiles, orders), False

    def ok(self, tiles, orders, parallel, vectorize, exact: bool = True) -> bool:
        return self.admits(tiles, orders, parallel, exact)[0]

    def admits(self, tiles, orders, parallel, exact: bool) -> tuple[bool, bool]:
        """(legal, predicted) for a candidate: its orders' verdict, and its parallel marks
        within the loops that verdict lets run in parallel."""
        (order_ok, may), predicted = self.judge(tiles, orders, exact)
        return order_ok and not np.any(np.asarray(parallel, dtype=bool) & ~may), predicted


def _plain_verdict(space: SearchSpace) -> tuple[bool, np.ndarray] | None:
    """The verdict of any nest of the space, where its kernel's schedules are legal by its
    shape (`poly.policy._plainly_legal`) and its points run no loop skewed or reversed (the
    incumbent's, which every point keeps): every order legal, and exactly the output loops
    (and the loops of length 1) free to run in parallel, since a reduction loop of length > 1
    carries its updates at whichever of its tile or point loops two of them first differ.
    None for any other space (isl decides)."""
    from ..poly.policy import _plain_output_loops

    kernel = space.kernel
    outputs = _plain_output_loops(kernel)
    if outputs is None or (space.incumbent is not None and space.incumbent.affine_points):
        return None
    return True, np.array([name in outputs for name in kernel.loop_names])


def legal(schedule: Schedule) -> bool:
    """poly's verdict on a tiled schedule (as the pipeline asks it)."""
    return poly.check_schedule(schedule).ok


