"""The app's libraries of known compounds, without Qt: structure libraries (CSV/TSV/SDF/SMILES lists, the bundled
one) and spectral libraries (MSP/MGF, the bundled MassBank subset), which of them are on, what the settings keep
of them, and the job that opens one in the background (a generator of progress, like :mod:`msgpt_gui.logic.jobs`).

Opening goes through the engine (:func:`engine.library.open_library`, :func:`engine.spectral_library.open_spectral_library`
and their bundled variants): a file is indexed into the data folder once and opened in a moment afterwards.
The enabled libraries reach every :class:`~engine.elucidation.pipeline.SpectrumSession` the app makes, as one
sequence of StructureLibrary and SpectralLibrary objects; :func:`library_key` tells two such sets apart (a set
that changed re-ranks), :func:`library_refs` is what a project records of them.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import MsgptError
from engine.files.project import LibraryRef
from engine.progress import CancelFn

STRUCTURE = "structure"
SPECTRAL = "spectral"
KIND_LABELS = {STRUCTURE: "structures", SPECTRAL: "spectra"}
STRUCTURE_SUFFIXES = (".csv", ".tsv", ".sdf", ".sd", ".mol", ".smi", ".smiles", ".txt")
SPECTRAL_SUFFIXES = (".msp", ".mgf")
STRUCTURE_FILTER = "Structure libraries (*.csv *.tsv *.sdf *.smi *.txt *.csv.gz *.tsv.gz *.sdf.gz *.smi.gz);;All files (*)"
SPECTRAL_FILTER = "Spectral libraries (*.msp *.mgf *.msp.gz *.mgf.gz);;All files (*)"
BUNDLED_STRUCTURES = "bundled:structure"  # the path a bundled library is kept under in the settings
BUNDLED_SPECTRA = "bundled:spectral"


class LibraryKindError(MsgptError):
    """A file whose name says neither a structure library nor a spectral library."""


def kind_of_path(path: str | Path) -> str:
    """:data:`STRUCTURE` or :data:`SPECTRAL` by the file's name (``.gz`` looked through); raises
    :class:`LibraryKindError` naming the file and the formats that are read."""
    name = Path(path).name.lower().removesuffix(".gz")
    if name.endswith(SPECTRAL_SUFFIXES):
        return SPECTRAL
    if name.endswith(STRUCTURE_SUFFIXES):
        return STRUCTURE
    raise LibraryKindError(
        f"{path}: not a library file the app reads. Structure libraries are CSV/TSV (with a SMILES or InChI "
        "column), SDF or one SMILES a line (.smi); spectral libraries are MSP or MGF files (each may be .gz).")


@dataclass
class LibrarySource:
    """One library of the manager: where it comes from, whether it is on, and (once opened) the library."""

    kind: str  # STRUCTURE or SPECTRAL
    path: str  # the file, or BUNDLED_STRUCTURES / BUNDLED_SPECTRA
    enabled: bool = True
    library: object | None = None  # StructureLibrary / SpectralLibrary once opened
    error: str = ""  # why it could not be opened
    state: str = "waiting"  # "waiting", "opening", "open", "failed", "cancelled"

    @property
    def bundled(self) -> bool:
        return self.path in (BUNDLED_STRUCTURES, BUNDLED_SPECTRA)

    @property
    def name(self) -> str:
        if self.library is not None and getattr(self.library, "name", ""):
            return str(self.library.name)
        if self.bundled:
            return "MS-GPT bundled " + ("structures" if self.kind == STRUCTURE else "spectra")
        return Path(self.path).name

    @property
    def kind_label(self) -> str:
        return "structure library" if self.kind == STRUCTURE else "spectral library"

    def counts(self) -> str:
        """What it holds, in a few words ('' until opened)."""
        lib = self.library
        if lib is None:
            return ""
        if self.kind == STRUCTURE:
            return f"{len(lib):,} structures"
        searchable = sum(lib.polarity_counts().values())
        return f"{searchable:,} searchable spectra of {lib.structures():,} structures"

    def status_text(self) -> str:
        if self.state == "failed":
            return f"failed: {self.error}"
        return {"waiting": "waiting to open", "opening": "opening…", "open": "open" if self.enabled else "off",
                "cancelled": "not opened (cancelled)"}.get(self.state, self.state)

    def setting(self) -> dict:
        return {"kind": self.kind, "path": self.path, "enabled": bool(self.enabled)}


def default_sources() -> list[LibrarySource]:
    """The bundled structure and spectral libraries, on."""
    return [LibrarySource(STRUCTURE, BUNDLED_STRUCTURES), LibrarySource(SPECTRAL, BUNDLED_SPECTRA)]


def sources_from_setting(saved) -> list[LibrarySource]:
    """The libraries the settings keep (a list of ``{"kind", "path", "enabled"}``); the bundled ones are added
    (on) when the setting does not name them, so an older settings file gets them. Entries that are not
    libraries are dropped."""
    out: list[LibrarySource] = []
    seen = set()
    for item in saved if isinstance(saved, list) else []:
        if not isinstance(item, dict) or item.get("kind") not in (STRUCTURE, SPECTRAL) or not item.get("path"):
            continue
        path = str(item["path"])
        if path in seen:
            continue
        seen.add(path)
        enabled = item.get("enabled", True)
        enabled = enabled.lower() in ("1", "true", "yes") if isinstance(enabled, str) else bool(enabled)
        out.append(LibrarySource(str(item["kind"]), path, enabled))
    for default in default_sources():
        if default.path not in seen:
            out.insert(0 if default.kind == STRUCTURE else min(1, len(out)), default)
    return out


def enabled_libraries(sources: Sequence[LibrarySource]) -> tuple:
    """The opened libraries that are on, in the manager's order: what sessions search."""
    return tuple(s.library for s in sources if s.enabled and s.library is not None)


