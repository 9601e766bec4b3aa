"""Flame graphs of folded stacks: an interactive SVG by ``inferno-flamegraph`` (click to zoom,
Ctrl-F to search), and the HTML that shows one in a notebook or an exported page."""
from __future__ import annotations

import base64
import os
import re
import subprocess
import tempfile

from perfkit.perf.folded import untagged
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


def diff_folded(before: str, after: str) -> str:
    """``inferno-diff-folded --normalize``: each stack of ``after`` with its samples before and after,
    the two profiles scaled to the same total (a differential flame graph's input); BPF programs'
    tags zeroed (``untagged``)."""
    tool = find_tool("inferno-diff-folded")
    if not tool:
        raise PerfError(f"differential flame graphs need inferno-diff-folded, not found in {TOOLS_DIR}, ~/.cargo/bin "
                        f"or PATH; install it: {INSTALL_INFERNO}")
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, text in (("before", untagged(before)), ("after", untagged(after))):
            paths.append(os.path.join(d, name))
            with open(paths[-1], "w") as f:
                f.write(text)
        out = subprocess.run([tool, "--normalize", *paths], capture_output=True, check=False)
    if out.returncode != 0:
        raise PerfError(f"inferno-diff-folded failed: {last_line(out.stderr)}")
    return out.stdout.decode()


def diff_flamegraph_svg(before: str, after: str, title: str, *, width: int = 1200) -> str:
    """A differential flame graph: ``after``'s stacks, each frame red where it got more samples than
    in ``before`` and blue where fewer (inferno's differential colours; the profiles normalized)."""
    if not before.strip() or not after.strip():
        raise PerfError("no samples to draw a differential flame graph of")
    return differential_svg(diff_folded(before, after), title, width=width)


def differential_svg(diff: str, title: str, *, width: int = 1200, count_name: str = "samples") -> str:
    """A differential flame graph of ``diff``: ``stack <before> <after>`` lines (integer counts, in
    ``count_name`` units), drawn as ``after``'s stacks coloured by the change."""
    tool = find_tool("inferno-flamegraph")
    if not tool:
        raise PerfError(f"flame graphs need inferno-flamegraph, not found in {TOOLS_DIR}, ~/.cargo/bin or PATH; "
                        f"install it: {INSTALL_INFERNO}")
    if not diff.strip():
        raise PerfError("no samples to draw a differential flame graph of")
    out = subprocess.run([tool, "--title", title, "--countname", count_name, "--width", str(width)],
                         input=diff.encode(), capture_output=True, check=False)
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
