"""training.studies.retrieval: the ranking and its metrics on synthetic scores, the library tracks, the shortlist the
decoder scores, and a tiny end-to-end run on the committed tiny bundle with a synthetic corpus."""

import json

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.errors import ConfigError
from training.studies import retrieval as rt


# -- hits, ties, absent truths --------------------------------------------------------------------------
def test_expected_hits_counts_ties_in_expectation():
    assert rt.expected_hits([3.0, 2.0, 1.0], 0) == {1: 1.0, 5: 1.0, 20: 1.0}
    assert rt.expected_hits([3.0, 2.0, 1.0], 2, (1, 2, 3)) == {1: 0.0, 2: 0.0, 3: 1.0}
    # truth tied with two others at the top: it is first one time in three, always in the top 3
    h = rt.expected_hits([5.0, 5.0, 5.0, 1.0], 1, (1, 2, 3))
    assert h[1] == pytest.approx(1 / 3) and h[2] == pytest.approx(2 / 3) and h[3] == 1.0
    # one above, one tied: places 2 or 3
    assert rt.expected_hits([9.0, 5.0, 5.0], 2, (1, 2, 3)) == {1: 0.0, 2: 0.5, 3: 1.0}
    assert rt.expected_hits([1.0, 2.0], None, (1, 5)) == {1: 0.0, 5: 0.0}


def _pool(fp, formula_lib, count, truth=0, dec=None, mass_lib=None, key="s"):
    n = len(fp)
    dec = np.zeros((n, 3)) if dec is None else np.asarray(dec, dtype=float).reshape(n, -1)
    return rt.Pool(key, truth, np.asarray(fp, dtype=float), dec, np.ones(n, bool),
                   {"formula": np.asarray(formula_lib, bool),
                    "mass": np.asarray(formula_lib if mass_lib is None else mass_lib, bool)},
                   np.asarray(count, dtype=np.int64))


def test_settings_rank_a_structure_in_both_library_and_de_novo_once():
    # rows: 0 truth (library, also generated), 1 library decoy, 2 de novo only, 3 library decoy also generated
    pool = _pool([-10.0, -12.0, -5.0, -11.0], [1, 1, 0, 1], [3, 0, 7, 1])
    rows, known, truth = rt.setting_rows(pool, "formula", "library")
    assert rows.tolist() == [0, 1, 3] and known.all() and truth == 0
    rows, known, truth = rt.setting_rows(pool, "formula", "joint")
    assert rows.tolist() == [0, 1, 2, 3] and known.tolist() == [True, True, False, True] and truth == 0
    rows, known, truth = rt.setting_rows(pool, "formula", "denovo")
    assert rows.tolist() == [0, 2, 3] and not known.any() and truth == 0
    rows, known, truth = rt.setting_rows(pool, "formula", "crowded")  # truth out of the library, still generated
    assert rows.tolist() == [0, 1, 2, 3] and known.tolist() == [False, True, False, True] and truth == 0
    with pytest.raises(ConfigError):
        rt.setting_rows(pool, "formula", "everything")


def test_crowding_truth_not_generated_is_absent():
    pool = _pool([-10.0, -12.0, -5.0], [1, 1, 0], [0, 0, 4])
    rows, _, truth = rt.setting_rows(pool, "formula", "crowded")
    assert rows.tolist() == [1, 2] and truth is None
    assert rt.pool_hits(rt.Variant("fp"), pool, "formula", "crowded") == {1: 0.0, 10: 0.0}


def test_prior_lifts_the_library_truth_over_de_novo_look_alikes_and_crowding_measures_its_cost():
    # the de novo look-alike (row 2) outscores the library truth under the fingerprint score alone
    pool = _pool([-10.0, -15.0, -8.0], [1, 1, 0], [0, 0, 5])
    fp_only, prior = rt.Variant("fp"), rt.Variant("prior", prior=5.0)
    assert rt.pool_hits(fp_only, pool, "formula", "library")[1] == 1.0
    assert rt.pool_hits(fp_only, pool, "formula", "joint")[1] == 0.0
    assert rt.pool_hits(prior, pool, "formula", "joint")[1] == 1.0
    # the truth reachable de novo only (generated, first de novo); a library decoy with the prior takes rank 1
    pool = _pool([-10.0, -12.0, -11.0], [1, 1, 0], [2, 0, 5])
    assert rt.pool_hits(fp_only, pool, "formula", "denovo")[1] == 1.0
    assert rt.pool_hits(fp_only, pool, "formula", "crowded")[1] == 1.0
    assert rt.pool_hits(prior, pool, "formula", "crowded")[1] == 0.0
    res, today = rt.evaluate_pools(prior, [pool]), rt.evaluate_pools(fp_only, [pool])
    c = rt.crowding_summary(res, today)["formula"]
    assert c["today_top1"] == 1.0 and c["off_top1"] == 1.0 and c["on_top1"] == 0.0 and c["pushed_down"] == 1.0
    assert c["on_top10"] == 1.0


