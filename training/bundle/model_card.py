"""A bundle's MODEL_CARD.md: what the model does, its components, training data, training, calibration, files,
evaluation and limits, rendered from the summaries :mod:`training.bundle.build_bundle` gathers."""

from __future__ import annotations

from pathlib import Path

from engine.errors import BundleError
from engine.model.bitlegend import FILE_NAME as LEGEND_FILE
from engine.model.bitlegend import BitLegend
from engine.model.known import FILE_NAME as KNOWN_FILE
from engine.model.known import KnownStructures
from training.data.spectra import DEFAULT_ADDUCTS


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _adduct_words(info: dict) -> str:
    """``[M+H]+`` or ``[M+Na]+`` (positive mode) and ``[M-H]-`` (negative mode), from the bundle's ion types."""
    adducts = info.get("supported_adducts") or list(DEFAULT_ADDUCTS)
    modes = []
    for sign, mode in (("+", "positive"), ("-", "negative")):
        names = [f"`{a}`" for a in adducts if a.endswith(sign)]
        if names:
            modes.append(f"{' or '.join(names)} ({mode} mode)")
    return " and ".join(modes)


def _simulated_line(sim: dict) -> str:
    """The card's line on the simulated spectra the encoder also trained on (``metrics.json`` data.simulated)."""
    sources = ", ".join(sim.get("sources") or []) or "all sources"
    return (f"- **Spectrum encoder, simulated spectra**: {sim['spectra']:,} spectra ("
            + ", ".join(f"{n:,} {a}" for a, n in sim.get("adducts", {}).items())
            + f") of {sim.get('structures', 0):,} molecules of `molecules.tsv.gz` ({sources}; "
            + _overlap_words(sim.get("measured_structures"))
            + "none a `FOLD=val` structure), simulated by the project's forward model (`training/encoder/forward.py`, "
            "trained on the licence-clean `FOLD=train` spectra above"
            + (", **control run**: every fragment candidate equally likely" if sim.get("control") else "")
            + f"; file `{Path(sim['file']).name}`). They add training structures only: calibration, model "
            "selection and the figures below use measured spectra.")


def _overlap_words(measured: int | None) -> str:
    """How many simulated molecules are measured training structures too (nothing when not recorded)."""
    if measured is None:
        return ""
    if measured == 0:
        return "none of them among the measured training structures, "
    return f"{measured:,} of them also among the measured training structures, "


def _modes_of(adducts) -> str:
    """"positive-mode", "negative-mode" or "positive- and negative-mode", from ion type names."""
    signs = {a[-1] for a in adducts}
    if signs == {"+", "-"}:
        return "positive- and negative-mode"
    return "negative-mode" if signs == {"-"} else "positive-mode"


def _noise_source(path: str) -> str:
    """Whose posteriors a noise model's rates were measured on, in words for the card."""
    from training.encoder.noise import FingerprintNoise

    try:
        source = str(FingerprintNoise.load(path).meta.get("source", ""))
    except (BundleError, OSError):
        source = ""
    if source.startswith("bundle "):  # training.encoder.noise fit --bundle
        return (f"the rates at which the encoder of {source.split(' on ')[0]} keeps true bits and switches false "
                "ones on for the FOLD=train structures it never trained on")
    return "the rates at which out-of-fold encoders keep true bits and switch false ones on"


def render_card(name: str, bundle_dir: Path, info: dict, evaluation: str | None) -> str:
    """The model card (``MODEL_CARD.md``) of the bundle in ``bundle_dir``, one section after another, from what
    :func:`build` gathered in ``info`` and the Markdown ``evaluation`` table (None: not evaluated yet)."""
    # a later stage may read another corpus than the earlier ones: the card names the last stage's and,
    # from the known-structures set (the union over stages), what all stages read together
    known = KnownStructures.load(bundle_dir / KNOWN_FILE) if (bundle_dir / KNOWN_FILE).is_file() else None
    lines = [
        *_card_title(name, info),
        *_card_what_it_does(info),
        *_card_components(info),
        *_card_training_data(info, known),
        *_card_training(info),
        *_card_calibration(info["calibration"]),
        *_card_files(bundle_dir, known),
        *_card_evaluation(evaluation),
        *_card_limits(info, known),
    ]
    return "\n".join(lines)


