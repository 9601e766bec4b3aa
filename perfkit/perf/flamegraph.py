"""Flame graphs of folded stacks: an interactive SVG by ``inferno-flamegraph`` (click to zoom,
Ctrl-F to search), and the HTML that shows one in a notebook or an exported page."""
from __future__ import annotations

import base64
import re
import subprocess

from perfkit.perf.tools import INSTALL_INFERNO, TOOLS_DIR, PerfError, find_tool, last_line


def flamegraph_svg(folded: str, title: str = "DUT cores", *, width: int = 1200, count_name: str = "samples") -> str:
    """An interactive flame graph (SVG with its own script) of ``folded``, by ``inferno-flamegraph``."""
    tool = find_tool("inferno-flamegraph")
    if not tool:
        raise PerfError(f"flame graphs need inferno-flamegraph, not found in {TOOLS_DIR}, ~/.cargo/bin or PATH; "
                        f"install it: {INSTALL_INFERNO}")
    if not folded.strip():
        raise PerfError("no samples to draw a flame graph of")
    out = subprocess.run([tool, "--title", title, "--countname", count_name, "--width", str(width),
                          "--colors", "hot", "--hash"],
                         input=folded.encode(), capture_output=True, check=False)
    if out.returncode != 0:
        raise PerfError(f"inferno-flamegraph failed: {last_line(out.stderr)}")
    return out.stdout.decode()


def flamegraph_html(svg: str, max_height: int = 900) -> str:
    """HTML that shows an interactive SVG flame graph in a notebook or an exported page: an ``iframe``
    whose document is the SVG (a ``data:`` URL), so that its script (zoom, search) runs as in a file of
    its own and nothing of the page interferes. As tall as the graph, up to ``max_height`` [px] (then
    it scrolls; the roots are at the bottom)."""
    m = re.search(r'<svg[^>]*\sheight="(\d+)"', svg)
    height = min(int(m.group(1)) + 8, max_height) if m else max_height
    url = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    return (f'<div class="flamegraph"><iframe src="{url}" style="width:100%;height:{height}px;border:0" '
            'title="flame graph"></iframe></div>')