def test_random_variant_is_seeded_and_a_permutation_score():
    pool = _pool(np.arange(30.0), np.ones(30), np.zeros(30))
    rows, known, _ = rt.setting_rows(pool, "formula", "library")
    a = rt.Variant("r", random=True).scores(pool, rows, known)
    assert np.array_equal(a, rt.Variant("r", random=True).scores(pool, rows, known)) and len(set(a)) == 30


# -- two stages ----------------------------------------------------------------------------------------
def test_merged_score_reranks_only_the_shortlist_and_keeps_it_first():
    fp = np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
    dec = np.array([-50.0, -1.0, -1.0, -1.0, 100.0])
    asked = []

    def decoder(idx):
        asked.append(idx.tolist())
        return dec[idx]

    m = rt.MergedScore(library_prior=0.0, decoder_weight=1.0, shortlist=3)
    s = m.scores(fp, np.zeros(5), decoder_logp=decoder)
    assert asked == [[0, 1, 2]]  # only the shortlist is scored by the decoder
    order = np.argsort(-s, kind="stable").tolist()
    assert order == [1, 2, 0, 3, 4]  # row 4's huge decoder score never counts: it is not shortlisted
    assert np.array_equal(rt.MergedScore().scores(fp, np.zeros(5), decoder_logp=decoder), fp)  # stage 1 only
    # the prior decides who is shortlisted; missing decoder scores take the shortlist's lowest
    s = rt.MergedScore(library_prior=10.0, decoder_weight=1.0, shortlist=3).scores(
        fp, np.array([0, 0, 0, 1, 1]), decoder_logp=np.array([-20.0, 0.0, 0.0, np.nan, 5.0]))
    assert np.argsort(-s, kind="stable").tolist() == [4, 3, 0, 1, 2]  # row 3 scored as the lowest, -20


def test_count_term_defends_a_de_novo_answer():
    # row 0: de novo, drawn 30 times; row 1: a library look-alike 2 nats better; row 2: library, drawn once
    fp, known, count = np.array([-10.0, -8.0, -9.0]), np.array([0, 1, 1]), np.array([30, 0, 1])
    m = rt.MergedScore(library_prior=1.0, count_weight=1.0)
    s = m.scores(fp, known, count)
    assert np.argmax(s) == 0 and s[0] == pytest.approx(-10.0 + np.log(30))
    assert s[1] == -7.0 and s[2] == -8.0  # drawn once or never: no count term
    assert np.argmax(rt.MergedScore(library_prior=1.0).scores(fp, known, count)) == 1
    # the Variant used by the measurement scores the same
    pool = _pool(fp, known, count, truth=0)
    rows, kn, _ = rt.setting_rows(pool, "formula", "joint")
    assert np.allclose(rt.Variant("v", prior=1.0, count_weight=1.0).scores(pool, rows, kn), s)


def test_two_stage_keeps_ties():
    s = rt.two_stage(np.array([3.0, 2.0, 1.0, 1.0]), np.array([True, True, False, False]),
                     np.array([[5.0, 5.0], [1.0, 2.0]]))
    assert s.shape == (2, 4)
    assert s[0, 0] == s[0, 1] and s[0, 1] > s[0, 2] == s[0, 3]
    assert s[1, 1] > s[1, 0] > s[1, 2]
    assert rt.two_stage(np.zeros(0), np.zeros(0, bool), np.zeros((3, 0))).shape == (3, 0)  # nothing to rank


def test_a_spectrum_without_de_novo_candidates():
    pool = _pool([-1.0, -2.0], [1, 1], [0, 0])
    v = rt.Variant("d", prior=3.0, decoder_weight=1.0)
    assert rt.pool_hits(v, pool, "formula", "denovo") == {1: 0.0, 10: 0.0}
    assert rt.pool_hits(v, pool, "formula", "joint")[1] == 1.0


