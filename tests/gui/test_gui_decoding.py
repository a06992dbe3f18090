"""Decoding and ranking settings: formula decoding by default, ranking changes re-rank without drawing."""

from __future__ import annotations

SITAGLIPTIN = "MSBNK-Eawag-EA290310"


def test_decoding_and_ranking_settings(qtbot, make_window, write_mgf):
    window = make_window()
    panel = window.params_panel
    assert panel.decoding.currentText() == "formula" and panel.ranking.currentText() == "fingerprint"
    assert window.query_params.decoding == "formula"
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("one.mgf", titles={SITAGLIPTIN})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.run_selected()
    first = entry.result
    assert first.params.decoding == "formula" and first.n_samples == 100
    assert all(c.formula == first.spectrum.formula for c in first.candidates)
    model = window.candidates.model
    col = model.COLUMNS.index("Score")
    assert model.rowCount() == len(first.candidates) > 0
    assert model.data(model.index(0, col)) == f"{first.candidates[0].fingerprint_score:.1f}"

    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # another ranking: the same pool re-ranked
        panel.ranking.setCurrentText("frequency")
    ranked = entry.result
    assert ranked.params.ranking == "frequency" and ranked.new_samples == 0
    assert sorted(c.inchikey14 for c in ranked.candidates) == sorted(c.inchikey14 for c in first.candidates)
    assert [c.count for c in ranked.candidates] == sorted((c.count for c in ranked.candidates), reverse=True)

    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # free decoding draws again
        panel.decoding.setCurrentText("free")
    free = entry.result
    assert free.params.decoding == "free" and free.new_samples == 100


def test_decoding_and_ranking_persist(qtbot, make_window):
    window = make_window()
    panel = window.params_panel
    # both away from their defaults (formula, fingerprint), or a window that forgot them would pass
    assert (panel.decoding.currentText(), panel.ranking.currentText()) == ("formula", "fingerprint")
    panel.ranking.setCurrentText("frequency")
    panel.decoding.setCurrentText("free")
    assert (panel.decoding.currentText(), panel.ranking.currentText()) == ("free", "frequency")
    window.close()
    again = make_window()
    assert again.params_panel.ranking.currentText() == "frequency"
    assert again.params_panel.decoding.currentText() == "free"
    assert (again.query_params.decoding, again.query_params.ranking) == ("free", "frequency")
