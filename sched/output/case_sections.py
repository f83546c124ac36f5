"""Each case's lines of ``requests.jsonl`` and ``timeline.jsonl``, rendered by the process that
simulated the case (lab.md §7; used with :mod:`sched.runs.parallel`).

The two large artifacts of a big run are one section per case, case after case. When the cases
are simulated side by side in worker processes, each process renders the sections of its own
cases right after simulating them, into anonymous temporary files made before the workers were
forked (so every process shares them and the system removes them when the run ends, however it
ends). Writing the artifacts then only reads the sections back in case order
(:func:`sched.output.artifacts.stream_artifacts`): the bytes are those of rendering the whole run in one
process, and no process holds the text in memory.

The run's ``workload.json`` text and sha256 are rendered the same way, by the first worker before
it takes a case (:meth:`CaseSections.write_workload`).

A case whose section could not be written (a full temporary disk) is emptied and rendered from
its results when the artifacts are written, as before (:meth:`CaseSections.written`); when the
files cannot be made at all, the run is rendered the usual way.
"""

from __future__ import annotations

import itertools
import tempfile

from .artifacts import LabRun
from ..base.files import decoded_chunks
from .jsonl_lines import case_jsonl_lines, request_line_parts
from ..workload.specs import workload_json_and_sha256

__all__ = ["CaseSections", "open_case_sections", "PARTS_KEPT_MAX_REQUESTS"]

#: Largest workload whose shared line parts are formatted once and kept for the whole run
#: (:meth:`CaseSections.renderer`): 100,000 requests hold about 28 MB of them.
PARTS_KEPT_MAX_REQUESTS = 100_000

#: Bytes read from a section file at a time when the artifacts are written.
_READ_SIZE = 1 << 20


def open_case_sections(num_cases: int) -> CaseSections | None:
    """Two empty anonymous temporary files per case, or ``None`` when the temporary directory
    cannot hold them (then the run renders its sections the usual way)."""
    try:
        return CaseSections(num_cases)
    except OSError:
        return None


class CaseSections:
    """Per case, the ``requests.jsonl`` and ``timeline.jsonl`` lines as UTF-8 in two temporary files.

    :meth:`write` renders one case (in whichever process simulated it); :meth:`written` tells
    whether a case's lines are there and :meth:`chunks` reads them back as text.
    Raises ``OSError`` when the files cannot be made.
    """

    def __init__(self, num_cases: int) -> None:
        self._files: list[tuple] = []
        self._workload_file = None
        try:
            self._workload_file = tempfile.TemporaryFile()
            for _ in range(num_cases):
                self._files.append((tempfile.TemporaryFile(), tempfile.TemporaryFile()))
        except OSError:
            self.close()
            raise
        self._parts: list[tuple] | None = None

    def renderer(self, workload, config, policy: str, source: str, timeline: str):
        """The ``render(index, result) -> bool`` hook of :func:`sched.runs.parallel.run_cases_in_workers`
        for a run of these inputs (as :class:`sched.output.artifacts.LabRun` takes them): :meth:`write`
        of that one case. Call it before the workers fork.

        What every case's lines of a request share (:func:`sched.output.jsonl_lines.request_line_parts`,
        about 280 bytes a request) is formatted here once for every process when the workload has at
        most :data:`PARTS_KEPT_MAX_REQUESTS` requests; a larger one's are formatted by each case as
        its lines go, and nothing is kept (the memory of the run stays bounded by what runs)."""
        self._parts = request_line_parts(workload) if len(workload) <= PARTS_KEPT_MAX_REQUESTS else None

        def render(index: int, result) -> bool:
            return self.write(LabRun(workload, config, policy, source, [result], timeline), index, self._parts)
        return render

    def write(self, run: LabRun, index: int, parts: list[tuple] | None = None) -> bool:
        """Render ``run``'s cases (one: case ``index`` of the whole run) into that case's files;
        ``parts``: :func:`sched.output.jsonl_lines.request_line_parts` of the workload, if at hand;
        True when written. A write that fails (``OSError``: a full disk) leaves the case's files
        empty and returns False, raising nothing: the case is then rendered from its results when
        the artifacts are written (:meth:`written`)."""
        requests_file, timeline_file = self._files[index]
        try:
            for handle, lines in zip((requests_file, timeline_file), case_jsonl_lines(run, parts)):
                while chunk := list(itertools.islice(lines, 4096)):
                    chunk.append("")   # every line ends with a newline
                    handle.write("\n".join(chunk).encode("utf-8"))
                handle.flush()
            return True
        except OSError:
            for handle in (requests_file, timeline_file):
                try:
                    handle.seek(0)
                    handle.truncate()
                except OSError:
                    pass
            return False

    def write_workload(self, workload) -> None:
        """Render ``workload.json`` and its sha256 (:func:`sched.workload.specs.workload_json_and_sha256`)
        into the workload file: the sha256 on the first line, the text after it. A failed write
        leaves the file empty (:meth:`workload_json` then gives ``None``)."""
        text, sha256 = workload_json_and_sha256(workload)
        handle = self._workload_file
        try:
            handle.write(f"{sha256}\n{text}".encode("utf-8"))
            handle.flush()
        except OSError:
            try:
                handle.seek(0)
                handle.truncate()
            except OSError:
                pass

    def workload_sha256(self) -> str | None:
        """The sha256 :meth:`write_workload` wrote, or ``None`` when the workload was not written
        (its text is then built from the specs when the artifacts are written)."""
        try:
            self._workload_file.seek(0)
            sha256 = self._workload_file.readline().decode("ascii").rstrip("\n")
            written = self._workload_file.read(1) != b""
        except (OSError, ValueError):
            return None
        return sha256 if written and len(sha256) == 64 else None

    def workload_chunks(self):
        """``workload.json``'s text as :meth:`write_workload` wrote it, in chunks (the whole text is
        never held: tens of bytes per request), for :func:`sched.base.safe_write.write_artifacts`."""
        handle = self._workload_file
        handle.seek(0)
        handle.readline()   # the sha256
        yield from decoded_chunks(handle, _READ_SIZE)

    def written(self, index: int) -> bool:
        """True when case ``index``'s lines are there (a case has at least one request: an empty
        ``requests.jsonl`` file is a case not written)."""
        try:
            return self._files[index][0].seek(0, 2) > 0
        except (OSError, ValueError):
            return False

    def chunks(self, index: int, name: str):
        """Case ``index``'s lines of ``name`` (``requests.jsonl`` or ``timeline.jsonl``) as text
        chunks, for :func:`sched.base.safe_write.write_artifacts`."""
        handle = self._files[index][0 if name == "requests.jsonl" else 1]
        handle.seek(0)
        yield from decoded_chunks(handle, _READ_SIZE)

    def close(self) -> None:
        """Close (and so delete) every file."""
        for files in self._files:
            for handle in files:
                handle.close()
        if self._workload_file is not None:
            self._workload_file.close()
