"""Tooltips in a chemist's words (one place, so the wording stays consistent)."""

KAPPA = (
    "<b>Density band κ</b> — how much of the predicted substructure fingerprint each query keeps.<br>"
    "The spectrum encoder predicts, for 4096 substructure bits (Morgan, radius 2), how likely each "
    "is present. A query switches on the most likely bits; κ is how many, relative to a typical "
    "real molecule (κ = 1: as many bits as a true structure has on average).<br>"
    "Low κ keeps only the confident substructures (the model fills in the rest); high κ also keeps "
    "doubtful ones. MS-GPT sweeps the whole band from κ<sub>max</sub> to κ<sub>min</sub> "
    "(default 0.95–1.50). Changing the band asks new questions, so the structures are drawn again."
)
KAPPA_MIN = KAPPA + "<br><br><b>κ<sub>min</sub></b>: the sparse end of the band."
KAPPA_MAX = KAPPA + "<br><br><b>κ<sub>max</sub></b>: the dense end of the band."
GROUPS = (
    "<b>Query groups M</b> — how many fingerprint queries are spread across the κ band "
    "(default 20). Each query proposes its own structures; more groups sweep the band more finely. "
    "M = 1 is the classic single query at one κ (give κ<sub>min</sub> = κ<sub>max</sub>)."
)
SAMPLES = (
    "<b>Samples per query N = B / M</b> — how many structures the model writes down for each query."
)
POOL = (
    "<b>Pool size B = M × N</b> — how many candidate structures are drawn in total for a spectrum "
    "(100–1500, in steps of M). A larger pool finds rarer structures and steadier ranks but takes "
    "longer. Raising B draws only the extra structures; lowering it re-ranks the first ones without "
    "drawing anything."
)
SEED = (
    "<b>Random seed</b> — the same seed gives the same candidates for the same spectrum and "
    "settings; it is written into every export."
)
SUSPECTS_PRESENT = (
    "<b>Suspects present</b> — of the features your suspect lists match by formula, the share you expect to "
    "really be one of their compounds. A suspect rank 1 is right only when the compound is on your list, and the "
    "spectrum says little about that; so its confidence follows what you expect: about 90% for a mix of standards "
    "known to be in the sample, 10% or less for a broad list (NORMAN, PubChemLite) screened against a complex "
    "sample. 50% unless you set it, about what the suspect model was fitted at. Measured on held-out spectra, it is "
    "calibrated when the share you give is the real one (docs/evidence/suspect_confidence.md). It changes the "
    "confidence, never the ranking or the identification level."
)
ADAPTER = (
    "<b>Use adapter</b> — switch the model's fine-tuning for real spectra on or off.<br>"
    "The structure generator learned chemistry from true substructure fingerprints of millions of "
    "molecules, but it reads fingerprints <i>predicted</i> from spectra, and the spectrum encoder makes "
    "systematic mistakes (substructures it tends to miss or to invent). The adapter is a small add-on "
    "trained on annotated spectra of this kind, so the generator reads those predicted fingerprints "
    "the way they are meant; it leaves the learned chemistry alone.<br>"
    "On (default): usually more correct structures at the top. Off: the generator as pretrained, to "
    "compare. Switching draws the candidates again. Greyed out when the model has no adapter."
)
ADAPTER_MISSING = "This model bundle has no adapter (no adapter/ folder), so there is nothing to switch."
FIDELITY = (
    "<b>Spectrum fidelity</b> — how well the fingerprint queries predicted from this spectrum match "
    "the reference structure in the file (highest Tanimoto similarity, 0–1). Low fidelity means the "
    "spectrum encoder missed much of the reference's substructures, so the model can hardly propose it."
)
REFERENCE_RANK = (
    "<b>Reference</b> — where the structure given in the file (SMILES / InChIKey) ranks among the "
    "candidates, compared on the 2D skeleton (first InChIKey block): <i>exact</i> = rank 1, "
    "<i>#k</i> = rank k, <i>absent</i> = not generated."
)

DECODING = (
    "<b>Decoding</b> — <i>formula</i>: the generator may only write structures with exactly the "
    "spectrum's heavy atoms (each C, N, O, S, P, halogen... placed once), with every ring and branch "
    "closed and valences respected; almost every drawn structure is a usable candidate.<br>"
    "<i>free</i>: the original MS-GPT sampling; structures with another formula are drawn and thrown away."
)
RANKING = (
    "<b>Ranking</b> — <i>fingerprint</i>: how well the candidate's own substructures match what the "
    "spectrum predicts (the fingerprint score). <i>combined</i>: that plus the log of how often the model "
    "proposed it. <i>frequency</i>: the original MS-GPT ranking by generation count. Changing the ranking re-ranks the drawn structures; nothing is drawn again."
)
EFFORT = (
    "<b>Effort</b> — <i>standard</i>: the pool of B drawn structures, then three rounds of isomer edits: the "
    "isomers one move away from the best candidates (a substituent moved, two atoms swapped) that score best "
    "join them. <i>deep</i>: then the search refines the best candidates: it keeps all but one or two of their "
    "fragments and lets the generator redraw the rest, draws more for the queries whose candidates score best, "
    "borrows fragments from the closest library structures of other formulas, and edits further. It takes "
    "about 3–4 times as long and finds the true structure a little more often (docs/deep_search.md)."
)

