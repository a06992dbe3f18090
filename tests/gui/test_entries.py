"""The app's document without Qt: IDs, what stops a spectrum from running, the filter, typed values."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.spectra.spectrum import NO_FRAGMENTS_NOTE, SkippedRecord
from msgpt_gui.logic.editing import ERROR, INCOMPLETE, OK, apply_formula, check_edit
from msgpt_gui.logic.entries import SpectraFilter, SpectrumEntry, Status, compact_id, format_mz
from msgpt_gui.logic.jobs import FileSummary, reason_kind

ADDUCTS = ("[M+H]+", "[M+Na]+")


@pytest.mark.parametrize("native, short", [
    ("controllerType=0 controllerNumber=1 scan=621", "scan=621"),
    ("sample=1 period=1 cycle=812 experiment=3", "cycle=812 experiment=3"),
    ("function=2 process=0 scan=57", "scan=57"),
    ("scan=12", "scan=12"),
    ("MSBNK-Eawag-EA290310", "MSBNK-Eawag-EA290310"),
    ("a title with = signs = here", "a title with = signs = here"),
])
def test_compact_id_keeps_what_tells_scans_apart(native, short):
    assert compact_id(native) == short


def entry(make_spectrum, key=0, **fields):
    return SpectrumEntry.from_item(key, make_spectrum(**fields))


def skipped(reason="no precursor m/z (PEPMASS, or the selected ion in mzML)", peaks=True):
    mz = np.array([57.07, 120.08, 161.06]) if peaks else None
    intensity = np.array([10.0, 100.0, 30.0]) if peaks else None
    return SpectrumEntry.from_item(9, SkippedRecord("run.mzML", 4, "scan=44", reason, mz=mz, intensity=intensity,
                                                    retention_time=250.0, polarity="positive"))


def test_blockers_say_what_is_missing_in_a_few_words_and_the_fix_in_full(make_spectrum):
    assert entry(make_spectrum).blocker(ADDUCTS) is None
    # without a formula (or an ion type), Run takes the best formula candidates: nothing stops it...
    bare = entry(make_spectrum, formula=None)
    assert bare.blocker(ADDUCTS) is None and bare.needs_formulas
    assert entry(make_spectrum, adduct=None).blocker(ADDUCTS) is None
    # ...unless no candidate can be had: a nominal precursor, or ion types the model cannot run
    nominal = entry(make_spectrum, formula=None, precursor_mz=179.0, metadata={"precursor_mz_decimals": "0"})
    label, why = nominal.blocker(ADDUCTS)
    assert label == "needs formula" and "Apply to selected" in why and "[M+H]+, [M+Na]+" in why
    assert "written to 1 Da" in why and "Set formula" not in why
    negative = entry(make_spectrum, formula=None, adduct=None, polarity="negative", charge=-1, precursor_mz=177.0557)
    label, why = negative.blocker(ADDUCTS)
    assert label == "needs formula" and "[M-H]-" in why and "does not support" in why
    assert negative.blocker(None) is None  # no model loaded: ion types are not judged
    assert entry(make_spectrum, adduct=None, precursor_mz=179.0,
                 metadata={"precursor_mz_decimals": "0"}).blocker(ADDUCTS)[0] == "needs adduct"
    na_free = entry(make_spectrum, adduct="[M+K]+", precursor_mz=217.0262)
    label, why = na_free.blocker(ADDUCTS)
    assert label == "ion not supported" and "[M+K]+ is not supported" in why
    assert na_free.blocker(None) is None  # no model loaded: ion types are not judged
    assert na_free.status_label(ADDUCTS) == "ion not supported"
    assert na_free.status_text(ADDUCTS).startswith("ion not supported: adduct [M+K]+")
    assert skipped().blocker(ADDUCTS)[0] == "needs m/z"
    assert skipped(reason="charge 2: only singly charged precursors are supported").blocker()[0] == "skipped"
    assert skipped(peaks=False).plottable is False and skipped().plottable


def test_no_fragments_when_every_peak_lies_within_2_da_of_the_precursor(make_spectrum):
    assert not entry(make_spectrum).no_fragments
    only_precursor = entry(make_spectrum, mz=[177.5, 179.0703, 180.07], intensity=[5.0, 100.0, 10.0])
    assert only_precursor.no_fragments and only_precursor.notes() == [NO_FRAGMENTS_NOTE]
    assert not skipped().no_fragments  # no precursor: nothing to judge


def test_format_mz_keeps_a_nominal_precursor_as_written(make_spectrum):
    assert format_mz(make_spectrum()) == "179.0703"
    assert format_mz(make_spectrum(metadata={"precursor_mz_decimals": "0"}, precursor_mz=179.0)) == "179"
    assert format_mz(make_spectrum(metadata={"precursor_mz_decimals": "3"})) == "179.0703"


def test_filter_finds_mz_rt_and_text(make_spectrum):
    mellein = entry(make_spectrum, retention_time=4.5 * 60, metadata={"name": "Mellein"})
    other = entry(make_spectrum, key=1, id="scan=7", precursor_mz=163.1230, formula="C10H14N2",
                  mz=[106.065, 163.123], intensity=[50.0, 100.0], retention_time=0.47 * 60)
    rows = [mellein, other, skipped()]

    def shown(text):
        f = SpectraFilter(text)
        return [e.id for e in rows if f.matches(e, ADDUCTS)]

    assert shown("") == ["mellein", "scan=7", "scan=44"]
    assert shown("163.1") == ["scan=7"]  # m/z starting with these digits
    assert shown("179") == ["mellein"]
    assert shown("mz:163-180") == ["mellein", "scan=7"]
    assert shown("m/z:179.07") == ["mellein"]
    assert shown("rt:4-5") == ["mellein", "scan=44"]  # the skipped scan elutes at 4.17 min
    assert shown("rt:4.5") == ["mellein"]
    assert shown("rt:-1") == ["scan=7"]
    assert shown("rt:4-5 needs") == ["scan=44"]  # terms must all match
    assert shown("MELLEIN") == ["mellein"]
    assert shown("c10h14n2") == ["scan=7"]
    assert shown("[m+h]+ rt:0-1") == ["scan=7"]
    assert shown("7") == ["scan=7"]  # a number in an ID
    assert shown("rt:abc") == []  # not a range: plain text, found nowhere
    assert shown('"needs m/z" rt:4-5') == ["scan=44"]  # quotes keep words together
    assert shown("needs m/z") == ["scan=44"]


def test_check_edit_applies_a_typed_precursor_formula_and_adduct(make_spectrum):
    bare = make_spectrum(formula=None, adduct=None)
    check = check_edit(bare, "", "", "", ADDUCTS)
    assert check.level == INCOMPLETE and check.message == "Enter the formula and adduct to run this spectrum"
    assert not check.changed
    check = check_edit(bare, "179.0703", "C10H10O3", "M+H", ADDUCTS)  # the precursor as shown: unchanged
    assert check.level == OK and check.changed and check.spectrum.precursor_mz == bare.precursor_mz
    assert check.spectrum.formula == "C10H10O3" and check.spectrum.adduct == "[M+H]+"
    assert "calc. m/z 179.0703" in check.message
    assert bare.formula is None  # never changed in place
    assert check_edit(bare, "", "C10H10O", "[M+H]+", ADDUCTS).level == ERROR  # too far
    assert "Unsupported element" in check_edit(bare, "", "C10H10Q3", "[M+H]+", ADDUCTS).message
    wrong = check_edit(bare, "", "", "[M+K]+", ADDUCTS)
    assert wrong.level == ERROR and "not supported by this model" in wrong.message and not wrong.appliable
    assert check_edit(bare, "abc", "", "", ADDUCTS).level == ERROR
    moved = check_edit(bare, "179.07", "", "[M+H]+", ADDUCTS)
    assert moved.level == INCOMPLETE and moved.appliable and moved.spectrum.precursor_mz == 179.07
    assert moved.spectrum.metadata["precursor_mz_decimals"] == "2"

    record = skipped().skipped
    check = check_edit(record, "", "", "", ADDUCTS)
    assert check.level == INCOMPLETE and "precursor m/z" in check.message and not check.appliable
    check = check_edit(record, "179.0703", "C10H10O3", "[M+H]+", ADDUCTS)
    assert check.level == OK and check.appliable
    made = check.spectrum
    assert (made.id, made.index, made.retention_time, made.n_peaks) == ("scan=44", 4, 250.0, 3)


def test_apply_formula_checks_each_spectrum_against_its_own_precursor(make_spectrum):
    a = make_spectrum(formula=None, adduct=None)
    b = make_spectrum(id="b", formula=None, adduct=None, precursor_mz=179.0705)
    c = make_spectrum(id="c", formula=None, adduct=None, precursor_mz=250.1)
    out = apply_formula([a, b, c], "C10H10O3", "[M+H]+", ADDUCTS)
    assert [o.spectrum is not None for o in out] == [True, True, False]
    assert "too far" in out[2].problem
    only_adduct = apply_formula([a, c], "", "[M+Na]+", ADDUCTS)
    assert [o.spectrum.adduct for o in only_adduct] == ["[M+Na]+", "[M+Na]+"]


def test_file_report_counts_skip_reasons_and_names_the_ion_types(make_spectrum):
    summary = FileSummary("/data/run.mzML", records=4, spectra=2, survey_scans=41,
                          skipped=Counter({reason_kind("no precursor m/z (PEPMASS, or the selected ion in mzML)"): 2}))
    nominal = entry(make_spectrum, key=1, formula=None, precursor_mz=179.0, metadata={"precursor_mz_decimals": "0"})
    entries = [entry(make_spectrum), nominal, skipped(), skipped()]
    text, dialog = summary.report(entries, ADDUCTS, "tiny")
    assert dialog
    assert text.splitlines()[0] == "run.mzML: 4 MS/MS records listed, 1 ready to run."
    assert "41 MS1 survey scans" in text and "isotope pattern" in text
    assert "2 × no precursor m/z" in text and "type the precursor m/z above the plot" in text
    assert "1 without a molecular formula" in text
    guessed, dialog = FileSummary("b.mgf", records=2, spectra=2).report(
        [entry(make_spectrum), entry(make_spectrum, key=1, formula=None)], ADDUCTS, top_k=5)
    assert dialog and "2 ready to run" in guessed and "Without a molecular formula: 1" in guessed
    assert "best 5 of each" in guessed and "Formulas tab" in guessed
    features = FileSummary("r.mzML", records=3, spectra=3, ms2_scans=7, features=3, survey_scans=9)
    run_text, _ = features.report([entry(make_spectrum, key=k, formula=None) for k in range(3)], ADDUCTS)
    assert run_text.splitlines()[0] == "r.mzML: 3 precursor features from 7 MS/MS scans listed, 3 ready to run."
    assert "4 scans merged into others" in run_text and "expand a feature" in run_text
    assert "The model tiny supports the ion types [M+H]+, [M+Na]+." in text
    clean, dialog = FileSummary("a.mgf", records=1, spectra=1).report([entry(make_spectrum)], ADDUCTS)
    assert not dialog and "1 ready to run" in clean
    assert reason_kind("line 12: PEPMASS 'x' is not a number") == "PEPMASS '…' is not a number"


def test_status_of_a_new_entry(make_spectrum):
    assert entry(make_spectrum).status == Status.NOT_RUN and skipped().status == Status.SKIPPED
