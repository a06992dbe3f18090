"""Deep search (issue #39) on the tiny bundle: it grows a copy of the standard pool, leaves standard effort
untouched, is seeded, reports progress and stops when cancelled."""

from dataclasses import replace

import pytest
from progress_events import drain
from tiny_bundle import fixture_spectra

from engine.elucidation.deep import (
    DEEP_ID_BASE,
    DeepConfig,
    DeepSearch,
    prefixes_of,
    run_session,
)
from engine.elucidation.pipeline import (
    QueryParams,
    SamplesDrawn,
    SpectrumFinished,
    SpectrumSession,
    elucidate,
)
from engine.errors import Cancelled, ConfigError
from engine.progress import run_to_end

SMALL = DeepConfig(extra_queries=2, extra_per_query=4, rounds=2, parents=3, prefixes_per_parent=3,
                   samples_per_prefix=2, max_new_samples=60)
PARAMS = QueryParams(ranking="frequency")  # the tiny bundle's encoder is random: its posterior says nothing


@pytest.fixture(autouse=True)
def no_bundled_analogs(monkeypatch):
    """Sessions here have no structure library; analog seeding (tested in test_analogs.py) would otherwise open the
    bundled library and compute its 179k fingerprints."""
    from engine.elucidation import deep

    monkeypatch.setattr(deep, "bundled_analogs", lambda: None)


def test_deep_grows_a_copy_of_the_standard_pool(tiny_bundle):
    spectrum = fixture_spectra()[0]
    session = SpectrumSession(tiny_bundle, spectrum)
    standard = run_to_end(session.run(PARAMS))
    search = DeepSearch(session, SMALL)
    events, deep = drain(search.run(PARAMS))
    assert 100 < deep.n_samples <= 100 + SMALL.max_new_samples
    assert {c.inchikey14 for c in standard.candidates} <= {c.inchikey14 for c in deep.candidates}
    assert any(i >= DEEP_ID_BASE for (i, _), _ in search.pool.items())  # refinement samples were drawn
    drawn = [e for e in events if isinstance(e, SamplesDrawn)]
    assert drawn and drawn[-1].done == deep.n_samples - 100  # the standard pool was drawn before
    deep_drawn = [e.done for e in drawn]
    assert deep_drawn == sorted(deep_drawn)  # progress never runs backwards
    # the session keeps its standard pool: standard effort gives the same result after a deep search
    again = run_to_end(session.run(PARAMS))
    assert again.n_samples == 100 and [c.inchikey14 for c in again.candidates] == [c.inchikey14 for c in standard.candidates]


def test_deep_is_seeded(tiny_bundle):
    spectrum = fixture_spectra()[1]
    hot = QueryParams(ranking="frequency", temperature=2.0)  # the tiny decoder needs heat to vary at all
    runs = [run_to_end(DeepSearch(SpectrumSession(tiny_bundle, spectrum), SMALL).run(hot)) for _ in range(2)]
    assert [c.inchikey14 for c in runs[0].candidates] == [c.inchikey14 for c in runs[1].candidates]
    assert runs[0].n_samples == runs[1].n_samples


def test_effort_deep_through_elucidate_and_cancel(tiny_bundle):
    deep = QueryParams(ranking="frequency", effort="deep")
    with pytest.raises(ConfigError, match="run_session"):
        drain(elucidate(tiny_bundle, fixture_spectra()[:1], deep))
    events, _ = drain(elucidate(tiny_bundle, fixture_spectra()[:1], deep, run_session=run_session))
    finished = [e.result for e in events if isinstance(e, SpectrumFinished)]
    assert len(finished) == 1 and finished[0].n_samples > 100
    hot = QueryParams(ranking="frequency", temperature=2.0)
    standard = [drain(elucidate(tiny_bundle, fixture_spectra()[:2], hot, **kw))[0] for kw in ({}, {"run_session": run_session})]
    pools = [[(e.result.n_samples, [(c.inchikey14, c.count) for c in e.result.candidates])
              for e in events if isinstance(e, SpectrumFinished)] for events in standard]
    assert pools[0] == pools[1] and [n for n, _ in pools[0]] == [100, 100]  # standard effort: the same pools
    session = SpectrumSession(tiny_bundle, fixture_spectra()[0])
    run_to_end(session.run(PARAMS))  # the standard pool is there: deep's own sampling is what gets cancelled
    calls = {"n": 0}

    def cancel_after_standard():
        calls["n"] += 1
        return calls["n"] > 2  # session.run checks twice (nothing left to draw), then the deep rounds check

    with pytest.raises(Cancelled):
        drain(DeepSearch(session).run(PARAMS, cancel_after_standard))
    assert calls["n"] == 3  # cancelled at the deep rounds' first check, not by session.run