def _device_run(info: dict) -> dict:
    """The record of a decoder stage trained on a lent accelerator (training.decoder.accelerator); empty when none was."""
    return info["decoder"].get("config", {}).get("device_run") or {}


def _card_title(name: str, info: dict) -> list[str]:
    """The card's title and first paragraph: where the model was trained, when it was built, checksum, size and
    weight storage."""
    device_run = _device_run(info)
    where = (f"on a 2-core CPU ({info['machine']}), its last decoder stage on a lent {device_run['device']} "
             "(`python -m training.decoder.accelerator`)" if device_run else f"on a 2-core CPU ({info['machine']})")
    return [
        f"# Model card: {name}",
        "",
        f"The default model bundle of MS-GPT Desktop, trained by this project's own code {where}. Built {info['built']} by `python -m training.bundle.build_bundle`; bundle checksum "
        f"`{info['checksum'][:16]}`, {info['size_mb']:.1f} MB, decoder weights stored in {info['dtype']}, "
        f"encoder weights in {info.get('encoder_dtype', 'fp32')}"
        + (" (its calibration was computed on those rounded weights)." if info.get("encoder_dtype", "fp32") != "fp32"
           else "."),
        "",
    ]


def _card_what_it_does(info: dict) -> list[str]:
    """The card's section on what the model does with a spectrum."""
    return [
        "## What it does",
        "",
        f"Given an MS/MS spectrum of a singly charged ion ({_adduct_words(info)}) and the "
        "molecule's formula, it proposes candidate structures: a spectrum encoder predicts a Morgan "
        "fingerprint posterior, density-band queries are cut from it, and a fingerprint- and "
        "formula-conditioned decoder samples SAFE strings (MS-GPT, see the paper in the project).",
        "",
    ]


def _card_components(info: dict) -> list[str]:
    """The card's table of the model's parts (decoder, encoder, adapter) with their parameter counts."""
    pc = info["decoder_parameters"]
    cfg = info["decoder"].get("config", {})
    enc_cfg = info["encoder"].get("train_config", {})
    lines = [
        "## Components",
        "",
        "| component | preset | parameters |",
        "| --- | --- | --- |",
        f"| decoder (GPT-2 backbone + fingerprint/formula context + cross-attention) | {cfg.get('preset', '?')} | "
        f"{pc['total'] / 1e6:.2f}M |",
        f"| spectrum encoder (MIST-style, peaks annotated with subformulas) | {enc_cfg.get('preset', '?')} | "
        f"{info['encoder_parameters'] / 1e6:.2f}M |",
    ]
    if info.get("adapter"):
        lines.append(f"| LoRA adapter (posterior-aligned adaptation, merged at load) | rank 4 | "
                     f"{info['adapter'].get('trainable_parameters', '?')} |")
    lines += ["", "Decoder parameters by component: " + ", ".join(
        f"{k} {v / 1e6:.2f}M" for k, v in pc.items() if k != "total") + ".", ""]
    return lines


def _card_training_data(info: dict, known: KnownStructures | None) -> list[str]:
    """The card's section on the data: the licences kept, the decoder's corpus and the encoder's spectra."""
    dec = info["decoder"]
    enc_data = info["encoder"].get("metrics", {}).get("data", {})
    lines = ["## Training data", "",
             "Only records we may redistribute a model of were used: spectra whose MassBank `LICENSE` is "
             "CC0, CC BY, CC BY-SA or dl-de/by-2-0; non-commercial (CC BY-NC*) records were excluded.", ""]
    if "corpus_records" in dec:
        lines.append(_corpus_line(dec, known))
    if enc_data:
        lines.append(_encoder_data_line(enc_data, adapter=bool(info.get("adapter"))))
        if enc_data.get("simulated"):
            lines.append(_simulated_line(enc_data["simulated"]))
    lines.append("")
    return lines


