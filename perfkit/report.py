"""HTML reports of a run: the notebooks executed with papermill from stored data, exported with nbconvert.

``build_report(run_id)`` is a pipeline (papermill's shape): for each notebook of ``notebooks/``
(``PAGES``, then ``index``) -> parameterise (``run_id``, ``baseline_run_id``, ``data_root``; the
index also gets ``pages``) -> execute with papermill (kernel ``python3``; no traffic, only the run
store) into ``reports/<run_id>/notebooks/<name>.ipynb`` (the kernel on Unix sockets, ``KERNEL_TRANSPORT``) -> export to
``reports/<run_id>/<name>.html`` with nbconvert's HTMLExporter: code hidden unless ``show_code``
(``exclude_input``), prompts hidden, figures embedded as base64 PNG. ``index.html`` links the pages
and shows the run's metadata and headline figures.

A notebook that fails still gets its page (with the traceback) and is marked failed in the index;
``Report.ok`` is False then (the CLI exits 2).
"""
from __future__ import annotations

import html
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from perfkit.errors import ConfigError, StoreError
from perfkit.paths import NOTEBOOKS_DIR, reports_dir
from perfkit.store import DEFAULT_ROOT, RunStore, list_runs

DEFAULT_REPORTS = reports_dir()
#: Notebooks executed at once, each in a kernel of its own: a kernel spends most of a page's time on
#: one core (imports, pandas, plotting), so two pages take about the time of one on two cores.
PAGE_WORKERS = 2
KERNEL = "python3"
#: How a report's kernel talks to papermill: Unix sockets, not TCP on 127.0.0.1. Over TCP without
#: CurveZMQ keys ipykernel warns (rightly) that any local user could connect and eavesdrop; the
#: sockets of ``kernel_options`` are in Jupyter's runtime directory (mode 0700): only its owner
#: can reach them, and there is nothing to warn about.
KERNEL_TRANSPORT = "ipc"


def kernel_options() -> dict[str, str]:
    """A kernel manager's ``transport`` and ``ip`` (for ``ipc``: the sockets' path prefix, in
    Jupyter's runtime directory; by default jupyter_client puts them in the working directory)."""
    from jupyter_core.paths import jupyter_runtime_dir

    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    # one prefix per kernel: kernels started at once in one process would otherwise pick the same sockets
    return {"transport": KERNEL_TRANSPORT, "ip": str(runtime / f"perfkit-{os.getpid()}-{uuid.uuid4().hex[:8]}-ipc")}


def kernel_config() -> Any:
    """The ``traitlets`` config of the kernel managers papermill makes: ``kernel_options``."""
    from traitlets.config import Config

    return Config({"KernelManager": kernel_options()})


@dataclass(frozen=True)
class PageSpec:
    name: str
    """Notebook ``notebooks/<name>.ipynb`` and page ``<name>.html``."""
    title: str
    description: str


#: The pages besides the index, in index order.
PAGES: tuple[PageSpec, ...] = (
    PageSpec("throughput", "Throughput",
             "received Gbit/s, Mpps and loss vs frame size per core count; UL vs DL, single vs multi flow; latency"),
    PageSpec("cpu_regression", "DUT CPU models",
             "DUT CPU vs frame size and cores: correlations, linear fits, residuals, cores needed for X Gbit/s"),
    PageSpec("search", "NDR/PDR searches", "throughput per scenario and goal, with every search's trial-by-trial path"),
    PageSpec("compare", "Comparison with the baseline",
             "per-scenario change vs the baseline run, with noise bands; regressions flagged"),
    # perf attribution (perfkit.perf): says "no perf data in this run" unless trials were recorded with perf
    PageSpec("perf", "perf attribution",
             "where the DUT cores' time went: top kernel and BPF symbols and a flame graph per scenario"),
    PageSpec("knobs", "What each knob did",
             "per knob, the change of DUT cost, throughput and loss with confidence intervals; tables held; "
             "work per DUT core; differential flame graphs"),
    PageSpec("explain", "Explain",
             "where the ns per packet go between the dataplane's variants (UL vs DL per frame size) and knob values: "
             "the gap decomposed into functions, with differential flame graphs of ns per packet"),
    PageSpec("history", "History by commit",
             "each figure of the run's campaign along the commit order, from every run of it in the store; steps "
             "beyond the noise"),
)
INDEX = PageSpec("index", "Index", "links, run metadata, headline figures")


