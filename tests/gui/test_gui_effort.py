"""The effort setting (issue #39): deep search from the app, with its progress, and back to standard."""

from __future__ import annotations

import re

SITAGLIPTIN = "MSBNK-Eawag-EA290310"


def test_deep_effort_runs_and_standard_comes_back(qtbot, make_window, write_mgf):
    window = make_window()
    panel = window.params_panel
    assert panel.effort.currentText() == "standard" and window.query_params.effort == "standard"
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("one.mgf", titles={SITAGLIPTIN})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    standard = entry.result
    assert standard.n_samples == 100

    panel.effort.setCurrentText("deep")  # starts nothing (issue #54): it applies to the next Run
    assert not window.busy
    shown = []  # the progress bar's (value, text) as the run sends them
    window.runs.progress.connect(lambda value, text: shown.append((value, text)))
    with qtbot.waitSignal(window.run_finished, timeout=600_000):  # deep: the standard pool, then the rounds
        window.run_selected()
    deep = entry.result
    assert deep.params.effort == "deep" and deep.n_samples > 100 and not deep.partial
    # its progress: the deep phases by name, the samples drawn counting up to those the result holds beyond the
    # standard pool, the bar's value within 0..1000 and never going back within the rounds
    steps = [(value, text) for value, text in shown if text.startswith("deep search:") and "opening" not in text]
    assert any("round 1" in text for _, text in steps) and "final ranking" in steps[-1][1]
    counts = [int(m.group(1)) for _, text in steps if (m := re.search(r"\((\d+)/(\d+)\)$", text))]
    assert counts == sorted(counts) and counts[-1] == deep.n_samples - standard.n_samples > 0
    values = [value for value, _ in steps]
    assert values == sorted(values) and 0 < values[-1] <= 1000
    assert {c.inchikey14 for c in standard.candidates} <= {c.inchikey14 for c in deep.candidates}

    panel.effort.setCurrentText("standard")
    with qtbot.waitSignal(window.run_finished, timeout=120_000):  # back to standard: nothing drawn again
        window.run_selected()
    again = entry.result
    assert again.n_samples == 100 and again.new_samples == 0
    assert [c.inchikey14 for c in again.candidates] == [c.inchikey14 for c in standard.candidates]


def test_effort_persists(qtbot, make_window):
    window = make_window()
    window.params_panel.effort.setCurrentText("deep")
    window.close()
    assert make_window().params_panel.effort.currentText() == "deep"