TIPS = {
    "spectra_columns": (  # the spectra list's columns, in SpectraModel.COLUMNS order
        "Spectrum title (TITLE / FEATURE_ID / scan number) and the file it comes from; F0007: a precursor "
        "feature of an LC-MS run (▸ shows its scans)",
        "m/z of the precursor ion (PEPMASS; a feature's from its MS1 survey scan); * typed by you",
        "Precursor ion type; set it below the spectrum when the file has none (or pick a formula candidate)",
        "Neutral molecular formula; MS-GPT needs one. Without it, Run takes the best formula candidates "
        "(Formulas tab); set one below the spectrum or pick one there",
        "Retention time in minutes (a feature: from its first to its last scan)",
        "MS/MS scans merged into a feature's consensus spectrum",
        "Number of peaks; ⚠ no fragments: the spectrum holds only the precursor",
        "not run / queued / running / done / failed, or what the spectrum needs before it can run "
        "(the tooltip of a cell gives the reason)",
        "Probability that the rank-1 candidate is the right structure, calibrated on spectra of compounds the "
        "encoder never saw (the model card gives how well it holds on held-out spectra); sort by it to look at "
        "the surest answers first. For a formula Run picked from the candidates it includes that formula's "
        "probability. Empty: not run, or the settings differ from the default band, B = 100 and decoding the "
        "confidence was fitted with (a cell's tooltip says why). When a reference spectrum identifies rank 1, the "
        "identification's own probability, calibrated on identity searches without the query's lab; when rank 1 "
        "comes from your suspect list, the suspect model's (its fragment, analog and fingerprint evidence against "
        "the list's other structures of its formula), for the share of your lists' formula matches you expect to "
        "be their compounds (Run ▸ Libraries…; 50% unless you set it)",
        "Identification level (Schymanski et al. 2014): 2a a reference spectrum match identifies rank 1 (the "
        "calibrated rule); 2b a suspect-list rank 1 whose confidence reaches the level the fit chose for 90% precision; "
        "3 tentative candidates, or a reference match whose isomer matches nearly as well (named); "
        "4 a molecular formula only; 5 an exact mass only (the tooltip says more)",
        "The feature's abundance, largest over the samples, from the quantification table (a <name>_quant.csv "
        "beside a GNPS/MZmine MGF) or the file (MS-DIAL's INTENSITY); the tooltip lists each sample. Filter: "
        "abundance:100000- ",
        "Compound group of an LC-MS run: features that are ions of one compound (G0001 [M+Na]+: its sodium adduct; "
        "same apex, m/z of two ion types, MS1 traces that rise and fall together). Run ranks one formula over all "
        "of them, elucidates the member whose fragments it explains best, and every member shows that answer "
        "(the tooltip says which)",
    ),
    "columns": {
        "Structure": "2D structure of the candidate (stereochemistry is not predicted)",
        "Rank": "The feature's rank, as msgpt predict's feature_rank: identifications first, then your suspect "
                "lists' structures, then every candidate by its score (see Ranking: by default the fingerprint "
                "score) and its formula's probability: a structure of an improbable formula comes first only when "
                "it scores far better. With one formula chosen above the table: the rank within that formula's run",
        "Name": "The compound's name in the library or suspect list that holds it, or of the reference spectrum "
                "that matched it; empty for a structure only the model drew",
        "Change": "How the rank moved since the previous ranking (other pool size or band): "
                  "▲ up, ▼ down, new = not there before",
        "SMILES": "Canonical SMILES without stereochemistry; ⚠: a motif no stable compound is known to show "
                  "(a strained or antiaromatic small ring, an aminal, an α-haloamine, an N–halogen bond): the "
                  "tooltip says which. A hint only: the rank and the exports are unchanged",
        "Formula": "Molecular formula of the candidate (always the spectrum's formula; after a run of several "
                   "formula candidates, the formula it was drawn for)",
        "Formula P": "Probability of the candidate's formula among the formula candidates of the precursor "
                     "(Formulas tab: mass, fragments, MS1 isotopes, corpus prior); #k is the formula's rank. "
                     "Empty for a formula given in the file or typed, or one only a library proposed",
        "Count": "How many of the B drawn structures were this molecule (2D skeleton). Structures the "
                 "model proposes again and again, from different queries, are more likely",
        "Frequency": "Count / number of drawn structures: the share of the pool that is this molecule",
        "Posterior sim.": "Posterior similarity: highest Tanimoto similarity between the candidate's "
                          "substructure fingerprint and the queries predicted from the spectrum (0–1). "
                          "Higher means its substructures agree with what the spectrum suggests",
        "Score": "Fingerprint score: log-likelihood of the candidate's own substructure fingerprint under the "
                 "bit probabilities predicted from the spectrum (recalibrated on training spectra when the model "
                 "carries a calibration). Higher (closer to 0) means the spectrum supports its substructures",
        "Reference": "The accession of the reference spectrum of this structure that matched the spectrum (the "
                     "tooltip gives similarity, matched peaks, licence and contributor); ★ marks the reference "
                     "structure given in the file",
        "Origin": "Where the candidate comes from, as tags: ✔ 2a identified by a reference spectrum (level 2a); "
                  "◆ name: in your suspect list of that name; library: in a structure library; spectrum: a "
                  "reference spectrum of it matched (above the floor of evidence, not identifying it); de novo: "
                  "drawn by the model. The tooltip says each in full",
    },
}
