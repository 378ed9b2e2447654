"""The course's solutions, kept out of the students' notebooks.

Every exercise cell in `tutorials/NN_*.ipynb` ships blank: it starts with `# your answer:` and
assigns `...` to the names its CHECK cell reads. `tutorials/solutions/NN_*.py` holds one block
per exercise, headed `# %% cell ID: names`, where ID is the exercise cell's notebook id.

    python tutorials/solutions/fill.py [--out build/solutions]

writes every notebook with its exercise cells replaced by the solutions (for instructors);
`tests/test_tutorials.py` runs the notebooks both ways with `filled()` and `execute()`. The blank
run's executed copy goes to build/tutorials/ (`executed_path`), stamped with `source_key`, and the
documentation renders it (docs/hooks.py), so the site shows what a student sees after Run All.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TUTORIALS = HERE.parent
ROOT = TUTORIALS.parent
EXECUTED = ROOT / "build" / "tutorials"
BLOCK = re.compile(r"^# %% cell (\S+?):.*$", re.M)
EXERCISE = "# your answer:"


def solutions(stem: str) -> dict[str, str]:
    """{cell id: solution source} for tutorial `stem` (e.g. '02_fusion_and_rules')."""
    path = HERE / f"{stem}.py"
    if not path.exists():
        return {}
    text = path.read_text()
    heads = list(BLOCK.finditer(text))
    return {m.group(1): text[m.end():(heads[i + 1].start() if i + 1 < len(heads) else len(text))].strip("\n")
            for i, m in enumerate(heads)}


def exercise_ids(nb) -> list[str]:
    """The ids of the notebook's exercise cells, in order."""
    return [c.id for c in nb.cells if c.cell_type == "code" and c.source.startswith(EXERCISE)]


def filled(nb, stem: str):
    """A copy of notebook `nb` (tutorial `stem`) with every exercise cell replaced by its solution.
    Raises KeyError naming an exercise without a solution, or a solution without an exercise."""
    answers = solutions(stem)
    ids = exercise_ids(nb)
    missing, orphans = [i for i in ids if i not in answers], [i for i in answers if i not in ids]
    if missing or orphans:
        raise KeyError(f"{stem}: exercise cells without a solution {missing}, solutions without a cell {orphans}")
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "code" and cell.id in answers:
            cell.source = answers[cell.id]
    return out


def source_key(path: Path) -> str:
    """What an executed copy of tutorial `path` depends on besides the package: the notebook
    and checks.py (a copy whose stamp differs is stale)."""
    digest = hashlib.sha256(Path(path).read_bytes())
    digest.update((TUTORIALS / "checks.py").read_bytes())
    return digest.hexdigest()


def executed_path(path: Path) -> Path:
    """Where the blank run's executed copy of tutorial `path` is kept."""
    return EXECUTED / Path(path).name


def fresh_executed(path: Path):
    """The executed copy of tutorial `path` if it is up to date, else None."""
    import nbformat

    copy_path = executed_path(path)
    if not copy_path.exists():
        return None
    nb = nbformat.read(copy_path, as_version=4)
    return nb if nb.metadata.get("autocomp_course", {}).get("source_key") == source_key(path) else None


def execute(nb, workdir: Path, timeout: int = 300):
    """Execute notebook `nb` in a kernel whose working directory is `workdir` (a scratch copy of
    tutorials/ holding checks.py, so the files a notebook writes stay out of the tree), importing
    this checkout's package. Returns the notebook with its outputs; raises CellExecutionError
    naming the cell on any error."""
    from nbclient import NotebookClient

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(TUTORIALS / "checks.py", workdir / "checks.py")
    kernel_path()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def execute_blank_then_solved(nb, stem: str, workdir: Path, timeout: int = 300):
    """Run notebook `nb` (blank) as `execute` does, then, in the same kernel, each exercise's
    solution followed by its CHECK cell again: (the blank run, as `execute` returns it, and
    the verdict each CHECK gave the solution, in order). One kernel instead of a second Run
    All: the notebook's slow cells (optimisations, sweeps) run once. Each CHECK cell follows
    its exercise cell directly, so a solution is checked in the state its CHECK sees."""
    import nbformat

    answers = solutions(stem)
    ids = exercise_ids(nb)
    if sorted(ids) != sorted(answers):
        filled(nb, stem)                 # raises naming the exercise or solution left over
    run = copy.deepcopy(nb)
    blank = len(run.cells)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.id in answers:
            check = next((c for c in nb.cells[i + 1:] if c.cell_type == "code" and c.source.startswith("# CHECK")),
                         None)
            run.cells.append(nbformat.v4.new_code_cell(answers[cell.id]))
            if check is not None:
                run.cells.append(nbformat.v4.new_code_cell(check.source))
    execute(run, workdir, timeout)
    solved = check_lines(nbformat.v4.new_notebook(cells=run.cells[blank:]))
    run.cells = run.cells[:blank]
    return run, solved


def kernel_path() -> None:
    """Kernels started from here import this checkout's package: it goes first on PYTHONPATH
    (set once for the process, so notebooks may run side by side in threads)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])


def save_executed(nb, path: Path) -> Path:
    """Keep the blank run `nb` of tutorial `path` for the documentation (written atomically)."""
    import nbformat

    nb.metadata["autocomp_course"] = {"source_key": source_key(path)}
    out = executed_path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(out)
    return out


def check_lines(nb) -> list[str]:
    """The one-line verdict each CHECK cell printed, in order."""
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("# CHECK"):
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            lines.append(text.strip())
    return lines


def main(argv=None) -> int:
    import nbformat

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(TUTORIALS.parent / "build" / "solutions"),
                    help="where to write the filled-in notebooks (default build/solutions)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb")):
        nb = filled(nbformat.read(path, as_version=4), path.stem)
        nbformat.write(nb, out / path.name)
        print(f"wrote {out / path.name}")
    (out / "checks.py").write_text((TUTORIALS / "checks.py").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
