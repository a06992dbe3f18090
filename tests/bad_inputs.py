"""The corpus of bad inputs: how each one is made, and exactly what the user is told about it.

Every case is a file (or a folder, or a missing path) given to ``msgpt predict``. Record-level
cases hold a good spectrum (a real MassBank record of tests/data/fixture.mgf, TITLE ``good``)
next to the bad one(s), to show that the good one is still read. Small files are kept in
``tests/data/bad/``; large or derived ones (100,000 peaks, a cut gzip, the mzML cases edited from
tests/data/small.mzML) are made on the fly.

``EXPECTED`` is what each record comes out as: ``read``, ``read; note: ...`` (the spectrum is used,
with a note in its ``warnings``), or ``skipped: <reason>``, the reason being the reader's or, for a
record the reader accepts, the model's (:func:`engine.elucidation.pipeline.require_usable`, with a model that
supports [M+H]+ and [M+Na]+ only, like the test model; the bundled one also runs [M-H]-). File-level
problems are ``file error: <reason>``.

    python tests/bad_inputs.py corpus   # rewrite tests/data/bad/ from this file
    python tests/bad_inputs.py table    # rewrite docs/bad_inputs.md from what the reader says now
"""

from __future__ import annotations

import builtins
import contextlib
import gzip
import os
import random
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
BAD_DIR = DATA / "bad"
FIXTURE = DATA / "fixture.mgf"
SMALL_MZML = DATA / "small.mzML"
TABLE = ROOT / "docs" / "bad_inputs.md"

GOOD_BASE = "MSBNK-Antwerp_Univ-METOX_P102203_EF88"  # N-acetylphenylalanine, [M+H]+, C11H13NO3
NEGATIVE_BASE = "MSBNK-Washington_State_Univ-BML00201"  # daphnoretin, [M-H]-
MODEL = SimpleNamespace(name="MODEL", supported_adducts=("[M+H]+", "[M+Na]+"),  # stands in for a bundle
                        runnable_adducts=("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M-H2O+H]+", "[M+K]+", "[M]+"))


# ----------------------------------------------------------------------------------------------
# Building MGF text from the real fixture records
# ----------------------------------------------------------------------------------------------


def fixture_record(title: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(KEY, value), ...], [peak lines])`` of the fixture record with this TITLE."""
    for block in FIXTURE.read_text().split("END IONS"):
        lines = [line for line in block.strip().splitlines() if line and line != "BEGIN IONS"]
        fields = [tuple(line.split("=", 1)) for line in lines if "=" in line]
        if ("TITLE", title) in fields:
            return fields, [line for line in lines if "=" not in line]
    raise KeyError(title)


def record(title: str = "good", base: str = GOOD_BASE, peaks: list[str] | None = None, end: bool = True,
           **changes: str | None) -> str:
    """One MGF record from a fixture record: TITLE set, ``KEY=value`` changed (None drops the key)."""
    fields, base_peaks = fixture_record(base)
    changes = {"TITLE": title, **changes}
    out = [(k, changes.pop(k, v)) for k, v in fields]
    out += list(changes.items())
    lines = ["BEGIN IONS", *(f"{k}={v}" for k, v in out if v is not None), *(base_peaks if peaks is None else peaks)]
    return "\n".join(lines + (["END IONS", ""] if end else [""]))


GOOD_PEAKS = fixture_record(GOOD_BASE)[1]


def with_good(*bad: str) -> bytes:
    return (record("good") + "".join(bad)).encode()


def _peaks_with(replace: dict[int, str]) -> list[str]:
    """The good record's peaks with some lines replaced (by position)."""
    return [replace.get(i, line) for i, line in enumerate(GOOD_PEAKS)]


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str  # also the file name under tests/data/bad/ (committed cases)
    what: str  # the input, in words
    expected: dict[str, str]  # record id -> outcome, for every record read (before a file error)
    error: str | None = None  # "file error: ..." for the file as a whole
    content: bytes | None = None  # committed file content; None: made by `make`
    make: Callable[[Path], Path] | None = None
    many_read: str | None = None  # instead of `expected`: at least one record read, each with this outcome
    extra: dict = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        return self.content is not None


def file_case(name: str, what: str, error: str, content: bytes | None = None, **kw) -> Case:
    return Case(name, what, {}, f"file error: {error}", content, **kw)


SUPPORTED = ("supported are .mgf and .mzML files, optionally gzip-compressed (.mgf.gz, .mzML.gz), and the "
             "feature exports of MS-DIAL (.msp) and SIRIUS (.ms)")
