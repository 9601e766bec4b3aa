"""The notebooks as committed (cell ids, no outputs) and their execution without warnings: a clean
``make run`` prints none (nbformat's ``MissingIDFieldWarning``, ipykernel's "Kernel is running over
TCP without encryption")."""
from __future__ import annotations

import warnings
from pathlib import Path

import nbformat
import papermill
import pytest
from traitlets.config import Config

from perfkit.paths import NOTEBOOKS_DIR
from perfkit.report import PageSpec, render_page

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
TCP_WARNING = "running over TCP without encryption"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_has_cell_ids_and_no_outputs(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # MissingIDFieldWarning and any other: a failure
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) >= (4, 5)   # the version that has cell ids
    ids = [c.get("id") for c in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids), ids
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def _tiny(nb_dir: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("run_id = None", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell("print('page of', run_id)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nb_dir / "tiny.ipynb")


def test_a_report_page_is_executed_without_warnings(tmp_path, capfd):
    """A page as ``perfkit report`` renders it: the kernel's stderr (captured at the descriptor: the
    kernel is a child process) and Python's warnings stay empty. The same notebook on a TCP kernel,
    papermill's default, does warn: the capture sees the kernel's warning when there is one."""
    _tiny(tmp_path)
    papermill.execute_notebook(str(tmp_path / "tiny.ipynb"), str(tmp_path / "tcp.ipynb"), kernel_name="python3",
                               progress_bar=False, config=Config({"KernelManager": {"transport": "tcp"}}))
    assert TCP_WARNING in capfd.readouterr().err
    (tmp_path / "out" / "notebooks").mkdir(parents=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        page = render_page(PageSpec("tiny", "Tiny", "a page"), tmp_path, tmp_path / "out", {"run_id": "r1"}, False)
    err = capfd.readouterr().err
    assert page.ok, page.error
    assert "page of r1" in (tmp_path / "out" / "tiny.html").read_text()
    assert "WARNING" not in err and TCP_WARNING not in err, err
    assert [str(w.message) for w in caught] == []