def test_edits_join_the_deep_pool_without_samples(tiny_bundle):
    spectrum = fixture_spectra()[0]
    runs = {}
    for rounds in (0, 2):
        config = replace(SMALL, edit_rounds=rounds, edit_parents=2, edit_keep=5)
        runs[rounds] = run_to_end(DeepSearch(SpectrumSession(tiny_bundle, spectrum), config).run(PARAMS))
    assert runs[2].n_samples == runs[0].n_samples  # edits are no samples: the same draws either way
    before = {c.inchikey14 for c in runs[0].candidates}
    new = [c for c in runs[2].candidates if c.inchikey14 not in before]
    assert 0 < len(new) <= 2 * 5 and before <= {c.inchikey14 for c in runs[2].candidates}
    formula = runs[0].candidates[0].formula
    assert all(c.count == 0 and c.formula == formula and c.origin == "de_novo" for c in new)


def test_prefixes_keep_all_but_one_then_all_but_two_fragments():
    frags = [["A1", "B12", "C2"]]
    got = prefixes_of(frags, list, limit=10, fractions=(0.5,))
    assert got[:3] == ["B12.C2.", "A1.C2.", "A1.B12."]  # all but one fragment
    assert got[3:] == ["C2.", "B12.", "A1."]  # all but two
    assert prefixes_of([["CCCCCC"]], list, limit=10, fractions=(0.5,)) == ["CCC"]  # uncut: the first half
    assert len(prefixes_of(frags, list, limit=2, fractions=(0.5,))) == 2


@pytest.mark.parametrize("kw, match", [({"parents": 0}, "parents"), ({"max_new_samples": -1}, "max_new_samples"),
                                       ({"truncate_fractions": (1.5,)}, "truncate_fractions")])
def test_bad_config_is_refused(kw, match):
    with pytest.raises(ConfigError, match=match):
        DeepConfig(**kw)


def test_unknown_effort_is_refused():
    with pytest.raises(ConfigError, match="effort"):
        QueryParams(effort="max")
    assert QueryParams(effort="deep").sampling_key() == QueryParams().sampling_key()  # same samples, same pool


def test_deep_search_reaches_a_true_structure_standard_effort_does_not(tiny_bundle):
    """A constructed case (issue #61): the spectrum's true structure is one isomer move (engine.elucidation.edits)
    away from the structure the standard pool ranks first, and no sample of the standard pool draws it; deep
    search's edits reach it and rank it, standard effort without its own edit rounds does not (they are switched off
    here: test_pipeline.py tests them). Fails when the edit rounds offer nothing."""
    from engine.chem import molecules as chem
    from engine.elucidation.edits import isomer_edits

    spectrum = fixture_spectra()[0]
    params = replace(PARAMS, edit_rounds=0)
    pool = run_to_end(SpectrumSession(tiny_bundle, spectrum).run(params)).candidates
    drawn = {c.inchikey14 for c in pool}
    truth = next(s for s in isomer_edits(pool[0].smiles)
                 if chem.inchikey(chem.mol_from_smiles(s))[:14] not in drawn)
    spectrum = replace(spectrum, smiles=truth, metadata={k: v for k, v in spectrum.metadata.items()
                                                         if k.lower() != "inchikey"})
    standard = run_to_end(SpectrumSession(tiny_bundle, spectrum).run(params))
    assert standard.reference_rank is None  # not in the standard pool
    keep_all = replace(SMALL, edit_rounds=1, edit_parents=1, edit_keep=10_000)  # every edit of rank 1 joins
    deep = run_to_end(DeepSearch(SpectrumSession(tiny_bundle, spectrum), keep_all).run(params))
    assert deep.reference_rank is not None  # reached, and ranked
    reached = next(c for c in deep.candidates if c.inchikey14 == deep.reference_inchikey14)
    assert reached.count == 0 and reached.origin == "de_novo"  # by an edit, not drawn


