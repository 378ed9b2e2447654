"""The tuning progress bar: the `progress=` callback `optimize()` calls.

`optimize(progress=bar)` calls `bar(done, total, best_time_s)` as configurations are
evaluated. The bar appears on the first call only (a rules-only run shows none), updates
at most every 0.1 s, and `close()` removes it once the result is shown.
"""
from __future__ import annotations

import time

from .fmt import seconds


class TuningProgress:
    def __init__(self, widgets: bool = True, min_interval_s: float = 0.1):
        self.widgets = widgets
        self.min_interval_s = min_interval_s
        self._bar = None
        self._label = None
        self._box = None
        self._handle = None
        self._last = 0.0
        self.calls = 0

    def _text(self, done: int, total: int, best_time_s: float | None) -> str:
        best = f", best {seconds(best_time_s)}" if best_time_s else ""
        return f"tuning: {done}/{total} configurations{best}"

    def __call__(self, done: int, total: int, best_time_s: float | None = None) -> None:
        from IPython.display import display

        self.calls += 1
        now = time.monotonic()
        if self._box is None and self._handle is None:
            if self.widgets:
                import ipywidgets as W

                self._bar = W.IntProgress(value=0, min=0, max=max(1, total), description="tuning",
                                          bar_style="info")
                self._label = W.Label()
                self._box = W.HBox([self._bar, self._label])
                display(self._box)
            else:
                self._handle = display(self._text(done, total, best_time_s), display_id=True)
        elif done < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        if self._bar is not None:
            self._bar.max = max(1, total)
            self._bar.value = min(done, total)
            self._label.value = self._text(done, total, best_time_s).removeprefix("tuning: ")
        elif self._handle is not None:
            self._handle.update(self._text(done, total, best_time_s))

    def close(self) -> None:
        if self._box is not None:
            self._box.close()
            self._box = None
