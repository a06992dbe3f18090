"""Analog seeding for deep search (issue #39): every library structure scored at once, the nearest analogs, their
prefixes under the formula masks, and the deep search drawing them."""

import csv

import numpy as np
import pytest
from progress_events import drain
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.chem.formula import formula_vector, parse_formula
from engine.elucidation.analogs import AnalogIndex, analog_bits_path, open_analog_index
from engine.elucidation.deep import (
    ANALOG_PHASE,
    DEEP_ID_BASE,
    DeepConfig,
    DeepSearch,
    analog_prefixes,
    prefix_fits,
)
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.library.cache import load_library
from engine.model.safe_grammar import SafeGrammar
from engine.model.scoring import FingerprintScorer
from engine.progress import run_to_end

ROWS = [("A", "aspirin", "CC(=O)Oc1ccccc1C(=O)O"), ("B", "salicylic acid", "O=C(O)c1ccccc1O"),
        ("C", "ethanol", "CCO"), ("D", "caffeine", "Cn1cnc2c1c(=O)n(C)c(=O)n2C"),
        ("E", "a diamide", "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO")]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


def library_file(path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Identifier", "CompoundName", "SMILES"])
        w.writerows(ROWS)
    return path


def a_scorer(seed=0):
    rng = np.random.default_rng(seed)
    return FingerprintScorer(rng.uniform(0.01, 0.99, chem.N_BITS))


@pytest.mark.parametrize("trust_keys", [False, True])
def test_every_structure_scores_as_one_at_a_time(home, trust_keys):
    library = load_library(library_file(home / "lib.csv"), "mine", trust_keys=trust_keys)
    assert library.lazy_bits == trust_keys
    events, index = drain(open_analog_index(library, folder=home / "cache"))
    assert (bool(events) and events[-1].done == events[-1].total == len(ROWS)) == trust_keys  # lazy: computed now
    assert analog_bits_path(library, home / "cache").is_file() == trust_keys  # ... and kept
    scorer = a_scorer()
    np.testing.assert_allclose(index.scores(scorer), [scorer.score(library.bits(r)) for r in range(len(library))],
                               rtol=1e-12)
    ranked = index.nearest(scorer, 3)
    assert [s for _, s in ranked] == sorted(index.scores(scorer), reverse=True)[:3]
    best_key = library.inchikey14(ranked[0][0])
    assert best_key not in {library.inchikey14(r) for r, _ in index.nearest(scorer, 5, exclude={best_key})}
    formula = library.record(ranked[0][0]).formula  # the spectrum's own formula: its structures are answers
    others = index.nearest(scorer, len(ROWS), formula=formula)
    assert others and all(library.record(r).formula != formula for r, _ in others)
    assert len(others) == len(ROWS) - len(library.rows_of_formula(formula))
    if trust_keys:  # the second opening reads the cached bits
        again = run_to_end(open_analog_index(library, folder=home / "cache"))
        assert np.array_equal(again.bits, index.bits) and np.array_equal(again.offsets, index.offsets)


def test_bits_that_do_not_fit_the_library_are_refused(home):
    library = load_library(library_file(home / "lib.csv"), "mine")
    with pytest.raises(ValueError, match="delete the cached file"):
        AnalogIndex(library, np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.uint16))


def test_analog_prefixes_and_which_the_formula_allows(tiny_bundle):
    tok = tiny_bundle.tokenizer
    prefixes = analog_prefixes("CC(=O)Oc1ccccc1C(=O)O", tok.tokenize, 6)
    assert prefixes and all(p.endswith(".") for p in prefixes)
    singles = [p for p in prefixes if p.count(".") == 1]
    assert len(singles) >= 2 and singles == sorted(singles, key=lambda p: -len(p))  # each fragment alone, largest first
    grammar = SafeGrammar.of(tok)
    encoded = [tuple(tok.encode(p, add_special=False)) for p in prefixes]
    encoded = [p for p in encoded if tok.unk_id not in p]
    assert encoded
    aspirin = formula_vector(parse_formula("C9H8O4"))
    assert all(prefix_fits(grammar, aspirin, p, 255) for p in encoded)  # aspirin's fragments fit aspirin
    assert not any(prefix_fits(grammar, formula_vector(parse_formula("C3H8")), p, 255) for p in encoded)  # O, 6 C
    assert not prefix_fits(grammar, aspirin, encoded[0], len(encoded[0]))  # no room left after the prefix


