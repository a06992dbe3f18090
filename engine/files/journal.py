"""The journal that lets ``msgpt predict --resume`` go on after a crash, a kill or a full disk.

While a batch runs, its candidates go to ``OUT.partial`` and one JSON line per finished spectrum to
``OUT.journal``; only a complete run renames ``OUT.partial`` to ``OUT``, so other programs never see
half a file. Per spectrum, the rows are written and fsync'ed first, then the journal line (also
fsync'ed), so every journaled spectrum is on disk, whatever happens next.

``OUT.journal``::

    {"journal": "msgpt-predict", "version": 1, "settings": {...}, "info": {...}, "offset": 812}
    {"input": 0, "index": 0, "id": "MSBNK-...", "status": "done", "rows": 5, "offset": 4113}
    {"input": 0, "index": 1, "id": "...", "status": "skipped", "reason": "...", "offset": 4113}
    {"status": "complete"}

A spectrum's key is its input file (position in the command's list of inputs) and its record
number in that file: TITLEs can repeat, record numbers cannot. ``offset`` is the size of
``OUT.partial`` after the spectrum's rows. On resume, the partial file is cut back to the last
journaled offset (dropping the rows of a spectrum that had not finished), a torn last journal
line is dropped, and journaled spectra (done or skipped: reader and model reasons are
deterministic, so skipped records are not retried) are passed over. The run's settings (model
checksum, parameters, seed, device, precision, inputs and their sizes, output options) must be
the same, else the resume is refused: mixing two settings in one file would be silently wrong.
An input file that cannot be read is not journaled: a resume tries it again and says so again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import MsgptError, OutputError

JOURNAL = "msgpt-predict"
JOURNAL_VERSION = 1


def partial_path(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def journal_path(output: Path) -> Path:
    return output.with_name(output.name + ".journal")


@dataclass
class JournalState:
    """What a journal file says: the run's header, its spectrum entries, and where its good bytes end."""

    header: dict | None
    entries: list[dict] = field(default_factory=list)
    complete: bool = False
    good_bytes: int = 0  # the journal up to its last complete line

    @property
    def offset(self) -> int:
        """Bytes of the partial output that journaled spectra account for."""
        if self.entries:
            return int(self.entries[-1]["offset"])
        return int(self.header["offset"]) if self.header else 0

    @property
    def n_done(self) -> int:
        return sum(e["status"] == "done" for e in self.entries)

    def counts(self) -> str:
        """``12 spectra processed, 3 skipped`` (what the journal holds)."""
        n = self.n_done
        return f"{n} {'spectrum' if n == 1 else 'spectra'} processed, {len(self.entries) - n} skipped"

    def keys(self) -> set[tuple[int, int]]:
        return {(int(e["input"]), int(e["index"])) for e in self.entries}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_entry(d: object) -> bool:
    """A spectrum line as :func:`engine.cli` writes it (anything else ends the journal)."""
    if not (isinstance(d, dict) and isinstance(d.get("id"), str)):
        return False
    if not all(_is_int(d.get(k)) for k in ("input", "index", "offset")):
        return False
    if d.get("status") == "done":
        return _is_int(d.get("rows"))
    return d.get("status") == "skipped" and isinstance(d.get("reason"), str)


def parse_journal(data: bytes) -> JournalState:
    """Read a journal's bytes; a torn or unreadable line ends it (what follows was never confirmed)."""
    state = JournalState(header=None)
    position = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            d = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            break
        if state.header is None:
            if not (isinstance(d, dict) and d.get("journal") == JOURNAL and _is_int(d.get("offset"))
                    and isinstance(d.get("info"), dict)):
                break
            state.header = d
        elif isinstance(d, dict) and d.get("status") == "complete":
            state.complete = True
        elif _is_entry(d) and not state.complete:
            state.entries.append(d)
        else:
            break
        position += len(line)
    state.good_bytes = position
    return state


def read_journal(path: Path) -> JournalState:
    try:
        return parse_journal(path.read_bytes())
    except OSError as e:
        raise OutputError(f"Cannot read {path}: {e.strerror or e}; delete it to start over.") from e