def test_fill_missing():
    assert rt.fill_missing(np.array([1.0, np.nan, -2.0])).tolist() == [1.0, -2.0, -2.0]
    assert rt.fill_missing(np.array([np.nan])).tolist() == [0.0]


def test_shortlisted_candidates_need_decoder_scores():
    pool = _pool([-1.0, -2.0, -3.0], [1, 1, 1], [0, 0, 0])
    pool.scored[1] = False
    rows, known, _ = rt.setting_rows(pool, "formula", "library")
    with pytest.raises(ConfigError, match="no decoder score"):
        rt.Variant("d", decoder_weight=1.0, shortlist=2).scores(pool, rows, known)


def test_rescore_keys_cover_every_shortlist_of_every_prior_and_setting():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(5, 80))
        entries = {}
        for i in range(n):
            fl = bool(rng.random() < 0.6)
            ml = fl or bool(rng.random() < 0.3)
            count = int(rng.integers(1, 5)) if rng.random() < 0.4 else 0
            if not (fl or ml or count):
                count = 1
            entries[f"K{i}"] = rt._Entry("C", "C", np.zeros(0, np.int64), fl, ml, count, float(rng.normal(-30, 8)))
        entries["K0"].fl = entries["K0"].ml = True  # the truth is in both tracks
        keep = set(rt.rescore_keys(entries, "K0", size=5))
        rec = {"key": f"t{trial}", "truth": {"inchikey14": "K0"}, "queries": [{}],
               "candidates": [{"k": k, "fp": e.fp, **({"fl": 1} if e.fl else {}), **({"ml": 1} if e.ml else {}),
                               **({"n": e.count} if e.count else {}), **({"dec": [-1.0]} if k in keep else {})}
                              for k, e in entries.items()]}
        pool = rt.Pool.from_record(rec)
        for sized, c in ((False, 0.0), (True, 0.0), (False, 3.0), (True, 10.0)):
            v = rt.Variant("v", decoder_weight=1.0, queries=(0,), shortlist=5, sized_prior=sized, count_weight=c)
            for track in rt.TRACKS:
                for setting in rt.SETTINGS:
                    rows, known, _ = rt.setting_rows(pool, track, setting)
                    for b in (-50.0, -3.0, 0.0, 2.0, 7.0, 100.0):
                        v.scores_many(pool, rows, known, "decoder_weight", [0.5], b)  # raises if not covered


def test_choose_respects_the_crowding_limit():
    # pool A: the library truth beaten by a de novo look-alike unless the prior is > 3
    a = _pool([-10.0, -20.0, -7.0], [1, 1, 0], [0, 0, 5], key="a")
    # pool B: the truth first de novo; a library decoy 4 nats behind it takes rank 1 when the prior is > 4
    b = _pool([-10.0, -14.0, -30.0], [1, 1, 0], [2, 0, 1], key="b")
    priors = tuple(float(x) for x in np.arange(0.0, 10.0, 0.5))
    v, info = rt.choose(rt.Variant("p"), "decoder_weight", [a, b], priors, (0.0,), tolerance=0.0)
    assert v.prior == 3.5 and info["crowding_ok"] and info["joint_hit1"] == 1.0 and info["crowding_loss"] == 0.0
    # pool B2: the decoy only 1 nat behind: no prior both lifts A's truth and keeps B2's rank 1
    b2 = _pool([-10.0, -11.0, -30.0], [1, 1, 0], [2, 0, 1], key="b2")
    v, info = rt.choose(rt.Variant("p"), "decoder_weight", [a, b2], priors, (0.0,), tolerance=0.0)
    assert v.prior == 0.0 and info["crowding_ok"] and info["joint_hit1"] == 0.5  # ties: the smallest prior
    v, info = rt.choose(rt.Variant("p"), "decoder_weight", [a, b2], priors, (0.0,), tolerance=None)
    assert v.prior == 3.5 and info["joint_hit1"] == 1.0 and info["crowding_loss"] == 0.5  # no limit: B2 pays


