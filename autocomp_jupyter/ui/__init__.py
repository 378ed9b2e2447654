"""Notebook views of a Result: live ipywidgets tabs and the same content as static HTML.

    ui.show(result)                  # the widget (Graph, Tiles, Schedule, Profile, Rules, Tune, Code)
    ui.show(result, static=True)     # HTML + inline SVG only (what nbconvert/GitHub show)
    ui.static_html(result) -> str    # used by Result._repr_html_ and %%autocomp --static
    ui.widget(result) -> ResultView  # the view object, e.g. to drive its sliders
    ui.view(result, static=...)      # what show() displays (for display in a given output slot)

Renderers are pure functions of the Result: graph.py (DOT/SVG), roofline.py (SVG plot),
tables.py (each tab's HTML), html.py (the static page), live.py (the live widget), tune_panel.py
(the Tune tab) and playground.py (its controls, from the schedule primitives' decisions),
compare.py (versions and the A/B), names.py (short kernel names for display), progress.py
(the tuning progress bar).
"""
from __future__ import annotations

from .html import TABS, static_html, tab_contents
from .progress import TuningProgress

__all__ = ["show", "view", "static_html", "widget", "tab_contents", "TABS", "TuningProgress"]


def widget(result, code: str = "pseudo", first_tab: str = "Graph"):
    """The live view (needs ipywidgets)."""
    from .live import ResultView

    return ResultView(result, code=code, first_tab=first_tab)


def view(result, static: bool = False, code: str = "pseudo", first_tab: str = "Graph"):
    """The displayable object: static HTML when `static`, else the widget, whose output
    carries the same static HTML for wherever the widget cannot render (live.py)."""
    if static:
        from IPython.display import HTML

        return HTML(static_html(result, code))
    return widget(result, code=code, first_tab=first_tab)


def show(result, static: bool = False, code: str = "pseudo", first_tab: str = "Graph") -> None:
    """Display `result` in the notebook: the widget, or static HTML when `static`."""
    from IPython.display import display

    shown = view(result, static=static, code=code, first_tab=first_tab)
    handle = display(shown, display_id=True)
    if hasattr(shown, "attach_display") and handle is not None:
        shown.attach_display(handle.display_id)  # keeping a version updates this output