def test_sample_phase_names_the_phase_that_drew_a_sample():
    from engine.elucidation.deep import ANALOG_PHASE, sample_phase

    assert sample_phase((3, 4), samples_per_group=5) == "standard"
    assert sample_phase((3, 5), samples_per_group=5) == "allocation"  # a band query's extra samples: j >= N
    assert sample_phase((DEEP_ID_BASE + 2 * 100_000 + 305, 1), 5) == "round 2"
    assert sample_phase((DEEP_ID_BASE + ANALOG_PHASE * 100_000 + 3, 0), 5) == "analogs"


@pytest.mark.parametrize("stop_top, new_at, paid", [(0, None, False), (0, 7, True), (3, 7, False), (3, 2, True),
                                                    (3, 0, True)])
def test_a_round_pays_when_it_adds_a_candidate_among_the_best_stop_top(stop_top, new_at, paid):
    from types import SimpleNamespace

    ranked = [SimpleNamespace(inchikey14=f"K{k}") for k in range(10)]
    before = {c.inchikey14 for k, c in enumerate(ranked) if k != new_at}
    search = DeepSearch(None, replace(SMALL, stop_top=stop_top))
    assert search._round_paid(before, ranked) is paid


@pytest.mark.parametrize("paid", [False, True])
def test_the_stop_rule_ends_the_refinement_rounds(tiny_bundle, monkeypatch, paid):
    """A round the rule finds unpaid is the last one; paid rounds go on until ``rounds`` or the budget ends them.
    Each phase's time is kept (the evaluation's profile), and every drawn sample is counted in one phase."""
    monkeypatch.setattr(DeepSearch, "_round_paid", lambda self, before, ranked: paid)
    hot = QueryParams(ranking="frequency", temperature=2.0)
    config = replace(SMALL, rounds=3, max_new_samples=10_000, edit_rounds=1, edit_parents=1, edit_keep=3)
    search = DeepSearch(SpectrumSession(tiny_bundle, fixture_spectra()[0]), config)
    result = run_to_end(search.run(hot))
    rounds = sorted(p for p in search.seconds if p.startswith("round"))
    assert rounds == (["round 1", "round 2", "round 3"] if paid else ["round 1"])
    assert {"standard", "allocation", "analogs", "edits", "final ranking"} <= set(search.seconds)
    assert all(v >= 0 for v in search.seconds.values())
    from collections import Counter

    from engine.elucidation.deep import sample_phase

    drawn = Counter(sample_phase(sid, hot.samples_per_group) for sid, _ in search.pool.items())
    assert drawn["standard"] == 100 and drawn["allocation"] == config.extra_queries * config.extra_per_query
    assert set(drawn) - {"standard", "allocation", "analogs"} == set(rounds)
    assert sum(drawn.values()) == result.n_samples


def test_the_stop_rule_only_shortens_the_search(tiny_bundle):
    """With ``stop_top`` the rounds end sooner or at the same round, never differently: every sample drawn is one
    the search without it draws too (the same identities, the same strings)."""
    hot = QueryParams(ranking="frequency", temperature=2.0)
    config = replace(SMALL, rounds=4, max_new_samples=10_000, edit_rounds=0)
    pools = {}
    for stop_top in (0, 1):
        search = DeepSearch(SpectrumSession(tiny_bundle, fixture_spectra()[1]), replace(config, stop_top=stop_top))
        run_to_end(search.run(hot))
        pools[stop_top] = dict(search.pool.items())
    assert pools[1].items() <= pools[0].items()