EXAMPLES = "[M+H]+, [M+Na]+, [M-H]-, [M+NH4]+, [M-H2O+H]+, [2M+H]+, [M+2H]2+, [M+FA-H]-, [M+Cl]-"
ELEMENTS = "C, H, N, O, S, P, F, Cl, Br, I, B, Si, Se, As"
GOOD = {"good": "read"}
MAPPED = "[M+NH4]+, [M-H2O+H]+, [M+K]+, [M]+"  # what the tiny model runs by a mapping (engine.model.ion_mapping)


def _make_peaks_100k(folder: Path) -> Path:
    peaks = [f"{50 + i * 0.0015:.4f} {1 + (i * 7919) % 1000}" for i in range(100_000)]
    path = folder / "peaks_100k.mgf"
    path.write_bytes(with_good(record("bad-100k", peaks=peaks)))
    return path


def _make_gzip_cut(folder: Path) -> Path:
    rng = random.Random(0)  # incompressible ~5 KB comments: the cut comes after the first 64 KB, few records
    text = "".join(f"# {rng.randbytes(2000).hex()}\n" + record(f"good-{i}") for i in range(24))
    packed = gzip.compress(text.encode(), mtime=0)
    path = folder / "cut.mgf.gz"
    path.write_bytes(packed[: len(packed) * 3 // 4])
    return path


def _mzml(folder: Path, name: str, edit: Callable[[str], str]) -> Path:
    path = folder / name
    path.write_text(edit(SMALL_MZML.read_text()))
    return path


def _make_folder(folder: Path) -> Path:
    path = folder / "spectra.mgf"
    path.mkdir()
    return path


def _make_unreadable(folder: Path) -> Path:
    path = folder / "locked.mgf"
    path.write_bytes(with_good())
    return path


def _corrupt_first_array(text: str) -> str:
    return re.sub(r"<binary>[^<]*</binary>", "<binary>not*base64*at*all</binary>", text, count=1)


MZML_MS2_IDS = [f"controllerType=0 controllerNumber=1 scan={n}" for n in (621, 622, 624, 625, 626, 628, 629, 630)]


NO_FORMULA = ("skipped: no molecular formula: MS-GPT elucidates structures for a known formula; add FORMULA= to "
              "the record, give one (--formula, or the formula box in the app), or let msgpt predict rank formula "
              "candidates (--formulas K)")

CASES: list[Case] = [
    file_case("empty", "empty file (0 bytes), named .mgf", "the file is empty (0 bytes).", b""),
    file_case("blank", "only blank lines", "the file holds only white space.", b"\n \n\t\n"),
    file_case("binary_garbage", "binary garbage named .mgf",
              f"the file holds binary data, not text; {SUPPORTED}.", bytes(range(256)) * 8),
    file_case("not_mgf", "a text file that is not MGF, named .mgf",
              "not an MGF file: no 'BEGIN IONS' line in its first 64 KB.", b"name,mz,intensity\nx,1,2\n"),
    file_case("mzml_named_mgf", "mzML content in a file named .mgf",
              "the file is named .mgf but holds mzML; rename it to .mzML.", b"<?xml version='1.0'?>\n<mzML></mzML>\n"),
    Case("truncated", "MGF cut off inside its last record (no END IONS)",
         {**GOOD, "bad": "skipped: the file ends inside the record starting at line 27 (no END IONS); "
                         "it may be truncated"},
         content=with_good(record("bad", end=False).rsplit("\n", 20)[0] + "\n120.0")),
    Case("missing_end_ions", "a record without END IONS, followed by a good one",
         {"bad": "skipped: the record starting at line 1 has no END IONS before line 9", **GOOD},
         content=("BEGIN IONS\nTITLE=bad\nPEPMASS=208.0968\n43.0179 1074.6\n58.062 117.6\n65.0374 81.4\n"
                  "79.0526 177.4\n120.0779 41367.4\n" + record("good")).encode()),
    Case("missing_pepmass", "no PEPMASS",
         {**GOOD, "bad": "skipped: no precursor m/z (PEPMASS, or the selected ion in mzML)"},
         content=with_good(record("bad", PEPMASS=None))),
    Case("nonnumeric_pepmass", "PEPMASS that is not a number",
         {**GOOD, "bad": "skipped: line 29: PEPMASS 'abc' is not a number (m/z, optionally intensity and charge)"},
         content=with_good(record("bad", PEPMASS="abc"))),
    Case("precursor_zero", "PEPMASS=0",
         {**GOOD, "bad": "skipped: precursor m/z 0 is not a positive number; fix PEPMASS (or the selected ion "
                         "m/z in mzML)"},
         content=with_good(record("bad", PEPMASS="0"))),
    Case("precursor_10000", "PEPMASS=10000 (the formula gives 208.10)",
         {**GOOD, "bad": "skipped: formula C11H13NO3 gives [M+H]+ m/z 208.0968 but PEPMASS is 10000 (Δ 9791.90 Da, "
                         "47100000 ppm; tolerance 1 Da, the precision PEPMASS is written with (0 decimals)); "
                         "fix FORMULA or ADDUCT"},
         content=with_good(record("bad", PEPMASS="10000"))),
    Case("nan_intensities", "some peaks with NaN intensity",
         {**GOOD, "bad": "read; note: 2 peaks with zero, negative or NaN intensity or m/z dropped"},
         content=with_good(record("bad", peaks=_peaks_with({0: "43.01790 NaN", 2: "65.03740 nan"})))),
    Case("negative_intensities", "a peak with negative intensity",
         {**GOOD, "bad": "read; note: 1 peak with zero, negative or NaN intensity or m/z dropped"},
         content=with_good(record("bad", peaks=_peaks_with({1: "58.06200 -117.6"})))),
    Case("zero_intensities", "some peaks with zero intensity",
         {**GOOD, "bad": "read; note: 3 peaks with zero, negative or NaN intensity or m/z dropped"},
         content=with_good(record("bad", peaks=_peaks_with({0: "43.01790 0", 1: "58.06200 0.0", 3: "79.05260 0"})))),
    Case("all_peaks_unusable", "every peak with zero, negative or NaN intensity",
         {**GOOD, "bad": "skipped: no usable peaks: all 3 peaks have zero, negative or NaN intensity or m/z"},
         content=with_good(record("bad", peaks=["43.0179 0", "58.062 -5", "120.0779 nan"]))),
    Case("nonnumeric_intensity", "a peak whose intensity is not a number",
         {**GOOD, "bad": "skipped: line 49: peak '120.07790 high' is not 'm/z intensity' (two numbers)"},
         content=with_good(record("bad", peaks=_peaks_with({5: "120.07790 high"})))),
    Case("mz_only_peak", "a peak line with only an m/z",
         {**GOOD, "bad": "skipped: line 44: peak '43.01790' is not 'm/z intensity' (two numbers)"},
         content=with_good(record("bad", peaks=_peaks_with({0: "43.01790"})))),
    Case("duplicate_mz", "two peaks with the same m/z (kept; annotation merges them)", {**GOOD, "bad": "read"},
         content=with_good(record("bad", peaks=GOOD_PEAKS[:6] + ["120.07790 200.0"] + GOOD_PEAKS[6:]))),
    Case("unsorted_peaks", "peaks not sorted by m/z (sorted on reading)", {**GOOD, "bad": "read"},
         content=with_good(record("bad", peaks=GOOD_PEAKS[::-1]))),
    Case("no_peaks", "a record with 0 peaks",
         {**GOOD, "bad": "skipped: no peaks: the record has no 'm/z intensity' lines"},
         content=with_good(record("bad", peaks=[]))),
    Case("peaks_100k", "a record with 100,000 peaks (generated)", {**GOOD, "bad-100k": "read"},
         make=_make_peaks_100k),
    Case("charge_2", "CHARGE=2+ (no adduct)",
         {**GOOD, "bad": "skipped: charge 2: only singly charged precursors (charge 1+ or 1-) are supported"},
         content=with_good(record("bad", CHARGE="2+", ADDUCT=None))),
    Case("charge_0", "CHARGE=0 (unknown; the adduct gives it)", {**GOOD, "bad": "read"},
         content=with_good(record("bad", CHARGE="0"))),
    Case("several_charges", "CHARGE=2+ and 3+",
         {**GOOD, "bad": "skipped: CHARGE lists several charges (2+ and 3+); give one, e.g. 1+"},
         content=with_good(record("bad", CHARGE="2+ and 3+"))),
    Case("unknown_adduct_group", "an adduct with an unknown group, [M+Xy]+",
         {**GOOD, "bad": "skipped: Unknown group 'Xy' in adduct '[M+Xy]+'; write groups as formulas (H, Na, NH4, "
                         "H2O, CH3COO) or one of FA, ACN, HAc, AcOH, AcO, OAc, MeOH, EtOH, IPA, IsoProp, DMSO, TFA "
                         f"(examples: {EXAMPLES})."},
         content=with_good(record("bad", ADDUCT="[M+Xy]+"))),
    Case("unparsable_adduct", "an adduct that is a word, 'protonated'",
         {**GOOD, "bad": "skipped: Cannot parse adduct 'protonated'; write it like [M+H]+ ([kM, then +/- groups, "
                         f"then the charge); examples: {EXAMPLES}."},
         content=with_good(record("bad", ADDUCT="protonated"))),
    Case("unsupported_adduct", "an adduct the model neither was trained on nor maps onto one it was, [M+Li]+",
         {**GOOD, "bad": "skipped: adduct [M+Li]+ is not supported by the model MODEL: it runs [M+H]+, [M+Na]+ "
                         f"natively (it was trained on them) and {MAPPED} by mapping"},
         content=with_good(record("bad", ADDUCT="[M+Li]+", PEPMASS="214.1050"))),
    Case("negative_mode", "a negative-mode spectrum ([M-H]-, a real MassBank record)",
         {**GOOD, "bad": "skipped: adduct [M-H]- is not supported by the model MODEL: it runs [M+H]+, [M+Na]+ "
                         f"natively (it was trained on them) and {MAPPED} by mapping"},
         content=with_good(record("bad", base=NEGATIVE_BASE))),
    Case("polarity_conflict", "IONMODE=negative with ADDUCT [M+H]+",
         {**GOOD, "bad": "skipped: conflicting polarity: IONMODE is negative but CHARGE is 1+ and ADDUCT [M+H]+ "
                         "is positive; fix the one that is wrong"},
         content=with_good(record("bad", IONMODE="negative"))),
    Case("formula_unsupported_element", "a formula with an element the model lacks (a sodium salt)",
         {**GOOD, "bad": f"skipped: Unsupported element 'Na' in formula 'C11H12NNaO3'; supported elements are "
                         f"{ELEMENTS}. If this is the ion's formula, give the neutral molecule's and put Na in the "
                         "adduct (e.g. [M+Na]+)."},
         content=with_good(record("bad", FORMULA="C11H12NNaO3"))),
    Case("formula_lowercase", "a formula typed in lower case",
         {**GOOD, "bad": "skipped: Cannot parse formula 'c11h13no3': element symbols start with a capital letter "
                         "followed by an optional lowercase letter. Did you mean 'C11H13NO3'?"},
         content=with_good(record("bad", FORMULA="c11h13no3"))),
    Case("formula_typo_cl", "a formula with 'CL' for chlorine",
         {**GOOD, "bad": f"skipped: Unsupported element 'L' in formula 'C11H12CLNO3'; supported elements are "
                         f"{ELEMENTS}. Did you mean 'C11H12ClNO3'?"},
         content=with_good(record("bad", FORMULA="C11H12CLNO3"))),
    Case("formula_with_charge", "an ion formula with its charge, C11H14NO3+",
         {**GOOD, "bad": "skipped: Cannot parse formula 'C11H14NO3+': character '+' is not allowed (give the "
                         "neutral formula; the charge comes from the adduct)."},
         content=with_good(record("bad", FORMULA="C11H14NO3+"))),
    Case("formula_mismatch", "a formula that does not fit the precursor m/z",
         {**GOOD, "bad": "skipped: formula C11H15NO3 gives [M+H]+ m/z 210.1125 but PEPMASS is 208.097 (Δ 2.02 Da, "
                         "9590 ppm; tolerance 0.01 Da); fix FORMULA or ADDUCT"},
         content=with_good(record("bad", FORMULA="C11H15NO3"))),
    Case("no_formula", "no FORMULA at all", {**GOOD, "bad": NO_FORMULA},
         content=with_good(record("bad", FORMULA=None))),
    Case("invalid_smiles", "a reference SMILES RDKit cannot parse",
         {**GOOD, "bad": "read; note: reference SMILES 'CC(=O)N[C@@H](Cc1ccccc1)C(=O' cannot be parsed by RDKit "
                         "and was dropped"},
         content=with_good(record("bad", SMILES="CC(=O)N[C@@H](Cc1ccccc1)C(=O"))),
    Case("mslevel_1", "an MS1 record (MSLEVEL=1)",
         {**GOOD, "bad": "skipped: MSLEVEL is '1'; only MS2 spectra are used"},
         content=with_good(record("bad", MSLEVEL="1"))),
    Case("rtinseconds_text", "RTINSECONDS that is not a number",
         {**GOOD, "bad": "read; note: line 44: RTINSECONDS 'early' is not a number of seconds; retention time "
                         "left empty"},
         content=with_good(record("bad", RTINSECONDS="early"))),
    Case("duplicate_titles", "two records with the same TITLE (kept apart by record number)",
         {"twin": "read", "twin (record 1)": "read", "good": "read"},
         content=(record("twin") + record("twin") + record("good")).encode()),
    Case("latin1", "non-UTF-8 text: a Latin-1 NAME",
         {**GOOD, "bad": "read; note: NAME held bytes that are not UTF-8 (Latin-1?), shown as '\ufffd'; save the "
                         "file as UTF-8 to keep them"},
         content=record("good").encode() + record("bad", NAME="N-Acetyl-L-phénylalanine").encode("latin-1")),
    Case("utf16", "the whole file in UTF-16 (with byte-order mark)", {**GOOD, "bad": "read"},
         content=(record("good") + record("bad")).encode("utf-16")),
    Case("utf8_bom", "UTF-8 with a byte-order mark", {**GOOD, "bad": "read"},
         content=b"\xef\xbb\xbf" + with_good(record("bad"))),
    Case("crlf", "Windows line endings (CR LF)", {**GOOD, "bad": "read"},
         content=with_good(record("bad")).replace(b"\n", b"\r\n")),
    Case("cr_only", "old Mac line endings (CR only)", {**GOOD, "bad": "read"},
         content=with_good(record("bad")).replace(b"\n", b"\r")),
    file_case("gzip_empty", "a gzip file holding nothing", "the file is empty after decompression.",
              gzip.compress(b"", mtime=0)),
    file_case("gzip_corrupt", "a gzip file with a corrupt body",
              "the gzip data is truncated or corrupt (Error -3 while decompressing data: invalid stored block "
              "lengths).", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00" + bytes(32) + b"garbage"),
    Case("gzip_cut", "a gzip file cut short (generated: 24 records of 5 KB, the last quarter of the bytes gone)", {},
         "file error: the gzip data is truncated or corrupt (Compressed file ended before the end-of-stream "
         "marker was reached); records before it were read.",
         make=_make_gzip_cut, many_read="read"),
    file_case("mzml_no_ms2", "an mzML with MS1 scans only (generated from small.mzML)",
              "no MS2 spectra: the file holds 10 spectra (10 of MS level 1); MS-GPT needs MS/MS (MS2) scans.",
              make=lambda d: _mzml(d, "ms1_only.mzML", lambda t: t.replace('name="ms level" value="2"',
                                                                           'name="ms level" value="1"'))),
    Case("mzml_malformed", "a malformed mzML, cut off mid-way (generated from small.mzML)",
         {i: NO_FORMULA for i in MZML_MS2_IDS[:3]},
         "file error: malformed XML, the file may be truncated or damaged (Premature end of data in tag "
         "binary at line 360, column 371).",
         make=lambda d: _mzml(d, "cut.mzML", lambda t: t[: len(t) // 2])),
    Case("mzml_corrupt_array", "an mzML scan whose m/z array is not base64 (generated from small.mzML)",
         {MZML_MS2_IDS[0]: "skipped: its m/z array cannot be decoded (Incorrect padding); the file is damaged",
          **{i: NO_FORMULA for i in MZML_MS2_IDS[1:]}},
         make=lambda d: _mzml(d, "bad_array.mzML", _corrupt_first_array)),
    file_case("folder", "a folder passed as the input file",
              "this is a folder, not a file; choose an .mgf or .mzML file.", make=_make_folder),
    file_case("missing", "a path that does not exist", "no such file; check the path and the file name.",
              make=lambda d: d / "nope.mgf"),
    file_case("unreadable", "a file without read permission (simulated when running as root)",
              "no permission to read this file.", make=_make_unreadable, extra={"unreadable": True}),
]


# ----------------------------------------------------------------------------------------------
# Running a case
# ----------------------------------------------------------------------------------------------


def case_path(case: Case, folder: Path) -> Path:
    """The input of ``case``: its committed file, or one made in ``folder``."""
    if case.committed:
        return BAD_DIR / case_file_name(case)
    return case.make(folder)


def case_file_name(case: Case) -> str:
    if case.content is not None and case.content[:2] == b"\x1f\x8b":
        return f"{case.name}.mgf.gz"
    return f"{case.name}.mgf"


@contextlib.contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """Make ``path`` unreadable: chmod 000, or, for root (who reads anything), an ``open`` that refuses."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        path.chmod(0)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    real_open = builtins.open
    target = os.path.realpath(path)

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) == target:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    builtins.open = guarded
    try:
        yield
    finally:
        builtins.open = real_open


def describe(item, model=MODEL) -> str:
    """The outcome of one item of iter_spectra, in the words of EXPECTED."""
    from engine.elucidation.pipeline import require_usable
    from engine.errors import SpectrumError
    from engine.spectra.spectrum import SkippedRecord

    if isinstance(item, SkippedRecord):
        return f"skipped: {item.reason}"
    try:
        require_usable(model, item)
    except SpectrumError as e:
        return f"skipped: {e}"
    notes = item.metadata.get("warnings")
    return f"read; note: {notes}" if notes else "read"


def run_case(case: Case, folder: Path) -> tuple[dict[str, str], str | None]:
    """``({record id: outcome}, file error or None)`` of reading the case's input."""
    from engine.errors import InputFileError
    from engine.spectra.io import iter_spectra

    path = case_path(case, folder)
    outcomes: dict[str, str] = {}
    guard = unreadable(path) if case.extra.get("unreadable") else contextlib.nullcontext()
    with guard:
        try:
            for item in iter_spectra(path):
                key = item.spectrum_id if hasattr(item, "spectrum_id") else item.id
                if key in outcomes:  # a repeated TITLE
                    key = f"{key} (record {item.index})"
                outcomes[key] = describe(item)
        except InputFileError as e:
            return outcomes, f"file error: {e.reason}"
    return outcomes, None


# ----------------------------------------------------------------------------------------------
# The corpus files and the table in docs/
# ----------------------------------------------------------------------------------------------


def write_corpus() -> None:
    BAD_DIR.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if case.committed:
            (BAD_DIR / case_file_name(case)).write_bytes(case.content)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(folder: Path) -> str:
    """docs/bad_inputs.md, from what the reader says now (``folder`` holds the generated inputs)."""
    lines = [
        "# Bad inputs and what msgpt says about them",
        "",
        "Generated by `python tests/bad_inputs.py table` from the corpus in `tests/bad_inputs.py` (files in",
        "`tests/data/bad/`); `tests/test_bad_inputs.py` checks that every message below is exactly what the",
        "reader says, that the good spectrum beside each bad record is still read, and that this table is",
        "up to date. Each record-level file holds a good record (TITLE `good`, a real MassBank spectrum)",
        "beside the bad one(s).",
        "",
        "* **file error**: `msgpt predict` prints `error: PATH: message` and goes on with the other",
        "  inputs; the app shows the message.",
        "* **skipped**: the record is listed with its reason in the summary (`msgpt predict`) or the",
        "  spectra table (app); the other records of the file go on. `MODEL` stands for the model's name",
        "  (a model trained on [M+H]+ and [M+Na]+ only, like the test model; the bundled one also runs [M-H]-).",
        "* **read; note**: the spectrum is used; the note is listed under `Notes on N processed spectra`",
        "  and kept in the spectrum's `warnings`.",
        "",
        "| # | input | file | what the user is told |",
        "| --- | --- | --- | --- |",
    ]
    for n, case in enumerate(CASES, 1):
        outcomes, error = run_case(case, folder)
        name = f"`tests/data/bad/{case_file_name(case)}`" if case.committed else "generated"
        by_outcome: dict[str, list[str]] = {}
        for key, outcome in outcomes.items():
            if key != "good" and not case.many_read:
                by_outcome.setdefault(outcome, []).append(f"`{key}`")
        said = [f"{', '.join(keys)}: {outcome}" for outcome, keys in by_outcome.items()]
        if error:
            before = f"{len(outcomes)} records read, then " if case.many_read else ""
            said.append(f"{before}{error}")
        lines.append(f"| {n} | {_cell(case.what)} | {name} | {_cell('<br>'.join(said))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    import tempfile

    sys.path.insert(0, str(ROOT))
    if argv == ["corpus"]:
        write_corpus()
        print(f"wrote {sum(c.committed for c in CASES)} files to {BAD_DIR}")
    elif argv == ["table"]:
        with tempfile.TemporaryDirectory() as tmp:
            TABLE.write_text(render_table(Path(tmp)), encoding="utf-8")
        print(f"wrote {TABLE}")
    else:
        raise SystemExit("usage: python tests/bad_inputs.py corpus|table")


if __name__ == "__main__":
    main(sys.argv[1:])