@dataclass
class Page:
    """One rendered page."""

    name: str
    title: str
    description: str
    file: str
    """The HTML file name (relative to the report directory)."""
    ok: bool = True
    error: str | None = None
    """``cell <n>: <exception>: <message>`` when the notebook failed."""
    seconds: float = 0.0


@dataclass
class Report:
    run_id: str
    baseline_run_id: str | None
    dir: Path
    index: Path
    pages: list[Page] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.pages)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "baseline_run_id": self.baseline_run_id, "dir": str(self.dir),
                "index": str(self.index), "ok": self.ok, "pages": [asdict(p) for p in self.pages]}


def find_baseline(run_id: str, data_root: str | Path = DEFAULT_ROOT) -> str | None:
    """The latest complete run before ``run_id`` made from a campaign of the same name, or None."""
    mine = RunStore.open(run_id, data_root).metadata().get("campaign", {}).get("name")
    for other in reversed(list_runs(data_root)):
        if other >= run_id:
            continue
        try:
            meta = RunStore.open(other, data_root).metadata()
        except StoreError:
            continue          # a run with a corrupt metadata.json is no baseline
        if meta.get("status") == "complete" and meta.get("campaign", {}).get("name") == mine:
            return other
    return None


def links_html(pages: Sequence[dict[str, Any]], baseline_run_id: str | None = None) -> str:
    """The index's list of pages (dicts with name, title, description, file, ok, error)."""
    items = []
    for p in pages:
        status = "" if p.get("ok", True) else (
            f' <strong style="color:#d62728">failed: {html.escape(str(p.get("error", "")))}</strong>')
        items.append(f'<li><a href="{html.escape(p["file"])}">{html.escape(p["title"])}</a>: '
                     f'{html.escape(p["description"])}{status}</li>')
    base = (f"<p>Baseline: run <code>{html.escape(baseline_run_id)}</code></p>" if baseline_run_id
            else "<p>No baseline run given (<code>perfkit report --run RUN_ID --baseline OTHER</code>).</p>")
    return "<ul>" + "".join(items) + "</ul>" + base


def build_report(run_id: str, *, baseline_run_id: str | None = None, data_root: str | Path = DEFAULT_ROOT,
                 reports_root: str | Path = DEFAULT_REPORTS, notebooks_dir: str | Path = NOTEBOOKS_DIR,
                 show_code: bool = False, progress: bool = True, kernel_name: str = KERNEL,
                 timeout: float = 900.0, pages: Sequence[PageSpec] = PAGES, extra_pages: Sequence[Page] = ()) -> Report:
    """Execute the notebooks for ``run_id`` and write ``reports/<run_id>/*.html`` (see module doc).

    ``baseline_run_id``: a run id, ``auto`` (``find_baseline``) or None. ``extra_pages``: pages
    already in the report directory, listed first in the index (``perfkit experiment``'s own page).
    """
    data_root = Path(data_root).absolute()
    RunStore.open(run_id, data_root).check()   # a clear error (one line naming the file) before any kernel starts
    if baseline_run_id == "auto":
        baseline_run_id = find_baseline(run_id, data_root)
    elif baseline_run_id is not None:
        RunStore.open(baseline_run_id, data_root).check()
    nb_dir = Path(notebooks_dir)
    for spec in (*pages, INDEX):
        if not (nb_dir / f"{spec.name}.ipynb").is_file():
            raise ConfigError("notebook", str(nb_dir / f"{spec.name}.ipynb"), "an existing notebook of notebooks/")
    out = Path(reports_root).absolute() / run_id
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    params = {"run_id": run_id, "baseline_run_id": baseline_run_id, "data_root": str(data_root)}
    report = Report(run_id, baseline_run_id, out, out / "index.html", list(extra_pages))
    with tqdm(total=len(pages) + 1, desc=f"report {run_id}", unit="page", disable=not progress) as bar, \
            ThreadPoolExecutor(PAGE_WORKERS) as pool:
        def render(spec: PageSpec, extra: dict[str, Any]) -> Page:
            page = render_page(spec, nb_dir, out, {**params, **extra}, show_code, kernel_name, timeout)
            bar.set_postfix_str(spec.name)
            bar.update(1)
            return page
        # the pages at once (each in a kernel of its own), in their order; the index, which lists them, last
        try:
            report.pages += list(pool.map(lambda spec: render(spec, {}), pages))
        except BaseException:   # Ctrl-C, SIGTERM: no page starts after it; those running end
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        report.pages.append(render(INDEX, {"pages": [asdict(p) for p in report.pages]}))
    return report


