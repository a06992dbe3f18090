"""What a run shows while it goes on and how the window starts (issue #58): live rankings for the spectrum on screen
only, throttled (msgpt_gui/logic/live.py, its use in msgpt_gui/logic/jobs.py), the same final rankings either way;
the status bar's "still loading", and a run asked for while the model or a library loads waits and then runs."""

from __future__ import annotations

import pytest
from progress_events import drain

from engine.elucidation.pipeline import QueryParams, SpectrumSession
from msgpt_gui.logic.entries import Status
from msgpt_gui.logic.jobs import (
    EntryFinished,
    EntryProgress,
    EntryRanking,
    elucidate_sessions,
)
from msgpt_gui.logic.live import EVERYTHING, LiveConfig, LiveFocus
from msgpt_gui.status_bar import loading_text, loading_tip

PARAMS = QueryParams(groups=4, samples_per_group=3)
CSV = "name,smiles,id\nCaffeine,CN1C=NC2=C1C(=O)N(C(=O)N2C)C,L1\nMellein,CC1Cc2cccc(O)c2C(=O)O1,L2\n"


class FrozenClock:
    """A clock that moves only when told (no wall-clock in the tests)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- the throttle (no Qt) ------------------------------------------------------------------------------------------
def test_live_config_rejects_a_negative_interval_naming_it():
    with pytest.raises(ValueError, match="min_interval.*-1"):
        LiveConfig(min_interval=-1)


def test_only_the_focus_is_shown_and_its_rankings_are_spaced_by_the_interval():
    clock = FrozenClock()
    focus = LiveFocus({5}, LiveConfig(min_interval=0.5), clock=clock)
    assert focus.shows(5) and focus.shows(100, 5) and not focus.shows(6) and not focus.shows(None)
    shown, hidden = focus.throttle(100, 5), focus.throttle(6)
    assert shown.due() and not hidden.due()  # the first is due at once
    clock.now = 0.4
    assert not shown.due()
    clock.now = 0.5
    assert shown.due() and not shown.due()
    focus.set({6})  # the chemist selected another spectrum: it gets its rankings from now on
    clock.now = 5.0
    assert hidden.due() and not shown.due()
    assert EVERYTHING.shows(1) and EVERYTHING.throttle(1).due() and EVERYTHING.throttle(2).due()


def test_loading_text_names_what_still_loads_and_whether_a_run_waits():
    assert loading_text(None, []) == "" and loading_tip(None, []) == ""
    assert loading_text("default_model", ["MassBank", "COCONUT"]) == "Loading the model and 2 libraries…"
    assert loading_text(None, ["MassBank"], run_waiting=True) == "Run waits for MassBank"
    assert loading_tip("default_model", ["MassBank", "COCONUT"]).startswith(
        "Still loading in the background: the model default_model, MassBank, COCONUT.")


# -- the run's events (no Qt) --------------------------------------------------------------------------------------
def _run(bundle, spectra, live):
    jobs = [(key, SpectrumSession(bundle, s)) for key, s in spectra]
    events, outcome = drain(elucidate_sessions(jobs, PARAMS, bundle=bundle, live=live))
    return events, outcome


def _final(events) -> dict:
    return {e.key: [(c.inchikey14, c.smiles, c.score, c.count) for c in e.result.candidates]
            + [e.result.n_samples] for e in events if isinstance(e, EntryFinished)}


def test_the_spectrum_off_screen_gets_no_live_ranking_and_every_final_ranking_is_todays(tiny_bundle, make_spectrum):
    spectra = [(1, make_spectrum()), (2, make_spectrum(id="second"))]
    today, _ = _run(tiny_bundle, spectra, EVERYTHING)
    clock = FrozenClock()
    throttled, outcome = _run(tiny_bundle, spectra, LiveFocus({1}, LiveConfig(min_interval=10), clock=clock))
    assert outcome.finished == [1, 2]
    assert _final(throttled) == _final(today) and set(_final(today)) == {1, 2}
    live = {k: sum(isinstance(e, EntryRanking) and e.key == k for e in throttled) for k in (1, 2)}
    before = {k: sum(isinstance(e, EntryRanking) and e.key == k for e in today) for k in (1, 2)}
    assert live[2] == 0 and before[2] > 0  # off screen: ranked once, at its end
    # on screen: the preview's ranking and the first batch's, then none for 10 s (the clock stands still)
    assert 1 <= live[1] <= 2 < before[1]
    # the progress still comes for both, to the same pool size
    for events in (today, throttled):
        last = {e.key: (e.done, e.total) for e in events if isinstance(e, EntryProgress)}
        assert last[1] == last[2] == (PARAMS.pool_size, PARAMS.pool_size)


def test_the_preview_stage_is_drawn_for_the_spectrum_on_screen_only(tiny_bundle, make_spectrum, monkeypatch):
    stages = []
    run = SpectrumSession.run

    def spy(self, params, cancel=None, plan=None):
        stages.append((self.spectrum.id, params.samples_per_group))
        return run(self, params, cancel, plan)

    monkeypatch.setattr(SpectrumSession, "run", spy)
    spectra = [(1, make_spectrum()), (2, make_spectrum(id="second"))]
    _run(tiny_bundle, spectra, LiveFocus({2}))
    first, second = spectra[0][1].id, spectra[1][1].id
    assert stages == [(first, 3), (second, 1), (second, 3)]


# -- the window ----------------------------------------------------------------------------------------------------
def test_the_status_bar_says_the_model_loads_and_a_run_asked_for_meanwhile_waits_then_runs(
        qtbot, make_window, write_mgf):
    window = make_window(files=[write_mgf("one.mgf", titles=None)])
    qtbot.waitUntil(lambda: window.loader is None and bool(window.spectra.entries), timeout=20_000)
    entry = next(e for e in window.spectra.entries if e.spectrum is not None and e.spectrum.formula
                 and e.spectrum.adduct in window.bundle.supported_adducts)
    label = window.run_menu.loading_label
    assert not label.isVisibleTo(window)
    window.models.load_model(window.models.model_dir)  # the model loads again, as at start-up
    assert label.isVisibleTo(window) and label.text() == "Loading the model…"
    assert window.models.model_dir.name in label.toolTip()
    assert window.run_menu.act_run.isEnabled()  # Run can be asked for while it loads
    with qtbot.waitSignal(window.run_finished, timeout=60_000) as finished:
        assert window.run_menu.run_entries([entry]) is True
        assert label.text() == "Run waits for the model" and window.runs.task_kind != "run"
        assert entry.status == Status.QUEUED and "waits for the model" in entry.reason  # the list says so too
        assert "The run starts when the model and the libraries have loaded" in window.statusBar().currentMessage()
    assert finished.args == ["done"] and entry.result is not None
    assert not label.isVisibleTo(window)


def test_a_run_asked_for_while_a_library_opens_waits_for_it_and_searches_it(qtbot, make_window, write_mgf,
                                                                             tmp_path):
    window = make_window(files=[write_mgf("one.mgf", titles=None)])
    qtbot.waitUntil(lambda: window.loader is None and bool(window.spectra.entries), timeout=20_000)
    entry = next(e for e in window.spectra.entries if e.spectrum is not None and e.spectrum.formula
                 and e.spectrum.adduct in window.bundle.supported_adducts)
    path = tmp_path / "mine.csv"
    path.write_text(CSV)
    source = window.libraries.controller.add(path)
    assert source.state == "opening"
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        assert window.run_menu.run_entries([entry]) is True
        assert not window.busy and window.run_menu.loading_label.text() == f"Run waits for {source.name}"
    assert source.state == "open" and entry.result is not None
    assert window.runs.libraries_current(entry)  # it ran with the library, not before it was open


def test_cancel_drops_a_run_that_waits(qtbot, make_window, write_mgf, tmp_path):
    window = make_window(files=[write_mgf("one.mgf", titles=None)])
    qtbot.waitUntil(lambda: window.loader is None and bool(window.spectra.entries), timeout=20_000)
    entry = next(e for e in window.spectra.entries if e.spectrum is not None)
    path = tmp_path / "mine.csv"
    path.write_text(CSV)
    source = window.libraries.controller.add(path)
    before = entry.status
    assert window.run_menu.run_entries([entry]) is True and window.run_menu.act_cancel.isEnabled()
    assert entry.status == Status.QUEUED
    window.run_menu.cancel()
    assert window.run_menu.waiting is None and entry.status == before
    qtbot.waitUntil(lambda: source.state not in ("waiting", "opening"), timeout=60_000)
    assert not window.busy and entry.result is None


def test_the_window_tells_the_run_which_spectrum_is_on_screen(qtbot, make_window, write_mgf):
    window = make_window(files=[write_mgf("one.mgf", titles=None)])
    qtbot.waitUntil(lambda: window.loader is None and len(window.spectra.entries) > 1, timeout=20_000)
    first, second = window.spectra.entries[:2]
    window.select_entry(second.key)
    assert window.runs.live.shows(second.key) and not window.runs.live.shows(first.key)
