"""An ion type the tiny bundle runs by a chemical mapping (engine.model.ion_mapping), in the window: an [M+NH4]+ record
is offered, runs as the [M+H]+ of the same molecule, and shows its own ion type with the mapping's note."""

from __future__ import annotations

from test_gui_run import NICOTINE, entry_titled, loaded, run_and_wait

from msgpt_gui.logic.entries import Status

NH3 = 14.0030740048 + 3 * 1.00782503207
NOTE = "run as [M+H]+ after NH3 loss (mapping)"


def ammonium_mgf(write_mgf):
    """The nicotine record of the fixture written as its [M+NH4]+ ion (precursor + NH3; the fragments of [M+H]+)."""
    path = write_mgf("nh4.mgf", titles={NICOTINE})
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("PEPMASS="):
            line = f"PEPMASS={float(line.split('=')[1]) + NH3:.4f}"
        elif line.startswith("ADDUCT="):
            line = "ADDUCT=[M+NH4]+"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_ammonium_record_runs_by_mapping_and_keeps_its_ion_type(qtbot, make_window, write_mgf):
    window = make_window()
    loaded(qtbot, window, ammonium_mgf(write_mgf))
    entry = entry_titled(window, NICOTINE)
    assert entry.spectrum.adduct == "[M+NH4]+"
    assert entry.blocker(window.spectra.supported_adducts) is None  # the model runs it (by mapping)
    window.select_entry(entry.key)
    run_and_wait(qtbot, window, window.run_menu.run_all)
    assert entry.status == Status.DONE and entry.result is not None
    assert entry.result.spectrum.adduct == "[M+NH4]+" and entry.result.ion_mapping == NOTE
    assert entry.result.spectrum.precursor_mz == entry.spectrum.precursor_mz
    assert all(c.formula == "C10H14N2" for c in entry.result.candidates)
    assert f"[M+NH4]+: {NOTE}" in window.candidates.summary.text()


def test_the_formula_table_note_names_the_ion_types_run_by_mapping(make_spectrum):
    from engine.formulas.candidates import FormulaConfig, rank_formulas
    from engine.model.ion_mapping import runnable_ion_types
    from msgpt_gui.logic.formulas import mapped_ion_note

    bare = make_spectrum(adduct=None, formula=None, polarity="positive")
    table = rank_formulas(bare, config=FormulaConfig(ion_types=("[M+H]+", "[M+NH4]+")))
    native = ("[M+H]+", "[M+Na]+")
    ions = {c.ion_type for c in table.runnable(len(table.candidates), runnable_ion_types(native))}
    assert ions == {"[M+H]+", "[M+NH4]+"}
    note = mapped_ion_note(table, runnable_ion_types(native), native, len(table.candidates))
    assert note == "[M+NH4]+ runs as [M+H]+ after NH3 loss (mapping)"
    assert mapped_ion_note(table, native, native, len(table.candidates)) == ""  # none taken by mapping
    assert mapped_ion_note(table, runnable_ion_types(native), None) == ""  # no model loaded