def _corpus_line(dec: dict, known: KnownStructures | None) -> str:
    """The card's line on the molecule corpus the (last stage of the) decoder was pretrained on."""
    staged = bool(dec.get("earlier_stages"))
    return (
        f"- **Decoder pretraining{', last stage' if staged else ''}**: {dec['corpus_records']:,} distinct "
        f"structures ({dec['corpus_tokens'] / 1e6:.1f}M "
        "SAFE tokens): the molecule corpus `molecules.tsv.gz` of the project's shared data (public "
        "sources and their licenses are listed in its `molecules.md`: MassBank open records, RepoRT, "
        "MetaCyc via ModelSEED, NP-Classifier training data, MIBiG, MoleculeNet, ChEMBL and ZINC subsets)"
        + (" plus the `FOLD=train` structures of `massbank_dev.mgf.gz`"
           if any("(MGF" in k for k in dec.get("corpus_inputs") or {"(MGF": 0}) else "")
        + "; structures of the `val` fold and of the held-out test sets are excluded."
        + (" Input rows: " + ", ".join(f"{n:,} from `{k}`" for k, n in dec["corpus_inputs"].items())
           + (" (a `.tsv.gz` other than `molecules.tsv.gz` is a seeded subset of it made by "
              "`scripts/sample_molecules.py`; the README's training steps give the command)."
              if any(k.endswith(".tsv.gz") and k != "molecules.tsv.gz" for k in dec["corpus_inputs"]) else ".")
           if dec.get("corpus_inputs") else "")
        + (f" All stages together read {len(known):,} distinct structures (the known-structures set below)."
           if staged and known is not None and len(known) != dec["corpus_records"] else ""))


def _encoder_data_line(enc_data: dict, adapter: bool) -> str:
    """The card's line on the measured spectra the encoder, the calibration (and the adapter) were fitted on."""
    tr, va = enc_data.get("train", {}), enc_data.get("val", {})
    return (
        f"- **Spectrum encoder, calibration{', adapter' if adapter else ''}**: MassBank "
        f"(MassBank-data release 2025.05.1, via `massbank_dev.mgf.gz`) `FOLD=train`: {tr.get('spectra', 0):,} "
        f"{_modes_of(tr.get('adducts', {}))} spectra of {tr.get('structures', 0):,} structures ("
        + ", ".join(f"{n:,} {a}" for a, n in tr.get("adducts", {}).items()) + "); "
        "unit-resolution instruments excluded. Model selection and every number below: `FOLD=val` "
        f"({va.get('spectra', 0):,} spectra, {va.get('structures', 0):,} structures, disjoint by structure).")


def _card_training(info: dict) -> list[str]:
    """The card's section on how each part was trained: decoder stages, encoder, adapter."""
    dec, enc = info["decoder"], info["encoder"]
    lines = ["## Training", ""]
    if dec.get("origin"):
        lines.append(f"- Decoder weights: {dec['origin']}; its training stages:")
    lines += _earlier_stage_lines(dec.get("earlier_stages", []))
    if dec:
        lines.append(_decoder_stage_line(dec, _device_run(info)))
    if dec.get("interpolation"):
        lines.append(f"- Shipped decoder weights: {_interpolation_text(dec['interpolation'])}.")
    lines += _encoder_training_lines(enc)
    if info.get("adapter"):
        lines.append(f"- Adapter: {info['adapter'].get('summary', 'see adapter/')}")
    lines.append("")
    return lines


def _earlier_stage_lines(stages: list[dict]) -> list[str]:
    """One line per decoder stage before the last: steps, source and what the stage recorded."""
    lines = []
    for i, stage in enumerate(stages, 1):
        parts = []  # bundles written before decoder_stages existed give their name and step only
        if "batch_size" in stage:
            parts.append(f"{stage['batch_size']} records per step")
        if "lr" in stage:
            parts.append(f"lr {stage['lr']} to {stage.get('min_lr')}")
        if "tokens_seen" in stage:
            parts.append(f"{stage['tokens_seen'] / 1e6:.1f}M tokens = {stage.get('epochs', 0):.2f} epochs")
        if "train_hours" in stage:
            parts.append(f"{stage['train_hours']:.1f} h")
        if "interpolation" in stage:
            parts.append(_interpolation_text(stage["interpolation"]))
        detail = ", ".join(parts)
        lines.append(f"- Decoder stage {i}: {stage['step']:,} AdamW steps ({stage['source']})"
                     + (f": {detail}." if detail else "."))
    return lines


