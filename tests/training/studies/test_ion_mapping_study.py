"""The ion-mapping study (training/studies/ion_mapping.py): its stratified choice of spectra, the [M]+ records' charged
formulas, the native spectra of the same molecules, and the table it prints from a cache."""

import json

from training.studies.ion_mapping import _stratified, select, table


def record(title, adduct, key, formula="C10H10O3", fold="val", mode="positive"):
    return {"TITLE": title, "ADDUCT": adduct, "INCHIKEY": f"{key}-UHFFFAOYSA-N", "FORMULA": formula, "FOLD": fold,
            "IONMODE": mode, "PEPMASS": "100.0", "_peaks": ["50.0 1"]}


def write(path, records):
    with open(path, "w") as fh:
        fh.writelines("BEGIN IONS\n" + "".join(f"{k}={v}\n" for k, v in r.items() if k != "_peaks")
                     + "\n".join(r["_peaks"]) + "\nEND IONS\n\n" for r in records)
    return path


def test_stratified_takes_one_spectrum_of_each_structure_per_pass():
    recs = [record(f"{k}{i}", "[M+NH4]+", k * 14) for k in "ABC" for i in range(3 if k == "A" else 1)]
    chosen = _stratified(recs, 4)
    keys = [r["INCHIKEY"][:14] for r in chosen]
    assert sorted(keys[:3]) == ["A" * 14, "B" * 14, "C" * 14] and keys[3] == "A" * 14  # every structure first
    assert _stratified(recs, 2) == chosen[:2]  # a larger cap extends the same choice (the cache resumes)


def test_select_strips_a_cations_charge_counts_radicals_and_pairs_native_spectra(tmp_path):
    mgf = write(tmp_path / "lib.mgf", [
        record("nh4", "[M+NH4]+", "A" * 14),
        record("h", "[M+H]+", "A" * 14),  # the same molecule's native spectrum
        record("cation", "[M]+", "B" * 14, formula="C5H14NO+"),
        record("radical", "[M]+", "C" * 14, formula="C40H56"),
        record("train", "[M+NH4]+", "D" * 14, fold="train"),
    ])
    chosen, pairs, counts = select(mgf, 10)
    assert [r["TITLE"] for r in chosen["[M+NH4]+"]] == ["nh4"]
    assert chosen["[M]+"][0]["FORMULA"] == "C5H14NO"
    assert counts["[M]+ radical or neutral formula"] == 1 and counts["[M+NH4]+ structures"] == 1
    assert set(pairs) == {"nh4"} and pairs["nh4"]["TITLE"] == "h"


def test_table_reports_each_ion_type_and_its_native_comparison(tmp_path):
    rows = [
        {"ion_type": "[M+NH4]+", "variant": "mapped", "id": "a", "inchikey14": "A", "rank": 1, "n_consistent": 80,
         "note": "run as [M+H]+ after NH3 loss (mapping)", "seconds": 1.0},
        {"ion_type": "[M+NH4]+", "variant": "mapped", "id": "b", "inchikey14": "B", "rank": None, "n_consistent": 60,
         "note": "run as [M+H]+ after NH3 loss (mapping)", "seconds": 1.0},
        {"ion_type": "[M+NH4]+", "variant": "native", "id": "a", "inchikey14": "A", "rank": 12, "n_consistent": 90,
         "note": "", "seconds": 1.0},
        {"ion_type": "[M]+", "variant": "mapped", "id": "c", "inchikey14": "C", "rank": None, "n_consistent": 0,
         "note": "run as [M+H]+ of C5H13NO, the cation's formula minus H (mapping)", "seconds": 1.0},
    ]
    cache = tmp_path / "cache.jsonl"
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(cache)
    assert "| [M+NH4]+ | run as [M+H]+ after NH3 loss (mapping) |   2 (2) |  50.0 |  50.0 |  50.0 | 70 |" in text
    assert "| [M+NH4]+ | mapped, molecules with a native spectrum |   1 (1) | 100.0 | 100.0 | 100.0 | 80 |" in text
    assert "| [M+NH4]+ | their native [M+H]+ spectra |   1 (1) |   0.0 |   0.0 | 100.0 | 90 |" in text
    assert "run as [M+H]+ of F − H, the cation's formula minus H (mapping)" in text  # not one molecule's formula
