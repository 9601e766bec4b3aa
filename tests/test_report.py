"""HTML reports: every notebook executed by papermill on a real run made in this session on the local
testbed (campaigns/smoke-xdp.yaml), exported with figures.

The report is built once through the CLI (``perfkit report``) for the session's runs
(``tests/campaign_fixtures.py``), and the index is rendered in headless Chromium.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import papermill
import pytest
from PIL import Image

from perfkit.cli import main
from perfkit.report import INDEX, PAGES, NOTEBOOKS_DIR, PageSpec, build_report, links_html
from perfkit.store import RunStore
from tests.campaign_fixtures import runs_on_testbed

IMG_RE = re.compile(r'<img[^>]+src="data:image/png;base64,([A-Za-z0-9+/=\s]+)"')
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=10000"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    runs = runs_on_testbed()
    out = tmp_path_factory.mktemp("reports")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["report", "--run", runs.current, "--baseline", runs.baseline, "--root", str(runs.root),
                     "--reports", str(out), "--json", "--no-progress", "--check"])
    return {**json.loads(buf.getvalue()), "exit": code, "runs": runs}


def _images(html: str) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(m))) for m in IMG_RE.findall(html)]


def test_every_page_is_rendered(report):
    assert report["exit"] == 0 and report["ok"]
    assert [p["name"] for p in report["pages"]] == [p.name for p in PAGES] + ["index"]
    rdir = Path(report["dir"])
    assert Path(report["index"]) == rdir / "index.html"
    for p in report["pages"]:
        assert p["ok"], p["error"]
        assert (rdir / p["file"]).is_file()
        assert (rdir / "notebooks" / f"{p['name']}.ipynb").is_file()        # the executed notebook is kept


@pytest.mark.parametrize("page, at_least", [("index", 2), ("throughput", 6), ("cpu_regression", 2), ("search", 1),
                                            ("compare", 1)])
def test_pages_embed_their_figures(report, page, at_least):
    html = (Path(report["dir"]) / f"{page}.html").read_text()
    images = _images(html)
    # a goal no unit found a rate for is one line instead of a chart (plots.missing_figure): on a
    # host with stalls the NDR may have none; the line stands for the figure
    missing = len(re.findall(r"no (?:NDR|PDR[^ ]*|max-rate) figure: ", html))
    assert len(images) + missing >= at_least and images
    for im in images:
        px = np.asarray(im.convert("L"), dtype=float)
        assert im.width > 200 and im.height > 100 and px.std() > 5          # a figure, not a blank square
    assert "Traceback" not in html
    assert "load_run" not in html                                            # code hidden by default


def test_pages_say_what_they_show(report):
    rdir = Path(report["dir"])
    runs = report["runs"]
    index = (rdir / "index.html").read_text()
    for spec in PAGES:
        assert f'href="{spec.name}.html"' in index
    assert runs.current in index and runs.baseline in index
    # the host check each campaign on the testbed starts with, and what limited each figure
    assert "host check" in index and "stalls/min" in index and "What limited each figure" in index
    # as long as the campaign's generator.host_check_seconds asked (campaigns/smoke-xdp.yaml: 1 s)
    seconds = RunStore.open(runs.current, runs.root).metadata()["host_check"]["seconds"]
    assert 0.9 < seconds < 2
    cpu = (rdir / "cpu_regression.html").read_text()
    assert "CPU source:" in cpu and "multivariate" in cpu and "Gbit/s" in cpu
    cmp = (rdir / "compare.html").read_text()
    assert f"perfkit compare: <code>{runs.current}</code> vs baseline <code>{runs.baseline}</code>" in cmp


def test_show_code_keeps_the_code(tmp_path):
    runs = runs_on_testbed()
    rep = build_report(runs.current, data_root=runs.root, reports_root=tmp_path, show_code=True, progress=False,
                       pages=())                                              # the index only: one kernel
    assert rep.ok and [p.name for p in rep.pages] == ["index"]
    index = (rep.dir / "index.html").read_text()
    assert ">load_run<" in index                                               # highlighted source
    assert "No baseline run given" in index


def test_a_failing_notebook_gets_a_page_and_fails_the_report(tmp_path):
    runs = runs_on_testbed()
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    shutil.copy(NOTEBOOKS_DIR / "index.ipynb", nb_dir)
    broken = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("run_id = None", metadata={"tags": ["parameters"]}),
                                             nbformat.v4.new_code_cell("raise RuntimeError('no such figure')")])
    broken.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(broken, nb_dir / "broken.ipynb")
    rep = build_report(runs.current, data_root=runs.root, reports_root=tmp_path / "out", notebooks_dir=nb_dir,
                       progress=False, pages=(PageSpec("broken", "Broken", "fails on purpose"),))
    assert not rep.ok
    page = rep.pages[0]
    assert not page.ok and "RuntimeError" in page.error and "no such figure" in page.error
    assert "no such figure" in (rep.dir / "broken.html").read_text()
    assert "failed: cell" in (rep.dir / "index.html").read_text()
    assert rep.pages[1].ok                                                   # the index is still written


def test_report_of_an_unknown_run_fails_before_any_kernel(tmp_path, capsys):
    assert main(["report", "--run", "nope", "--root", str(tmp_path), "--reports", str(tmp_path / "r")]) == 2
    assert "--run: 'nope' is not allowed; allowed: the id of a run under" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_links_html_escapes_and_flags_failures():
    html = links_html([{"name": "a", "title": "A <b>", "description": "d & e", "file": "a.html", "ok": False,
                        "error": "cell 3: KeyError: 'x'"}], None)
    assert "A &lt;b&gt;" in html and "d &amp; e" in html and "failed: cell 3: KeyError" in html


@pytest.mark.parametrize("name", [p.name for p in PAGES] + [INDEX.name])
def test_notebooks_are_thin_parameterised_and_stripped(name):
    path = NOTEBOOKS_DIR / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    params = papermill.inspect_notebook(str(path))
    assert {"run_id", "baseline_run_id", "data_root"} <= set(params)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert "def " not in cell.source and "class " not in cell.source   # logic lives in perfkit/
    # the report's tables drop pandas' row numbers, and its figures get their HTML, only after it
    assert any("plots.setup()" in c.source for c in nb.cells if c.cell_type == "code")


# -- the index in a browser ------------------------------------------------------------------------
def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium (make test installs it)")
    return exe


def _screenshot(html: Path, png: Path, profile: Path) -> np.ndarray:
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
           "--window-size=1280,2400", html.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert png.is_file(), f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return np.asarray(Image.open(png).convert("RGB"), dtype=int)


def _coloured(px: np.ndarray) -> int:
    """Pixels with a clear hue: plot colours, not black/grey text on white."""
    return int(((px.max(axis=2) - px.min(axis=2)) > 60).sum())


def test_index_in_headless_chromium_shows_its_images(report, tmp_path):
    index = Path(report["index"])
    shot = _screenshot(index, tmp_path / "index.png", tmp_path / "profile-a")
    assert shot.shape[0] >= 2000 and shot.shape[1] >= 1200
    non_white = int((shot.min(axis=2) < 240).sum())
    assert non_white > 0.05 * shot.shape[0] * shot.shape[1], "the page is (nearly) blank"
    # the same page without its images: what the figures add must be most of the colour
    stripped = tmp_path / "index-noimg.html"
    stripped.write_text(IMG_RE.sub('<img src=""', index.read_text()))
    bare = _screenshot(stripped, tmp_path / "bare.png", tmp_path / "profile-b")
    with_images, without = _coloured(shot), _coloured(bare)
    # at least one figure's colour: how many figures the first 2400 px hold depends on the run (on a
    # host that stalls all the time no NDR search finds a bound, and its figure is a line of text)
    assert with_images > 0.005 * shot.shape[0] * shot.shape[1]
    assert with_images > 10 * max(without, 1), (with_images, without)


def test_pages_pass_the_check_in_headless_chromium(report):
    """Rendered by Chromium: no table cell shows NaN, every PNG is a perfkit figure with a title,
    an axis label with a unit and a legend (``perfkit report --check``)."""
    assert report["check_problems"] == []


def test_the_check_finds_a_figure_without_title_unit_or_legend_and_a_nan_cell():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from bs4 import BeautifulSoup

    from perfkit import plots
    from perfkit.report import _dom_problems

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    assert plots.problems(fig) == ["no title", "no axis label with a unit", "no legend"]
    ax.set_title("t")
    ax.set_xlabel("offered load [Mpps]")
    ax.plot([1, 2], [4, 5], label="ul")
    ax.legend()
    assert plots.problems(fig) == []
    bad, _ = plt.subplots()
    bad.axes[0].plot([1], [1])
    page = (f"<table class='dataframe'><tr><td>1.0</td><td>NaN</td></tr></table>{plots.figure_html(fig)}"
            f"{plots.figure_html(bad)}<img src='data:image/png;base64,AAAA'>")
    found = _dom_problems(BeautifulSoup(page, "html.parser"))
    assert len(found) == 3 and "1 cell(s) show NaN" in found[0] and "no title" in found[1], found
    assert "not a perfkit.plots figure" in found[2]


def test_a_goal_without_a_figure_says_what_limited_its_units():
    """An NDR no search could bound (every trial lost frames: a host that stalls all the time) is
    not "no results": the empty figure says how many units ran and what limited them."""
    import matplotlib
    matplotlib.use("Agg")
    from perfkit import plots

    tp = pd.DataFrame({"goal": ["max", "ndr", "ndr", "ndr"], "rx_gbps": [1.0, np.nan, np.nan, np.nan],
                       "limited_by": ["dut", "host stalls", "host stalls", "testbed"]})
    texts = [t.get_text() for ax in plots.throughput_bars(tp, goal="ndr").axes for t in ax.texts]
    assert texts == ["no NDR figure: none of the 3 units found a rate that passed\n"
                     "(limited 2 by host stalls, 1 by testbed; see the search page)"]
    texts = [t.get_text() for ax in plots.throughput_bars(tp, goal="pdr0.5%").axes for t in ax.texts]
    assert texts == ["no PDR0.5% results in this run"]
    texts = [t.get_text() for ax in plots.throughput_bars(tp.iloc[:2], goal="ndr").axes for t in ax.texts]
    assert texts == ["no NDR figure: its one unit found no rate that passed\n"
                     "(limited 1 by host stalls; see the search page)"]


def test_the_check_takes_a_relative_report_directory(tmp_path, monkeypatch):
    """``perfkit report --check`` on reports/<run_id>: Chromium needs file URIs, which are absolute."""
    from perfkit.report import check_pages

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "page.html").write_text("<html><body><table class='dataframe'><tr><td>NaN</td></tr>"
                                              "</table></body></html>")
    monkeypatch.chdir(tmp_path)
    assert check_pages("r") == ["page.html: table 1: 1 cell(s) show NaN"]


def test_the_single_vs_multi_flow_table_shows_a_lower_bound_with_its_value_and_says_why_a_cell_has_none():
    """A cell of the throughput page's pivot is a figure, ``≥ figure`` or words; never a bare ``≥``
    (an NDR that no search could bound, by a testbed that also lost frames, showed just that)."""
    from perfkit import analysis

    def row(goal, size, mode, mpps, limited_by, repeat=1):
        return {"goal": goal, "dut_cores": 1, "frame_size": size, "variant": "ul", "flow_mode": mode,
                "repeat": repeat, "throughput_mpps": mpps, "limited_by": limited_by,
                "at_least": limited_by in ("generator", "host stalls", "testbed", "max rate")}

    tp = pd.DataFrame([row("max", 64, "single", 1.5824, "generator"), row("max", 64, "multi", 1.2883, "dut"),
                       row("max", 1424, "single", 0.7996, "max rate"),
                       row("ndr", 1424, "single", np.nan, "host stalls"), row("ndr", 1424, "multi", 0.8379, "testbed"),
                       row("ndr", 64, "single", np.nan, "host stalls"), row("ndr", 64, "single", np.nan, "testbed", 2),
                       row("ndr", 64, "multi", 0.9, "dut"), row("ndr", 64, "multi", np.nan, "dut", 2)])
    pv = analysis.throughput_pivot(tp, "throughput_mpps", mark=True)
    cells = {(g, size, mode): pv.loc[(g, 1, size), ("ul", mode)] for g, _, size in pv.index for mode in ("single", "multi")}
    assert cells == {("max", 64, "single"): "≥ 1.582", ("max", 64, "multi"): "1.288",
                     ("max", 1424, "single"): "≥ 0.800", ("max", 1424, "multi"): "not measured",
                     ("ndr", 1424, "single"): "no rate passed (limited by host stalls)",
                     ("ndr", 1424, "multi"): "≥ 0.838",
                     ("ndr", 64, "single"): "no rate passed (limited by host stalls, testbed)",
                     ("ndr", 64, "multi"): "0.900 (1 of 2 repeats)"}
    assert not any(re.fullmatch(r"\s*≥\s*", c) for c in cells.values())
    numeric = analysis.throughput_pivot(tp, "throughput_mpps")
    assert numeric.loc[("max", 1, 64), ("ul", "single")] == pytest.approx(1.5824)


def test_the_check_finds_an_index_column_and_a_table_wider_than_the_page(tmp_path, monkeypatch):
    """Pages exported as the report exports them, opened in headless Chromium: pandas' row numbers
    are found, a named index (a pivot's) is not; a table of 14 columns and a long note fits the page
    with the report's table style, and is found 600+ px too wide without it."""
    from perfkit import plots, report

    wide = pd.DataFrame([{**{f"column_number_{j}": 12345.6789 for j in range(12)},
                          "notes": "a long note that says a lot about the search, " * 6,
                          "scenario_key": "pgwu-ul-1424B-1001000flow-1core-100000sess"}] * 3)
    named = wide.iloc[:, :3].set_index("column_number_0")

    def page(name: str, table: str) -> None:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/html": table, "text/plain": ""})])])
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        (tmp_path / "pages").mkdir(exist_ok=True)
        (tmp_path / "pages" / f"{name}.html").write_text(report.export_html(tmp_path / f"{name}.ipynb", name))

    assert not plots.labelled(wide) and plots.labelled(named)
    page("a_wide", plots.table_html(wide, index=plots.labelled(wide), notebook=True))
    page("b_rows", wide.iloc[:, :3].to_html())
    page("c_named", plots.table_html(named, index=plots.labelled(named)))
    monkeypatch.setattr(report, "TABLE_CSS", "")
    page("d_unstyled", plots.table_html(wide, index=False))
    found = report.check_pages(tmp_path / "pages")
    assert found[0] == "b_rows.html: table 1: an index column (pandas' row numbers, no name)"
    assert len(found) == 2 and re.fullmatch(r"d_unstyled\.html: table 1 of the page: \d+ px wider than the page",
                                            found[1]), found
    assert int(found[1].split(": ")[2].split()[0]) > 600


def test_a_goal_without_a_figure_gets_one_line_instead_of_an_empty_chart():
    """The headline draws every search goal (NDR and PDR); one that no unit bounded is a line on the
    page saying why (``plots.missing_figure``), not a chart with nothing in it."""
    from perfkit import plots

    tp = pd.DataFrame({"goal": ["max", "ndr", "ndr", "pdr0.5%", "pdr0.5%"],
                       "throughput_gbps": [1.0, np.nan, np.nan, 0.8, np.nan],
                       "limited_by": ["dut", "host stalls", "testbed", "dut", "host stalls"]})
    assert plots.missing_figure(tp, "ndr") == ("no NDR figure: none of the 2 units found a rate that passed "
                                               "(limited 1 by host stalls, 1 by testbed; see the search page)")
    assert plots.missing_figure(tp, "pdr0.5%") == ""
    assert plots.missing_figure(tp, "pdr10%") == "no PDR10% results in this run"
    index = nbformat.read(NOTEBOOKS_DIR / "index.ipynb", as_version=4)
    headline = [c.source for c in index.cells if "throughput_gbps" in c.source]
    assert len(headline) == 1 and "[:1]" not in headline[0] and "plots.missing_figure" in headline[0]
