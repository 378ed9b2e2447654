"""The tuning progress bar: the `progress=` callback `optimize()` calls, and the output slot
the result then takes.

`optimize(progress=bar)` calls `bar(done, total, best_time_s)` as configurations are
evaluated. The bar appears on the first call only (a rules-only run shows none) and
updates at most every 0.1 s. It is displayed with a display id; `bar.show(obj)` then
displays the result *in the bar's place* (an update of that output), so the saved
notebook holds the result and no leftover progress output — no widget view whose model
is gone when the notebook is reopened. `close()` empties the slot if nothing took it.
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
        self._handle = None  # the DisplayHandle of the bar's output, until something takes its place
        self._last = 0.0
        self.calls = 0

    def _text(self, done: int, total: int, best_time_s: float | None) -> str:
        best = f", best {seconds(best_time_s)}" if best_time_s else ""
        return f"tuning: {done}/{total} configurations{best}"

    def __call__(self, done: int, total: int, best_time_s: float | None = None) -> None:
        from IPython.display import display

        self.calls += 1
        now = time.monotonic()
        if self._box is None and self._handle is None and self.calls == 1:
            if self.widgets:
                import ipywidgets as W

                self._bar = W.IntProgress(value=0, min=0, max=max(1, total), description="tuning",
                                          bar_style="info")
                self._label = W.Label()
                self._box = W.HBox([self._bar, self._label])
                self._handle = display(self._box, display_id=True)
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

    @property
    def shown(self) -> bool:
        """True while the bar's output is on screen (nothing has taken its place yet)."""
        return self._handle is not None

    def show(self, obj, raw: bool = False) -> None:
        """Display `obj` in the bar's place, or as a new output when no bar is shown."""
        from IPython.display import display

        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.update(obj, raw=raw)
            self._close_widgets()
        else:
            handle = display(obj, raw=raw, display_id=True)
        if hasattr(obj, "attach_display") and handle is not None:
            obj.attach_display(handle.display_id)  # the result view updates its output (kept versions)

    def close(self) -> None:
        """Remove the bar: an empty output (no MIME type, so nothing renders or is saved as a view)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.update({}, raw=True)
        self._close_widgets()

    def _close_widgets(self) -> None:
        if self._box is not None:
            for w in (self._bar, self._label, self._box):
                w.close()
            self._box = self._bar = self._label = None
