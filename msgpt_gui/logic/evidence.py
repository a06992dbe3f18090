"""A candidate's evidence as the candidates table shows it, without Qt: compact origin tags (full text in the
tooltip), the compound name of a library or suspect structure, the reference spectrum it matched, and its
InChIKey (computed from the SMILES where the engine gave none: a library structure no sample drew).

Origin tags, in this order, joined by `` · ``:

=================  ======================================================================================
``✔ 2a``           a reference spectrum identifies it (level 2a: identity match past the calibrated threshold)
``◆ <list>``       a suspect list holds it: the list's own name (shortened to :data:`TAG_CHARS`)
``library``        a structure library (the bundled one, or one of yours that is not a suspect list); left out
                   when a suspect list holds it too (the tooltip names every library)
``spectrum``       a reference spectrum of it matched, above the engine's floor, without identifying it
``de novo``        the model drew it
=================  ======================================================================================

A spectral hit below the engine's floor is no part of the origin (a hit that explains nothing is no evidence);
it stays in the tooltip and the details.
"""

from __future__ import annotations

from functools import lru_cache

from engine.elucidation.ranking import DE_NOVO, SPECTRAL_LIBRARY, STRUCTURE_LIBRARY
from engine.library.cache import BUNDLED_NAME as BUNDLED_STRUCTURES_NAME

TAG_CHARS = 14  # a suspect list's name in the Origin cell is cut to this many characters ("…" ends it)
IDENTIFIED_TAG, LIBRARY_TAG, SPECTRUM_TAG, DE_NOVO_TAG = "✔ 2a", "library", "spectrum", "de novo"
#: the widest line of an Origin cell (one tag a line; the table's column is sized for it: no cell is ever elided)
ORIGIN_SAMPLE = f"◆ {'x' * TAG_CHARS}"


def _parts(c) -> set[str]:
    return set(p for p in (c.origin or DE_NOVO).split(";") if p)


def library_names(c) -> list[str]:
    """The structure libraries that hold the candidate (in the engine's order)."""
    return [n for n in (c.library or "").split(";") if n]


def suspect_list(c) -> str:
    """The name of the suspect list that holds the candidate ('' when none does)."""
    if not getattr(c, "suspect", False):
        return ""
    names = [n for n in library_names(c) if n != BUNDLED_STRUCTURES_NAME]
    return names[0] if names else (library_names(c) or ["suspect list"])[0]


LIST_SUFFIXES = (".csv", ".tsv", ".sdf", ".sd", ".smi", ".smiles", ".txt")


def _short(name: str) -> str:
    """A list's name for a tag: without its file's suffix (``pesticides.csv.gz`` -> ``pesticides``), cut to
    :data:`TAG_CHARS`."""
    low = name.lower().removesuffix(".gz")
    for suffix in LIST_SUFFIXES:
        if low.endswith(suffix):
            name = name[: len(low) - len(suffix)]
            break
    return name if len(name) <= TAG_CHARS else name[: TAG_CHARS - 1].rstrip() + "…"


def origin_tags(c) -> list[str]:
    """The Origin cell's tags (module notes), never empty."""
    parts = _parts(c)
    tags = []
    if c.identified:
        tags.append(IDENTIFIED_TAG)
    suspect = suspect_list(c)
    if suspect:
        tags.append(f"◆ {_short(suspect)}")
    if STRUCTURE_LIBRARY in parts and not suspect:
        tags.append(LIBRARY_TAG)
    if SPECTRAL_LIBRARY in parts and not c.identified:
        tags.append(SPECTRUM_TAG)
    if DE_NOVO in parts:
        tags.append(DE_NOVO_TAG)
    return tags or [DE_NOVO_TAG]


def origin_text(c) -> str:
    """The tags on one line (the summary, the details' title)."""
    return " · ".join(origin_tags(c))


def origin_cell(c) -> str:
    """The Origin cell: one tag a line (the table's rows are as tall as a depiction)."""
    return "\n".join(origin_tags(c))


def spectral_line(ev) -> str:
    """One line on a reference-spectrum match."""
    return (f"{'Identified by' if ev.identified else 'Matched'} reference spectrum {ev.accession} ({ev.library}): "
            f"entropy similarity {ev.similarity:.2f}, {ev.matched_peaks} matched peaks")


def origin_tooltip(c) -> str:
    """The origin in full: each source by name, the suspect list, the library identifier and name, the reference
    spectrum match (also a weak one the origin leaves out)."""
    parts = _parts(c)
    lines = []
    if c.identified:
        lines.append("✔ Identified (level 2a): a reference spectrum match passes the calibrated threshold")
    suspect = suspect_list(c)
    if suspect:
        lines.append(f"◆ Suspect list: {suspect}")
    others = [n for n in library_names(c) if n != suspect]
    if others:
        lines.append(f"Structure librar{'y' if len(others) == 1 else 'ies'}: {', '.join(others)}")
    if c.library_id:
        lines.append(f"Identifier: {c.library_id}")
    if c.compound_name:
        lines.append(f"Name: {c.compound_name}")
    if DE_NOVO in parts:
        lines.append(f"De novo: drawn {c.count} time{'' if c.count == 1 else 's'} by the model")
    ev = c.spectral
    if ev is not None:
        lines.append(spectral_line(ev))
        if SPECTRAL_LIBRARY not in parts:
            lines.append("(below the floor of spectral evidence: not counted in the origin)")
    return "\n".join(lines)


def name_text(c) -> str:
    """The compound name of a library, suspect or reference-spectrum structure ('' for a de novo one)."""
    if c.compound_name:
        return c.compound_name
    ev = c.spectral
    return ev.reference_name if ev is not None and ev.reference_name else ""


def name_tooltip(c) -> str:
    name = name_text(c)
    if not name:
        return "De novo structure: no library names it"
    where = suspect_list(c) or ", ".join(library_names(c)) or (c.spectral.library if c.spectral else "")
    return f"{name}" + (f"\nfrom {where}" if where else "") + (f", {c.library_id}" if c.library_id else "")


def reference_text(c, is_file_reference: bool = False) -> str:
    """The Reference cell: the accession of the reference spectrum it matched (with ★ when the file names this
    structure as the spectrum's reference)."""
    ev = c.spectral
    text = ev.accession if ev is not None else ""
    return f"★ {text}".strip() if is_file_reference else text


def reference_tooltip(c, is_file_reference: bool = False) -> str:
    lines = []
    if is_file_reference:
        lines.append("★ The reference structure given in the file")
    ev = c.spectral
    if ev is not None:
        lines.append(spectral_line(ev))
        extra = [f"{k} {v}" for k, v in (("adduct", ev.adduct), ("collision energy", ev.collision_energy),
                                          ("instrument", ev.instrument_type), ("licence", ev.license),
                                          ("contributor", ev.contributor)) if v]
        if extra:
            lines.append(", ".join(extra))
    return "\n".join(lines) or "No reference spectrum of this structure matched"


@lru_cache(maxsize=4096)
def _inchikey_of(smiles: str) -> str:
    from engine.chem import molecules as chem

    mol = chem.mol_from_smiles(smiles)
    return chem.inchikey(mol) if mol is not None else ""


def inchikey(c) -> str:
    """The candidate's full InChIKey: the engine's, else computed from its SMILES."""
    return c.inchikey or _inchikey_of(c.smiles)