# -- library tracks ------------------------------------------------------------------------------------
ISOMERS = {  # formula -> structures of it (the test checks the formulas with RDKit)
    "C10H14N2": ["C1CCNC(C1)c1cccnc1", "CN1CCCC1c1ccccn1", "CN1CCCC1c1ccncc1", "CC1CCN(C1)c1ccncc1"],
    "C10H22O3": ["CCCCCOCCOCCCO", "CCCCOCCOCCOCC", "CCCCCCCCOCC(O)O", "CCCCCCCOCC(O)CO"],
    "C12H14N2O2": ["NC(CCc1c[nH]c2ccccc12)C(=O)O", "CNC(Cc1c[nH]c2ccccc12)C(=O)O",
                   "NC(Cc1c[nH]c2cc(C)ccc12)C(=O)O"],
    "C11H13NO3": ["COC(=O)C(Cc1ccccc1)NC=O", "CC(=O)NC(C(=O)O)c1ccc(C)cc1", "CC(=O)Nc1ccc(CCC(=O)O)cc1"],
}
OTHERS = ["CCO", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O", "CN1C=NC2=C1C(=O)N(C(=O)N2C)C"]


def write_corpus(path, extra=()):
    rows = ["smiles\tinchikey14\tsource"]
    for smiles in [s for group in ISOMERS.values() for s in group] + OTHERS + list(extra):
        rows.append(f"{chem.canonical_smiles(smiles)}\t{chem.inchikey14(smiles)}\ttest")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_isomers_have_their_formulas():
    for formula, group in ISOMERS.items():
        for s in group:
            assert chem.mol_formula(chem.mol_from_smiles(s)) == formula, s


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    nicotine = "CN1CCCC1c1cccnc1"
    return rt.open_corpus(write_corpus(tmp_path / "corpus.tsv", [nicotine])), chem.inchikey14(nicotine)


def test_track_rows_leave_out_the_truth_and_overlap(corpus):
    from engine.library.build import neutral_mass

    library, truth = corpus
    mol = chem.mol_from_smiles("CN1CCCC1c1cccnc1")
    f, m = rt.track_rows(library, truth, "C10H14N2", neutral_mass(mol), np.random.default_rng(0))
    keys_f = {library.inchikey14(r) for r in f}
    assert truth not in keys_f and truth not in {library.inchikey14(r) for r in m}
    assert len(f) == 4 and all(library.record(r).formula == "C10H14N2" for r in f)
    assert set(f) <= set(m) or len(m) == 4
    f2, m2 = rt.track_rows(library, truth, "C10H14N2", neutral_mass(mol), np.random.default_rng(0), size=2)
    assert len(f2) == 2 and len(m2) == 2 and set(m2) <= set(f) and set(m2) == set(f2)  # the same draws
    f3, m3 = rt.track_rows(library, truth, "C99H2", 1.0, np.random.default_rng(0))
    assert len(f3) == 0 and len(m3) == 0


def test_mgf_labels(data_dir):
    fold, lic, keys = rt.mgf_labels(data_dir / "fixture.mgf")
    assert len(fold) == len(lic) == len(keys) == 12
    assert set(fold) == {"val"} and "CC0" in set(lic) and all(len(k) == 14 for k in keys)


# -- end to end ----------------------------------------------------------------------------------------
def _fixture_with_train_records(data_dir, path):
    """The fixture with N-acetylphenylalanine and nicotine as FOLD=train records of a licence the encoder
    'did not train on', so they are the train-unseen set."""
    blocks = (data_dir / "fixture.mgf").read_text().split("END IONS")
    out = []
    for block in blocks:
        if "FORMULA=C11H13NO3" in block or "FORMULA=C10H14N2\n" in block:
            block = block.replace("FOLD=val", "FOLD=train").replace("LICENSE=CC0", "LICENSE=CC BY-NC")
            block = block.replace("LICENSE=CC BY\n", "LICENSE=CC BY-NC\n")
        out.append(block)
    path.write_text("END IONS".join(out))
    return path


def test_end_to_end_on_the_tiny_bundle(tiny_bundle_dir, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    mgf = _fixture_with_train_records(data_dir, tmp_path / "spectra.mgf")
    cfg = rt.RetrievalConfig(mgf=str(mgf), corpus=str(write_corpus(tmp_path / "corpus.tsv")),
                             out=str(tmp_path / "out"), model=str(tiny_bundle_dir), choose_spectra=2,
                             report_spectra=2, fragment_spectra=1, licenses=("CC0",), precision="fp32")
    metrics = rt.run(cfg)
    out = tmp_path / "out"
    assert json.loads((out / "metrics.json").read_text())["recommended"]["variant"] == metrics["recommended"]["variant"]
    assert metrics["recommended"]["merged_score"].startswith("MergedScore(")
    variants = metrics["result"]["variants"]
    assert {v.name for v in rt.FIXED} | {f[0].name for f in rt.FAMILIES} | {f[0] for f in rt.ON_COUNT} == set(variants)
    assert len(metrics["result"]["tradeoff"]) in (len(rt.TRADEOFF_PRIORS), 2 * len(rt.TRADEOFF_PRIORS))
    for m in variants.values():
        assert m["choose"]["n"] == 2 and m["report"]["n"] == 2
        for set_name in ("choose", "report"):
            for track in rt.TRACKS:
                for setting in rt.SETTINGS:
                    assert all(0.0 <= x <= 1.0 for k, x in m[set_name][track][setting].items() if k.startswith("hit")
                               and not k.endswith("ci95"))
    assert "fragment_subset" in metrics["result"]
    assert metrics["timings"]["spectra"] == 4 and metrics["timings"]["denovo_s"] > 0
    records = [json.loads(line) for line in (out / "pools.jsonl").read_text().splitlines()]
    assert len(records) == 4
    assert {r["fold"] for r in records} == {"train", "val"}
    for r in records:
        keys = [c["k"] for c in r["candidates"]]
        assert len(keys) == len(set(keys))  # one candidate per structure
        truth = next(c for c in r["candidates"] if c["k"] == r["truth"]["inchikey14"])
        assert truth["fl"] == truth["ml"] == 1 and "dec" in truth and len(truth["dec"]) == len(rt.QUERY_POSITIONS)
        assert sum(c.get("fl", 0) for c in r["candidates"]) == r["n_formula_track"]
        assert sum(c.get("ml", 0) for c in r["candidates"]) == r["n_mass_track"]
        if r["formula"] in ISOMERS:
            assert r["n_formula_track"] > 1
    assert (out / "report.md").read_text().startswith("# Library + de novo ranking")
    # a rerun computes nothing new
    rt.run(cfg)
    assert len((out / "pools.jsonl").read_text().splitlines()) == 4
    assert len((out / "fragments.jsonl").read_text().splitlines()) == 2


def test_main_reports_errors(tmp_path, capsys):
    rc = rt.main(["--mgf", str(tmp_path / "missing.mgf"), "--corpus", str(tmp_path / "missing.tsv"),
                  "--out", str(tmp_path / "out"), "--model", str(tmp_path / "no_model")])
    assert rc == 1 and "error:" in capsys.readouterr().err


def test_library_only_pools_hold_the_same_library_candidates_without_the_search(tiny_bundle_dir, data_dir, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    mgf = _fixture_with_train_records(data_dir, tmp_path / "spectra.mgf")
    common = {"mgf": str(mgf), "corpus": str(write_corpus(tmp_path / "corpus.tsv")), "model": str(tiny_bundle_dir),
              "choose_spectra": 2, "report_spectra": 2, "licenses": ("CC0",), "precision": "fp32"}
    rt.run(rt.RetrievalConfig(out=str(tmp_path / "full"), **common))
    summary = rt.run(rt.RetrievalConfig(out=str(tmp_path / "lib"), library_only=True, **common))
    assert summary["run"]["library_only"] and summary["run"]["pools"] == 4
    assert not (tmp_path / "lib" / "metrics.json").exists()  # nothing analysed: it needs de novo pools
    full = rt.read_jsonl(tmp_path / "full" / "pools.jsonl")
    lib = rt.read_jsonl(tmp_path / "lib" / "pools.jsonl")
    assert set(full) == set(lib)
    for key, rec in lib.items():
        assert rec["n_denovo"] == 0 and rec["queries"] == [] and all("n" not in c and "dec" not in c
                                                                   for c in rec["candidates"])
        in_library = {c["k"]: c for c in full[key]["candidates"] if c.get("fl") or c.get("ml")}
        assert {c["k"]: c["fp"] for c in rec["candidates"]} == {k: c["fp"] for k, c in in_library.items()}
        pool = rt.Pool.from_record(rec)
        assert np.isnan(pool.decoder_mean([0])).all()  # no stored query: no decoder term, not an error
        _, _, truth = rt.setting_rows(pool, "formula", "library")
        assert truth is not None and rt.pool_hits(rt.Variant("fingerprint"), pool, "formula", "library")[1] in (0, 1)
    run_key = json.loads((tmp_path / "lib" / "run.json").read_text())["run_key"]
    assert run_key["library_only"] is True and "library_only" not in json.loads(
        (tmp_path / "full" / "run.json").read_text())["run_key"]  # fmt: skip
    with pytest.raises(ConfigError, match="leave out --fragment-spectra"):
        rt.run(rt.RetrievalConfig(out=str(tmp_path / "lib2"), library_only=True, fragment_spectra=1, **common))