def settings_differences(old: dict, new: dict) -> list[str]:
    """``key: old → new`` for every setting that differs."""
    return [f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


# ----------------------------------------------------------------------------------------------
# Deciding how a run starts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How to start: ``fresh`` (write from scratch), ``resume`` (append after ``state``), or
    ``finish`` (the interrupted run had finished every spectrum; only the rename is left)."""

    action: str
    state: JournalState | None = None
    note: str = ""


def _start_over(output: Path) -> str:
    return f"delete {partial_path(output).name} and {journal_path(output).name} to start over"


def plan_run(output: Path, resume: bool, settings: dict) -> Plan:
    """Decide from the files beside ``output`` whether to start fresh, resume or only finish.

    Raises :class:`MsgptError` with what to do when the files left by an earlier run do not allow
    the asked-for start (a partial run without ``--resume``, other settings, damaged files).
    """
    partial, journal = partial_path(output), journal_path(output)
    # An empty journal is one this command just created (it holds the lock), or one a kill left
    # before its first line: either way no spectrum was finished.
    state = read_journal(journal) if journal.is_file() and journal.stat().st_size > 0 else None
    has_partial = partial.is_file()
    if not resume:
        if state is not None and state.header is not None and (state.entries or state.complete):
            raise MsgptError(
                f"{output.name} has an interrupted run ({state.counts()}, kept in {partial.name} and "
                f"{journal.name}). Add --resume to go on where it stopped, or {_start_over(output)}."
            )
        if has_partial or state is not None:
            raise MsgptError(
                f"{partial.name if has_partial else journal.name} is left from an interrupted run that finished "
                f"no spectrum. Add --resume (it starts from the beginning), or {_start_over(output)}."
            )
        return Plan("fresh")
    if state is None or state.header is None or not (state.entries or state.complete):
        return Plan("fresh", note="--resume: no interrupted run to go on with; starting from the beginning.")
    differences = settings_differences(state.header.get("settings", {}), settings)
    if state.header.get("version") != JOURNAL_VERSION:
        differences.insert(0, f"journal version: {state.header.get('version')!r} → {JOURNAL_VERSION}")
    if differences:
        raise MsgptError(
            f"--resume: the interrupted run was made with other settings ({'; '.join(differences)}). "
            f"Give the same options, inputs and model, or {_start_over(output)}."
        )
    if state.complete and not has_partial:
        if output.is_file():
            return Plan("finish", state, note=f"--resume: {output.name} was already complete.")
        raise MsgptError(f"--resume: {journal.name} says the run was complete, but neither {output.name} nor "
                         f"{partial.name} exists; delete {journal.name} to start over.")
    size = partial.stat().st_size if has_partial else -1
    if size < state.offset:
        what = "is missing" if size < 0 else f"has {size} bytes"
        raise MsgptError(
            f"--resume: {partial.name} {what}, but {journal.name} records {state.offset} bytes of finished "
            f"spectra; the output was changed after the interruption. {_start_over(output).capitalize()}."
        )
    if state.complete:
        return Plan("finish", state)
    return Plan("resume", state, note=f"--resume: going on after {state.counts()} in the interrupted run.")


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


class JournalWriter:
    """Append-only journal; every line is flushed and fsync'ed before :meth:`append` returns.

    Opening it takes an exclusive lock (where the system has ``fcntl``), so a second
    ``msgpt predict`` on the same output refuses before touching any file.
    """

    def __init__(self, path: Path):
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OutputError.from_os_error(path, e) from e
        self._lock()

    def start(self, header: dict) -> None:
        """Begin a new journal with the run's header."""
        self._truncate(0)
        self.append(header)

    def resume(self, state: JournalState) -> None:
        """Go on after the last complete line of ``state`` (a torn last line is dropped)."""
        self._truncate(state.good_bytes)

    def _truncate(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e) from e

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise MsgptError(
                f"{self.path} is locked: another msgpt predict is writing this output now. "
                "Wait for it, or choose another output file."
            ) from None

    def append(self, entry: dict) -> None:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e) from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # also releases the lock
            self._fd = -1

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def new_header(settings: dict, info: dict, offset: int) -> dict:
    return {"journal": JOURNAL, "version": JOURNAL_VERSION, "settings": settings, "info": info, "offset": offset}