def library_kind(library) -> str:
    return SPECTRAL if hasattr(library, "polarity_counts") else STRUCTURE


def library_refs(libraries: Sequence) -> tuple[LibraryRef, ...]:
    """What a project records of the libraries a result was ranked with: name, kind and checksum."""
    return tuple(LibraryRef(str(lib.name), library_kind(lib), str(lib.checksum)) for lib in libraries)


def library_key(libraries: Sequence) -> tuple:
    """Equal for the same libraries (by kind and checksum, in order); ``()`` for none."""
    return tuple((ref.kind, ref.checksum) for ref in library_refs(libraries))


def refs_key(refs: Sequence[LibraryRef]) -> tuple:
    return tuple((ref.kind, ref.checksum) for ref in refs)


@dataclass(frozen=True)
class LibraryOpening:
    """Progress of opening a library: ``done`` of ``total`` (bytes of its file), and what is being done."""

    done: int
    total: int
    text: str


def open_source(kind: str, path: str, cancel: CancelFn | None = None,
                folder: str | Path | None = None) -> Generator[LibraryOpening, None, object]:
    """Open (indexing on first use) the library of ``path`` (or a bundled one); returns it. Raises the engine's
    :class:`~engine.library.LibraryError` / :class:`~engine.spectral_library.SpectralLibraryError`, which name
    the file, and :class:`~engine.errors.Cancelled`."""
    if kind == STRUCTURE:
        from engine.library import open_bundled_library, open_library

        gen = open_bundled_library(cancel, folder) if path == BUNDLED_STRUCTURES else \
            open_library(path, cancel=cancel, folder=folder)
    else:
        from engine.spectral_library import open_bundled_spectral_library, open_spectral_library

        gen = open_bundled_spectral_library(cancel, folder) if path == BUNDLED_SPECTRA else \
            open_spectral_library(path, cancel=cancel, folder=folder)
    while True:
        try:
            ev = next(gen)
        except StopIteration as stop:
            library = stop.value
            if kind == STRUCTURE:  # a structure library the user adds is a suspect list, as in msgpt predict
                library.suspect = path != BUNDLED_STRUCTURES
            return library
        yield LibraryOpening(int(ev.done), int(ev.total), str(ev.text))


ORIGIN_FILTERS = (("all", "All origins"), ("de_novo", "De novo"), ("library", "From libraries"))