def test_sources_of_names_the_phase_that_found_a_structure(tiny_bundle):
    spectrum = fixture_spectra()[0]
    config = replace(SMALL, edit_rounds=1, edit_parents=1, edit_keep=5)
    search = DeepSearch(SpectrumSession(tiny_bundle, spectrum), config)
    result = run_to_end(search.run(PARAMS))
    drawn = [c for c in result.candidates if c.count > 0]
    edited = [c for c in result.candidates if c.count == 0]
    assert drawn and edited
    assert all(search.sources_of(c.inchikey14)[0] in ("standard", "allocation", "analogs", "round 1", "round 2")
               for c in drawn)
    assert all(search.sources_of(c.inchikey14) == ["edits"] for c in edited)
    assert search.sources_of("NOTINTHEPOOLXX") == []


@pytest.mark.parametrize("stop_top, rounds_run", [(0, 3), (5, 1)])
def test_the_stop_rule_ends_the_edit_rounds(tiny_bundle, monkeypatch, stop_top, rounds_run):
    """With ``stop_top`` an edit round that puts no edit among the best stop_top is the last; without it the edit
    rounds go on while they add anything (today's rule)."""
    monkeypatch.setattr(DeepSearch, "_round_paid", lambda self, before, ranked: False)
    calls = []
    original = DeepSearch._edit_round

    def counted(self, params, cancel):
        calls.append(1)
        return original(self, params, cancel)

    monkeypatch.setattr(DeepSearch, "_edit_round", counted)
    config = replace(SMALL, rounds=1, edit_rounds=3, edit_parents=1, edit_keep=2, stop_top=stop_top)
    run_to_end(DeepSearch(SpectrumSession(tiny_bundle, fixture_spectra()[0]), config).run(PARAMS))
    assert len(calls) == rounds_run


def test_no_edits_above_edit_max_atoms(tiny_bundle):
    spectrum = fixture_spectra()[0]
    from engine.chem.formula import parse_formula

    heavy = sum(n for el, n in parse_formula(spectrum.formula).items() if el != "H")
    for cap, edited in ((heavy - 1, False), (heavy, True)):
        config = replace(SMALL, edit_rounds=1, edit_parents=1, edit_keep=5, edit_max_atoms=cap)
        search = DeepSearch(SpectrumSession(tiny_bundle, spectrum), config)
        run_to_end(search.run(replace(PARAMS, edit_rounds=0)))  # standard effort's edits: EDIT_MAX_ATOMS
        assert bool(search.edit_keys) is edited and ("edits" in search.seconds)


@pytest.mark.parametrize("budget", [None, 70])
def test_the_default_search_keeps_its_phase_budget(tiny_bundle, budget):
    """The defaults (issue #58: at most 320 samples beyond the standard pool, 2 refinement rounds, the stop rule on):
    each phase draws at most its share, the whole search at most ``max_new_samples`` (70: the rounds get 20)."""
    from collections import Counter

    from engine.elucidation.deep import sample_phase

    config = DeepConfig()
    assert config.stop_top > 0 and config.max_new_samples <= 320 and config.rounds <= 2
    config = config if budget is None else replace(config, max_new_samples=budget)
    hot = QueryParams(ranking="frequency", temperature=2.0)
    search = DeepSearch(SpectrumSession(tiny_bundle, fixture_spectra()[0]), config)
    result = run_to_end(search.run(hot))
    drawn = Counter(sample_phase(sid, hot.samples_per_group) for sid, _ in search.pool.items())
    assert drawn.pop("standard") == 100
    assert drawn["allocation"] == config.extra_queries * config.extra_per_query
    per_round = config.parents * config.prefixes_per_parent * config.samples_per_prefix
    assert all(n <= per_round for p, n in drawn.items() if p.startswith("round"))
    assert set(drawn) <= {"allocation", "analogs", *(f"round {k}" for k in range(1, config.rounds + 1))}
    assert 0 < sum(drawn.values()) == result.n_samples - 100 <= config.max_new_samples
    if budget is not None:  # unbounded, the rounds would draw more (266 in all here): the budget cuts them
        assert sum(drawn.values()) == budget