def render_page(spec: PageSpec, nb_dir: Path, out: Path, params: dict[str, Any], show_code: bool,
                kernel_name: str = KERNEL, timeout: float = 900.0) -> Page:
    """Execute one notebook into ``out/notebooks/`` and export it to ``out/<name>.html``."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed = out / "notebooks" / f"{spec.name}.ipynb"
    page = Page(spec.name, spec.title, spec.description, f"{spec.name}.html")
    start = time.monotonic()
    try:
        # the kernel's working directory through nbclient's resources, not papermill's ``cwd``: that
        # changes the whole process's directory, which pages rendered at once share
        papermill.execute_notebook(str(nb_dir / f"{spec.name}.ipynb"), str(executed), parameters=params,
                                   kernel_name=kernel_name, progress_bar=False,
                                   resources={"metadata": {"path": str(out)}},
                                   execution_timeout=timeout, config=kernel_config())
    except PapermillExecutionError as err:
        page.ok, page.error = False, f"cell {err.cell_index}: {err.ename}: {' '.join(str(err.evalue).split())[:300]}"
    except Exception as err:  # noqa: BLE001 - a dead kernel, a timeout: the page says so
        page.ok, page.error = False, f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    page.seconds = time.monotonic() - start
    (out / page.file).write_text(export_html(executed, spec.title, show_code) if executed.exists()
                                 else _error_page(spec.title, page.error or "not executed"))
    return page


def export_html(notebook: Path, title: str, show_code: bool = False) -> str:
    """nbconvert HTML of an executed notebook: code hidden unless ``show_code``, figures embedded."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook), as_version=4)
    exporter = HTMLExporter(exclude_input=not show_code, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": f"perfkit: {title}"}})
    return body.replace("</head>", f"<style>{TABLE_CSS}</style>\n</head>", 1)


#: How a report's tables fit the page: at most its width, their cells wrapped (a long note, a
#: scenario key: anywhere, once the spaces do not suffice), not cut off or scrolled sideways.
#: JupyterLab's own style keeps cells on one line (``white-space: nowrap``) and scrolls the output.
TABLE_CSS = ("table.dataframe { max-width: 100%; table-layout: auto; } "
             "table.dataframe th, table.dataframe td { white-space: normal !important; overflow-wrap: anywhere; "
             "word-break: normal; max-width: 32em; }")


def _error_page(title: str, error: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>perfkit: {html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>The notebook could not be executed: "
            f"<code>{html.escape(error)}</code></p></body></html>")


def _row_numbers(table: Any) -> bool:
    """The table's rows start with header cells that no header names: an unnamed index (a named
    one, a pivot's, has its names in the header's last row)."""
    row = table.select_one("tbody tr")
    heads = table.select("thead tr")
    if row is None or not heads:
        return False
    n = 0
    for cell in row.find_all(["th", "td"], recursive=False):
        if cell.name != "th":
            break
        n += 1
    names = heads[-1].find_all(["th", "td"], recursive=False)[:n]
    return n > 0 and not all(c.get_text(strip=True) for c in names)


# -- checking the pages in a browser -----------------------------------------------------------------
#: Headless Chromium, as the pages are checked: no network, no first-run work, JavaScript given time.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--virtual-time-budget=10000")
#: What a missing value looks like in a rendered pandas table.
MISSING = {"nan", "none", "<na>", "nat"}


#: The window the pages are checked in [px]: a laptop's browser.
CHECK_WINDOW = (1280, 1000)
#: Run by Chromium on each page before its DOM is dumped: marks each table wider than the page
#: (``data-overflow``: by how many px), which the DOM alone cannot tell.
MEASURE_JS = ("<script>window.addEventListener('load', () => { const w = document.documentElement.clientWidth; "
              "document.querySelectorAll('table').forEach(t => { const r = t.getBoundingClientRect(); "
              "if (r.right > w + 1) t.setAttribute('data-overflow', Math.round(r.right - w)); }); });</script>")


def check_pages(report_dir: str | Path, chromium: str | None = None) -> list[str]:
    """Problems of the report's pages as headless Chromium renders them (their DOM, in a window of
    ``CHECK_WINDOW``): a figure table cell showing NaN, a table with an index column (pandas' row
    numbers) or wider than the page, a PNG that is not a ``perfkit.plots`` figure, a figure
    without alt text, or one whose ``data-problems`` (no title, no unit, no legend) is not empty.
    Empty: all good."""
    import shutil
    import subprocess
    import tempfile

    from bs4 import BeautifulSoup

    exe = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise ConfigError("chromium", None, "a Chromium binary on PATH (apt-get install -y chromium)")

    def one(page: Path) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="perfkit-chromium-") as profile:   # one Chromium per profile
            measured = Path(profile) / "page.html"        # the page's own file stays as written
            measured.write_text(page.read_text() + MEASURE_JS)
            dom = subprocess.run([exe, *CHROMIUM_FLAGS, f"--window-size={CHECK_WINDOW[0]},{CHECK_WINDOW[1]}",
                                  f"--user-data-dir={profile}", "--dump-dom", measured.as_uri()],
                                 capture_output=True, text=True, timeout=180).stdout
        if not dom.strip():
            return [f"{page.name}: Chromium rendered nothing"]
        return [f"{page.name}: {p}" for p in _dom_problems(BeautifulSoup(dom, "html.parser"))]

    with ThreadPoolExecutor(PAGE_WORKERS) as pool:
        return [p for found in pool.map(one, sorted(Path(report_dir).resolve().glob("*.html"))) for p in found]


def _dom_problems(soup: Any) -> list[str]:
    out = []
    for i, table in enumerate(soup.select("table.dataframe"), 1):
        bad = [td.get_text(strip=True) for td in table.select("td") if td.get_text(strip=True).lower() in MISSING]
        if bad:
            out.append(f"table {i}: {len(bad)} cell(s) show {bad[0]}")
        if _row_numbers(table):
            out.append(f"table {i}: an index column (pandas' row numbers, no name)")
    for i, table in enumerate(soup.select("table"), 1):
        if table.get("data-overflow"):
            out.append(f"table {i} of the page: {table['data-overflow']} px wider than the page")
    for i, img in enumerate(soup.select('img[src^="data:image/png"]'), 1):
        fig = img.find_parent("figure", class_="perfkit-figure")
        if fig is None:
            out.append(f"image {i}: not a perfkit.plots figure (no title/unit/legend check possible)")
        elif fig.get("data-problems"):
            out.append(f"figure {i} ({img.get('alt', '')[:60]}): {fig['data-problems']}")
        elif not img.get("alt", "").strip():
            out.append(f"figure {i}: no alt text")
    return out