def _decoder_stage_line(dec: dict, device_run: dict) -> str:
    """The card's line on the decoder's last stage: steps, schedule, machine, tokens, time, noise and loss."""
    cfg = dec.get("config", {})
    label = "Decoder"
    if dec.get("earlier_stages"):
        label = (f"Decoder stage {len(dec['earlier_stages']) + 1} (from those weights, with a fresh optimizer, "
                 "warm-up and data order)")
    run_details = [f"lr {cfg.get('lr')} warm-up {cfg.get('warmup_steps')} then cosine to {cfg.get('min_lr')}"]
    if "threads" in cfg:  # a bundle's stage record (an older bundle's reused decoder) lacks these
        run_details += [f"{'fp32' if cfg.get('precision') == 'fp32' else 'bf16 autocast'}",
                        f"on {device_run['device']} (torch {device_run.get('torch')}, "
                        f"{device_run.get('records_per_s', 0):,.0f} records/s)" if device_run
                        else f"{cfg.get('threads')} CPU thread(s) at the end"]
    return (
        f"- {label}: {dec.get('step', 0):,} AdamW steps of {cfg.get('batch_size')} formula-grouped records "
        f"({', '.join(run_details)}), "
        f"{dec.get('tokens_seen', 0) / 1e6:.1f}M tokens = {dec.get('epochs', 0):.2f} epochs, "
        f"{dec.get('train_hours', 0):.1f} h"
        + (f" at ~{dec['tokens_per_s']:,.0f} tokens/s. " if dec.get("tokens_per_s") else ". ")
        + ("The details of this stage (its noise-aware mix, held-out loss) are in that bundle's model card. "
           if dec.get("origin") and "threads" not in cfg else "")
        + (f"Noise-aware: {cfg['noise_fraction']:.0%} of the records conditioned on a simulated band query "
           f"(noise model `{Path(cfg['noise_model']).name}`: per band threshold and bit, "
           f"{_noise_source(cfg['noise_model'])}) instead of the true fingerprint. "
           if cfg.get("noise_fraction") and cfg.get("noise_model") else "")
        + (f"Held-out teacher-forced loss {dec['val']['loss']:.3f}, token accuracy {dec['val']['accuracy']:.3f}"
           + (f"; {dec['val']['noisy_loss']:.3f} and {dec['val']['noisy_accuracy']:.3f} from simulated queries"
              if dec["val"].get("noisy_loss") is not None else "") + "."
           if dec.get("val") else "")
        + _curve_text(dec.get("val_curve") or []))


def _encoder_training_lines(enc: dict) -> list[str]:
    """The card's lines on the encoder's training and validation metrics (or the bundle it was taken from)."""
    if enc and not enc.get("metrics") and enc.get("note"):
        return [f"- Encoder and calibration: {enc['note']}, unchanged; its training is in that bundle's card."]
    if not enc:
        return []
    m = enc.get("metrics", {})
    lines = [
        f"- Encoder: {m.get('steps', '?')} steps, {m.get('train_minutes', 0):.0f} min, best step "
        f"{m.get('best_step')} selected by val {m.get('selected_by')}. Peaks annotated with subformulas of "
        f"the precursor formula within {m.get('annotation', {}).get('tol_ppm')} ppm "
        f"(at least {1000 * m.get('annotation', {}).get('tol_da', 0):.0f} mDa), at most "
        f"{m.get('annotation', {}).get('max_peaks')} peaks."]
    val = m.get("val", {})
    if val:
        lines.append(
            f"  Val: mean Tanimoto of the 0.5-thresholded posterior {val['tanimoto']:.3f}, "
            f"bit AUROC micro {val['auroc_micro']:.3f} / "
            f"macro {val.get('auroc_macro', float('nan')):.3f}, "
            f"AP micro {val['ap_micro']:.3f} / macro {val.get('ap_macro', float('nan')):.3f}.")
    return lines