def origin_accepted(origin: str, choice: str) -> bool:
    """Whether a candidate of ``origin`` (``de_novo``, ``structure_library``, ``spectral_library``, several joined
    by ``;``) is shown by the filter ``choice`` of :data:`ORIGIN_FILTERS`: "de_novo" shows what the model drew
    (also when a library holds it too), "library" what a library gave."""
    parts = set((origin or "de_novo").split(";"))
    if choice == "de_novo":
        return "de_novo" in parts
    if choice == "library":
        return bool(parts - {"de_novo"})
    return True


def origin_label(origin: str) -> str:
    """The Origin column's text: ``de novo``, ``structure library``, ``spectral library`` (several joined by ``+``)."""
    return " + ".join(p.replace("_", " ") for p in (origin or "de_novo").split(";") if p)


def entry_level(entry):
    """The identification level (:class:`engine.insight.identification.IdentificationLevel`) of an entry's complete
    results (a spectrum run for several formulas: the best answer of them); None before a run."""
    from engine.insight.identification import identification_level

    results = [r for r in entry.results() if not r.partial]
    return identification_level(results) if results else None


IDENTIFIED_TEXT = "identified (level 2a)"  # what stands for the confidence when a reference spectrum identifies rank 1


def identification_words(matches) -> tuple[str, str]:
    """What the detail pane says of an identification beside its match, from the result's identity search
    ``matches``: (its calibrated confidence, e.g. "confidence 93%", "" without one; the isomers of its formula whose
    references are nearly as similar, e.g. "or its isomer vitexin, similarity 0.93", "" without any: then the level
    is 3, not 2a)."""
    from engine.model.confidence import identification_confidence
    from engine.spectral_library.identity import close_isomers

    p = identification_confidence(matches) if matches is not None else None
    sure = "" if p is None else f"confidence {format_probability(p)}"
    return sure, "; ".join(i.text() for i in close_isomers(matches))


def format_probability(p: float) -> str:
    """A probability as the app writes it: whole percent, "<1%" and ">99%" at the ends."""
    return "<1%" if p < 0.01 else ">99%" if p > 0.99 else f"{p:.0%}"


def ran_runs(entry) -> list:
    """What of ``entry`` ran: its formula runs with a result, or the entry itself when it has one."""
    return [r for r in entry.formula_runs if r.result is not None] or ([entry] if entry.result is not None else [])


def stale_entries(entries: Sequence, current) -> list:
    """The listed entries with results ranked with other libraries than those on now (``current(entry)``: whether
    an entry, or a formula run, searched them): what a change of libraries re-runs."""
    out = []
    for e in entries:
        ran = ran_runs(e)
        if ran and not all(current(r) for r in ran):
            out.append(e)
    return out


def share_stale_runs(entries: Sequence, share: float) -> list:
    """What has a suspect-list rank 1 whose confidence was worked out for another share of the suspect lists'
    matches expected present than ``share`` (``QueryParams.suspects_present``): each such entry's formula runs, or
    the entry itself, for a re-rank that draws nothing. The share moves no ranking, so the rest keep their results;
    a compound group's members follow their lead, which is listed."""
    out = []
    for e in entries:
        if getattr(e, "group_lead", None) is not None:
            continue
        ran = ran_runs(e)
        if any(r.result.params.suspects_present != share and r.result.candidates
               and r.result.candidates[0].suspect for r in ran):
            out.extend(ran)
    return out


def libraries_rerun_text(n: int, seconds: float, changes: Sequence[tuple[str, object]]) -> str:
    """What a re-run for other libraries did, for the status bar: the spectra re-ranked (samples kept) and the
    formula runs the libraries added (``("ran", run)``) or no longer add (``("dropped", run)``)."""
    from .formulas import run_label

    ran = [r for what, r in changes if what == "ran"]
    dropped = [r for what, r in changes if what == "dropped"]
    text = (f"Libraries changed: re-ranked {n} spectr{'um' if n == 1 else 'a'} with the libraries on now, their "
            f"samples kept ({seconds:.1f} s)")
    if ran:
        names = ", ".join(run_label(r, short=True) for r in ran[:3]) + (", …" if len(ran) > 3 else "")
        text += f"; ran {len(ran)} new formula{'' if len(ran) == 1 else 's'} the libraries add ({names})"
    if dropped:
        text += f"; dropped {len(dropped)} formula run{'' if len(dropped) == 1 else 's'} no library adds now"
    return text + "."