def test_deep_search_draws_analog_prefixes(tiny_bundle, home, monkeypatch):
    from engine.elucidation import deep

    library = load_library(library_file(home / "lib.csv"), "mine")
    spectrum = fixture_spectra()[0]
    config = DeepConfig(extra_queries=1, extra_per_query=2, rounds=1, parents=1, prefixes_per_parent=2,
                        samples_per_prefix=2, max_new_samples=40, analogs=3)
    index = run_to_end(open_analog_index(library, folder=home / "cache"))
    params = QueryParams(ranking="frequency")
    search = DeepSearch(SpectrumSession(tiny_bundle, spectrum), config, analogs=[index])
    run_to_end(search.run(params))
    seeded = [sid for sid, _ in search.pool.items() if sid[0] >= DEEP_ID_BASE + ANALOG_PHASE * 100_000]
    assert seeded and len(seeded) <= 3 * 2 * 2
    none = DeepSearch(SpectrumSession(tiny_bundle, spectrum), DeepConfig(**{**config.__dict__, "analogs": 0}),
                      analogs=[index])
    run_to_end(none.run(params))
    assert not [sid for sid, _ in none.pool.items() if sid[0] >= DEEP_ID_BASE + ANALOG_PHASE * 100_000]
    # without analog sources given: the session's structure libraries; a session with none (libraries off) borrows
    # from the bundled library (here the small one stands in for it), and with no bundled library there are none
    for bundled, drawn in ((index, True), (None, False)):
        monkeypatch.setattr(deep, "bundled_analogs", lambda b=bundled: b)
        bare = DeepSearch(SpectrumSession(tiny_bundle, spectrum), config)
        run_to_end(bare.run(params))
        assert bool([sid for sid, _ in bare.pool.items() if sid[0] >= DEEP_ID_BASE + ANALOG_PHASE * 100_000]) == drawn


def test_predict_effort_deep_opens_the_libraries_analogs_with_progress(tiny_bundle_dir, home, capsys, monkeypatch):
    from engine.cli import main
    from engine.elucidation import analogs

    opened = []
    real = analogs.open_analog_index

    def spy(library, *args, **kwargs):
        opened.append(library.name)
        return (yield from real(library, *args, **kwargs))

    monkeypatch.setattr(analogs, "open_analog_index", spy)
    lib = library_file(home / "mine.csv")
    out = home / "out.csv"
    one = home / "one.mgf"
    text = FIXTURE.read_text()
    one.write_text(text[: text.index("END IONS") + len("END IONS")] + "\n")
    argv = ["predict", str(one), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--samples-per-group", "2", "--band", "0.95", "1.5", "--formulas", "0", "--no-bundled-libraries",
            "--structure-library", str(lib), "--effort", "deep"]
    assert main(argv) == 0
    assert opened == ["mine.csv"]  # once, before the spectra, by the CLI (the search then reuses it)
    err = capsys.readouterr().err
    assert "Analog fingerprints" in err and "1 spectra" in err  # the analogs' bits open with a progress bar

    def drawn(path):  # samples drawn for the spectrum, and the effort the file says it ran at
        rows = list(csv.DictReader(line for line in open(path) if not line.startswith("#")))
        header = [line for line in open(path) if line.startswith("# parameters:")]
        return {int(r["spectrum_samples"]) for r in rows}, header[0]

    deep_samples, deep_header = drawn(out)
    assert "effort=deep" in deep_header
    assert len(deep_samples) == 1 and deep_samples.pop() > 2 * 2  # deep search draws beyond the standard pool
    opened.clear()
    assert main(argv[:-2] + ["--effort", "standard"]) == 0
    assert opened == []  # standard effort needs no analogs
    assert "Analog fingerprints" not in capsys.readouterr().err
    assert drawn(out)[0] == {2 * 2} and "effort=deep" not in drawn(out)[1]  # M x N = 4 samples, no more
    # libraries off: deep search borrows from the bundled library, whose bits the CLI opens first (a stand-in here)
    import engine.library
    from engine.elucidation import deep

    def stand_in(*args, **kwargs):
        return load_library(lib, "bundled")
        yield  # a generator, as open_bundled_library

    monkeypatch.setattr(engine.library, "open_bundled_library", stand_in)
    monkeypatch.setattr(deep, "bundled_analogs", lambda: None)
    no_libraries = [a for a in argv if a not in ("--no-bundled-libraries", "--structure-library", str(lib))]
    assert main(no_libraries + ["--no-libraries"]) == 0
    assert opened == ["bundled"]
