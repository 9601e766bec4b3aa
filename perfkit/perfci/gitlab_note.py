"""Post or update the one perf note of a GitLab merge request (perfkit's ``.gitlab-ci.yml``, job
perf-ab, and the job ``perfkit ci init --gitlab`` writes into a user's repository).

Usage: ``python -m perfkit.perfci.gitlab_note COMMENT_FILE LOG_FILE EXIT_CODE`` (a module of the
package, so that an installed perfkit has it too). The note is ``perfkit ab``'s
``pr-comment.md``; without one (a side failed, bad input) it is the log's last lines. The note that
starts with the marker ``<!-- perfkit-ab -->`` is updated, else a note is created. GitLab's REST API
(v4), with the token in ``$PERF_NOTE_TOKEN``, on the merge request of ``$CI_MERGE_REQUEST_IID`` in
``$CI_PROJECT_ID`` at ``$CI_API_V4_URL`` (GitLab CI sets those three). Exits 0 even when the note
cannot be posted (it says why): the job's status is perfkit ab's.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from perfkit.perfci.comment import COMMENT_MARKER as MARKER


def note_body(comment: Path, log: Path, code: str) -> str:
    if comment.is_file() and comment.stat().st_size:
        return comment.read_text()
    tail = log.read_text().splitlines()[-5:] if log.is_file() else []
    return "\n".join([MARKER, f"### perfkit ab: no result (exit {code})", "", "```text", *tail, "```", ""])


def find_note(notes: list[dict]) -> int | None:
    """The id of the note this job posted before (its body starts with the marker)."""
    return next((n["id"] for n in notes if str(n.get("body", "")).startswith(MARKER)), None)


def _call(method: str, url: str, token: str, data: dict | None = None) -> object:
    req = urllib.request.Request(url, method=method, headers={"PRIVATE-TOKEN": token, "Content-Type": "application/json"},
                                 data=json.dumps(data).encode() if data is not None else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def main(argv: list[str]) -> int:
    comment, log, code = Path(argv[0]), Path(argv[1]), argv[2]
    body = note_body(comment, log, code)
    token = os.environ.get("PERF_NOTE_TOKEN")
    if not token:
        print("gitlab_note: PERF_NOTE_TOKEN is not set: no note posted (docs/ci.md)")
        return 0
    base = (f"{os.environ['CI_API_V4_URL']}/projects/{os.environ['CI_PROJECT_ID']}"
            f"/merge_requests/{os.environ['CI_MERGE_REQUEST_IID']}/notes")
    try:
        notes = _call("GET", f"{base}?per_page=100&sort=asc", token)
        mine = find_note(notes if isinstance(notes, list) else [])
        if mine is None:
            _call("POST", base, token, {"body": body})
        else:
            _call("PUT", f"{base}/{mine}", token, {"body": body})
    except (OSError, ValueError) as err:
        print(f"gitlab_note: could not post the note: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