def _card_calibration(cal: dict) -> list[str]:
    """The card's section on the calibration: D_enc and the thresholds of the default band, per polarity."""
    t = cal["thresholds"]
    lines = ["## Calibration", "",
             f"D_enc = {cal['d_enc']:.2f} mean active bits of the true fingerprints over the encoder's training "
             f"spectra. Thresholds t_κ = A⁻¹(κ·D_enc): κ=0.95 → {t['0.95']:.4f}, κ=1.00 → {t['1.0']:.4f}, "
             f"κ=1.50 → {t['1.5']:.4f} (the default band κ ∈ [0.95, 1.50] spans these)"
             + (" for positive-mode spectra." if cal.get("negative") else "."), ""]
    if cal.get("negative"):
        n, tn = cal["negative"], cal["negative"]["thresholds"]
        lines[-1:] = [f"Negative-mode spectra have their own curve: D_enc = {n['d_enc']:.2f}, κ=0.95 → "
                      f"{tn['0.95']:.4f}, κ=1.00 → {tn['1.0']:.4f}, κ=1.50 → {tn['1.5']:.4f}.", ""]
    return lines


def _card_files(bundle_dir: Path, known: KnownStructures | None) -> list[str]:
    """The card's section on the bit legend and known-structures files beside the weights (none: no section)."""
    extras = []
    if (bundle_dir / LEGEND_FILE).is_file():
        extras.append(f"- `{LEGEND_FILE}`: the atom environments behind each fingerprint bit "
                      f"({BitLegend.load(bundle_dir / LEGEND_FILE).source}; the app's Fingerprint bits tab).")
    if known is not None:
        extras.append(f"- `{KNOWN_FILE}`: {known.source}, hashed (the "
                      "novelty column: candidates the model was trained on are marked 'training corpus').")
    return ["## Files beside the weights", "", *extras, ""] if extras else []


def _card_evaluation(evaluation: str | None) -> list[str]:
    """The card's evaluation section: the given Markdown table, or a note that the model is not evaluated yet."""
    return ["## Evaluation", "",
            evaluation.strip() if evaluation else "Not evaluated yet: run `msgpt-eval` (see the README).", ""]


def _card_limits(info: dict, known: KnownStructures | None) -> list[str]:
    """The card's section on the input the model supports and what to expect of a model this small."""
    dec, pc = info["decoder"], info["decoder_parameters"]
    cfg = dec.get("config", {})
    return ["## Supported input and limits", "",
            f"- Singly charged {_adduct_words(info)} precursors; the molecular formula must be known (from the "
            "file, typed in, or one of the ranked formula candidates of a spectrum without one). Other ion types "
            "are reported as skipped.",
            "- Elements C H N O S P F Cl Br I B Si Se As; up to 256 active fingerprint bits read by the "
            "decoder; SAFE strings up to the decoder's block size.",
            f"- This is a small {'mostly ' if _device_run(info) else ''}CPU-trained model ({pc['total'] / 1e6:.0f}M decoder "
            "parameters, "
            f"{sum(st['step'] for st in dec.get('earlier_stages', [])) + dec.get('step', 0):,} pretraining steps"
            + (f" in {len(dec['earlier_stages']) + 1} stages" if dec.get("earlier_stages") else
               f" of {cfg.get('batch_size')}")
            + (f" on {(len(known) if known is not None else dec['corpus_records']) / 1e6:.2f}M molecules) "
               if dec.get("corpus_records") else ") ")
            + "standing in for the paper's 150M decoder trained on 100M molecules on GPUs: "
            "expect far lower accuracy than the paper reports; treat candidates as hypotheses to check "
            "against standards, and read the posterior similarity and (with a reference) fidelity scores.",
            "- Trained on MassBank reference spectra (mostly Orbitrap/Q-TOF, many collision energies); "
            "spectra from other instruments or of compound classes absent from MassBank are out of "
            "distribution.",
            ""]


def _interpolation_text(ip: dict) -> str:
    return (f"{ip['alpha']:g} × these weights + {1 - ip['alpha']:g} × {ip['with']} (weight-space interpolation, "
            "`build_bundle --interpolate`)")


def _curve_text(curve: list) -> str:
    """The stage's held-out loss at each validation, as one sentence (none for fewer than two points)."""
    if len(curve) < 2:
        return ""
    noisy = all(n is not None for _, _, n in curve)
    points = "; ".join(f"{step:,}: {loss:.3f}" + (f" / {n:.3f}" if noisy else "") for step, loss, n in curve)
    return (" Held-out loss by step (true fingerprint" + (" / simulated query" if noisy else "") + f"): {points}.")
