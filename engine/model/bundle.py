"""Model bundles: a directory that rebuilds the whole model from JSON + safetensors, never a pickle.

::

    my_model/
      config.json            format version, decoder + encoder configs, supported adducts,
                             sha256 of every weight/tokenizer/calibration file
      decoder.safetensors    conditional decoder weights
      encoder.safetensors    spectrum encoder weights
      tokenizer.json         SAFE vocabulary
      calibration.json       D_enc and the A(t) curve of the encoder
      adapter/               optional peft LoRA adapter (adapter_config.json + adapter_model.safetensors)
      bit_legend.json.gz     optional: atom environments behind each fingerprint bit (engine.model.bitlegend)
      known_structures.npz   optional: hashes of the training corpus's structures (engine.model.known)
      confidence.json        optional: P(rank 1 is right) per spectrum (engine.model.confidence)
      suspect_confidence.json  optional: P(rank 1 is right) when it comes from a suspect list
                             (engine.model.suspect_confidence)
      forward.json           optional, with forward.safetensors: the forward model (engine.model.forward), its
                             fragment score a second ranking term, with the weight its measurement chose
      MODEL_CARD.md          optional, shown to users

Optional files are checked against their checksum in config.json when it records one (bundles made
before they existed load as they are, without them).

Loading checks every file, its checksum, every tensor shape and the tokenizer/decoder match, and
says what to do when something is wrong.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.errors import BundleError, ConfigError
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from engine.model.encoder import EncoderConfig, SpectrumEncoder
from engine.model.querying import Calibration
from engine.model.tokenizer import SafeTokenizer

if TYPE_CHECKING:  # RDKit-backed modules, loaded only when a bundle ships the files: pretraining on a machine
    from engine.model.bitlegend import BitLegend  # without RDKit (an accelerator) imports this module too
    from engine.model.confidence import ConfidenceModel
    from engine.model.forward import ForwardEnsemble, ForwardModel
    from engine.model.known import KnownStructures

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "msgpt-bundle"
BUNDLE_FORMAT_VERSION = 1
REQUIRED_FILES = ("config.json", "decoder.safetensors", "encoder.safetensors", "tokenizer.json", "calibration.json")
CHECKSUMMED_FILES = REQUIRED_FILES[1:]
OPTIONAL_FILES = ("bit_legend.json.gz", "known_structures.npz", "confidence.json", "suspect_confidence.json",
                  "forward.json", "forward.safetensors")  # loaded when present
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")


def resolve_device(name: str = "auto") -> tuple[torch.device, str]:
    """``auto`` → cuda when present, else cpu. ``cuda`` without CUDA falls back to cpu with a message."""
    name = (name or "auto").lower()
    if name not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"Unknown device {name!r}; use 'auto', 'cpu' or 'cuda'.")
    has_cuda = torch.cuda.is_available()
    if name == "cuda" and not has_cuda:
        return torch.device("cpu"), "CUDA was requested but is not available here; running on CPU."
    if name == "cpu" or not has_cuda:
        return torch.device("cpu"), f"Running on CPU ({torch.get_num_threads()} threads)."
    return torch.device("cuda"), f"Running on CUDA ({torch.cuda.get_device_name(0)})."


def native_bf16(device: torch.device) -> bool:
    """True when ``device`` computes bfloat16 natively (CUDA bf16, or a CPU with AVX-512 BF16 / AMX).

    A CPU without them emulates bf16 slowly, so ``auto`` precision stays fp32 there.
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:  # oneDNN's check
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """``auto`` → bfloat16 where the device computes it natively, else float32; ``bf16``/``fp32`` as asked."""
    precision = (precision or "auto").lower()
    if precision not in ("auto", "bf16", "fp32"):
        raise ConfigError(f"Unknown precision {precision!r}; use 'auto', 'bf16' or 'fp32'.")
    if precision == "fp32":
        return torch.float32
    supported = native_bf16(device)
    if precision == "bf16" and not supported:
        raise ConfigError(f"bf16 was asked for, but this {device.type.upper()} lacks native bf16; use fp32 (or auto).")
    return torch.bfloat16 if supported else torch.float32


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class ModelBundle:
    """Everything inference needs, loaded and validated. Build with :func:`load_bundle`."""

    path: Path
    config: dict
    decoder: ConditionalDecoder  # the model used for sampling (adapter merged when active)
    encoder: SpectrumEncoder
    tokenizer: SafeTokenizer
    calibration: Calibration
    device: torch.device
    checksum: str
    dtype: torch.dtype = torch.float32  # of the decoder's weights (bf16 samples ~2x faster on CPUs that have it)
    has_adapter: bool = False
    adapter_active: bool = False
    bit_legend: BitLegend | None = None  # bit_legend.json.gz, when the bundle ships one
    known_structures: KnownStructures | None = None  # known_structures.npz: the training corpus's structures
    confidence: ConfidenceModel | None = None  # confidence.json: P(rank 1 is right) from a ranked pool
    suspect_confidence: ConfidenceModel | None = None  # suspect_confidence.json: for a rank 1 from a suspect list
    forward: ForwardModel | ForwardEnsemble | None = None  # forward.json + forward.safetensors: the fragment score
    _base_state: dict | None = field(default=None, repr=False)
    _merged_state: dict | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.config.get("name") or self.path.name

    @property
    def supported_adducts(self) -> tuple[str, ...]:
        """The ion types the model was trained on (it runs them natively)."""
        return tuple(self.config.get("supported_adducts", ("[M+H]+", "[M+Na]+")))

    @property
    def runnable_adducts(self) -> tuple[str, ...]:
        """The ion types the model runs: natively (:attr:`supported_adducts`), then by a chemical mapping onto one of
        them (:data:`engine.model.ion_mapping.MAPPINGS`: ``[M+NH4]+`` as ``[M+H]+`` after NH3 loss, ...)."""
        from engine.model.ion_mapping import runnable_ion_types  # engine.spectra: RDKit-free, but only when asked

        return runnable_ion_types(self.supported_adducts)

    def set_adapter(self, active: bool) -> None:
        """Switch the LoRA adapter on (merged weights) or off (the base weights, bit-identical).

        Only the tensors the adapter changes are kept twice (base and merged, float32 on the CPU) and
        copied into the decoder, cast to its dtype; everything else is shared.
        """
        if active and not self.has_adapter:
            raise ConfigError(f"The model bundle {self.path} has no adapter/ to switch on.")
        if active == self.adapter_active:
            return
        self.decoder.load_state_dict(self._merged_state if active else self._base_state, strict=False)
        self.adapter_active = active

    def describe(self) -> str:
        adapter = ("adapter on" if self.adapter_active else "adapter off") if self.has_adapter else "no adapter"
        precision = "bf16" if self.dtype == torch.bfloat16 else "fp32"
        return f"{self.name} [{self.checksum[:12]}] on {self.device.type} ({precision}), {adapter}"


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"Cannot read {what} {path}: {e}. The bundle is damaged; copy it again.") from e


def _looks_like_pickle(path: Path) -> bool:
    """A pickle (protocol 2+ starts with 0x80) or a torch.save zip archive, whatever its name."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5) or head == b"PK\x03\x04"


def _refuse_pickle(path: Path) -> None:
    """Refuse a pickle checkpoint offered as a bundle, by its name or its content; never open it further."""
    if path.is_file() and (path.suffix.lower() in PICKLE_SUFFIXES or _looks_like_pickle(path)):
        raise BundleError(
            f"{path} is a PyTorch pickle checkpoint. msgpt never loads pickles: unpickling can run "
            "arbitrary code hidden in the file. Give a model bundle directory (config.json + "
            "*.safetensors), e.g. one made by `msgpt-train bundle`."
        )


def _load_weights(module: torch.nn.Module, path: Path, what: str) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise BundleError(f"{path.name} is truncated or corrupt ({e}); copy the bundle again.") from e
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise BundleError(
            f"{path.name} does not match the {what} described in config.json: "
            f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}, "
            f"unexpected {unexpected[:3]}{'…' if len(unexpected) > 3 else ''}. "
            "The weights and config.json come from different models."
        )
    for k, v in expected.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise BundleError(
                f"{path.name}: tensor `{k}` has shape {tuple(state[k].shape)} but config.json's {what} "
                f"expects {tuple(v.shape)}. The weights and config.json come from different models."
            )
    module.load_state_dict({k: t.to(v.dtype) for k, t in state.items() for v in [expected[k]]})


def _load_part(load, path: Path):
    """``load(path)``, with malformed content (valid JSON, wrong structure) as a BundleError."""
    try:
        return load(path)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:  # BundleError passes through
        raise BundleError(f"{path} is malformed ({type(e).__name__}: {e}); copy the bundle again.") from e


def load_bundle(
    path: str | os.PathLike, device: str = "auto", use_adapter: bool = True, precision: str = "auto"
) -> ModelBundle:
    """Load and validate a model bundle directory.

    ``precision`` is the decoder's sampling precision: ``auto`` uses bfloat16 where the device computes
    it natively (about 2x faster sampling on CPUs with AVX-512 BF16), ``fp32`` keeps full precision.
    The encoder always runs in float32 (it is small, and the thresholds were calibrated on its output).
    """
    path = Path(path).expanduser()
    _check_folder(path)
    config = _read_config(path)
    recorded = _check_files(path, config)
    dec_cfg, enc_cfg = _model_configs(path, config)
    tokenizer = _load_tokenizer(path, config, dec_cfg)
    calibration = _load_part(Calibration.load, path / "calibration.json")
    bit_legend, known, confidence, suspect_confidence, forward = _load_optional(path, recorded, dec_cfg.fp_bits)

    dev, _ = resolve_device(device)
    dtype = resolve_precision(precision, dev)
    decoder = ConditionalDecoder(dec_cfg)
    _load_weights(decoder, path / "decoder.safetensors", "decoder")
    encoder = SpectrumEncoder(enc_cfg)
    _load_weights(encoder, path / "encoder.safetensors", "encoder")
    decoder.eval().to(dev)
    encoder.eval().to(dev)

    bundle = ModelBundle(
        path=path,
        config=config,
        decoder=decoder,
        encoder=encoder,
        tokenizer=tokenizer,
        calibration=calibration,
        device=dev,
        checksum=bundle_checksum(path),
        bit_legend=bit_legend,
        known_structures=known,
        confidence=confidence,
        suspect_confidence=suspect_confidence,
        forward=forward,
    )
    if (path / "adapter").is_dir():
        _attach_adapter(bundle, path / "adapter")  # merged in float32, then cast below
        bundle.set_adapter(use_adapter)
    decoder.to(dtype)
    bundle.dtype = dtype
    return bundle


def _check_folder(path: Path) -> None:
    """A bundle is a folder holding config.json; a pickle checkpoint offered instead is refused."""
    _refuse_pickle(path)
    if not path.exists():
        raise BundleError(f"Model bundle {path} does not exist; pick a bundle folder (it holds config.json).")
    if not path.is_dir():
        raise BundleError(f"Model bundle {path} is a file; pick the bundle folder that holds config.json.")
    if not (path / "config.json").is_file():
        pickles = sorted(p.name for p in path.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
        extra = f" It holds pickle checkpoints ({', '.join(pickles)}), which msgpt never loads." if pickles else ""
        raise BundleError(f"{path} is not a model bundle: config.json is missing.{extra}")


def _read_config(path: Path) -> dict:
    """The bundle's config.json, checked to be a bundle config of a format version this msgpt reads."""
    config = _read_json(path / "config.json", "bundle config")
    if not isinstance(config, dict) or config.get("format") != BUNDLE_FORMAT:
        found = config.get("format") if isinstance(config, dict) else f"a JSON {type(config).__name__}"
        raise BundleError(f"{path}/config.json is not an msgpt bundle config (format {found!r}).")
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BundleError(
            f"{path}/config.json: format_version {version!r} is not a whole number; copy the bundle again."
        )
    if version > BUNDLE_FORMAT_VERSION:
        raise BundleError(
            f"{path} was written in bundle format {version!r}, newer than this msgpt understands "
            f"({BUNDLE_FORMAT_VERSION}). Upgrade msgpt (pip install -U msgpt-desktop)."
        )
    return config


def _check_files(path: Path, config: dict) -> dict:
    """Check that every required file is there and matches its checksum in config.json; returns the recorded
    checksums by file name."""
    for name in REQUIRED_FILES:
        if not (path / name).is_file():
            raise BundleError(f"Model bundle {path} is incomplete: {name} is missing. Copy the whole folder.")
    recorded = config.get("files", {})
    if not isinstance(recorded, dict):
        raise BundleError(
            f"{path}/config.json: `files` must map file names to sha256 checksums; copy the bundle again."
        )
    for name in CHECKSUMMED_FILES:
        if name in recorded and sha256_file(path / name) != recorded[name]:
            raise BundleError(
                f"{name} in {path} does not match its checksum in config.json: the file is damaged "
                "or was replaced. Copy the bundle again."
            )
    return recorded


def _model_configs(path: Path, config: dict) -> tuple[DecoderConfig, EncoderConfig]:
    """The decoder's and the encoder's configurations from config.json, checked to fit each other."""
    try:
        dec_cfg = DecoderConfig.from_dict(config["decoder"])
        enc_cfg = EncoderConfig.from_dict(config["encoder"])
    except KeyError as e:
        raise BundleError(f"{path}/config.json lacks the {e.args[0]!r} section.") from e
    except ConfigError as e:
        raise BundleError(f"{path}/config.json: {e}") from e
    except (TypeError, ValueError, AttributeError) as e:  # a section that is not a mapping of known fields
        raise BundleError(f"{path}/config.json: the model sections are malformed ({e}); copy the bundle again.") from e
    if enc_cfg.fp_bits != dec_cfg.fp_bits:
        raise BundleError(
            f"{path}/config.json: the encoder predicts {enc_cfg.fp_bits} fingerprint bits but the decoder reads "
            f"{dec_cfg.fp_bits}; the two models were not trained for each other."
        )
    return dec_cfg, enc_cfg


def _load_tokenizer(path: Path, config: dict, dec_cfg: DecoderConfig) -> SafeTokenizer:
    """tokenizer.json, checked to be the tokenizer the decoder was trained with."""
    tokenizer = _load_part(SafeTokenizer.load, path / "tokenizer.json")
    if tokenizer.vocab_size != dec_cfg.vocab_size:
        raise BundleError(
            f"tokenizer.json has {tokenizer.vocab_size} tokens but the decoder expects "
            f"{dec_cfg.vocab_size}: the tokenizer belongs to another model."
        )
    want = config.get("tokenizer_checksum")
    if want and tokenizer.fingerprint() != want:
        raise BundleError("tokenizer.json does not match the tokenizer the decoder was trained with.")
    return tokenizer


def _load_optional(path: Path, recorded: dict, n_bits: int):
    """The optional files that are present (bit legend, known structures, confidence models, forward model),
    each checked against its recorded checksum."""
    for name in OPTIONAL_FILES:
        file = path / name
        if name in recorded and not file.is_file():
            log.warning("%s: config.json lists %s, which is missing; going on without it.", path, name)
        elif name in recorded and sha256_file(file) != recorded[name]:
            raise BundleError(
                f"{name} in {path} does not match its checksum in config.json: the file is damaged or was "
                "replaced. Copy the bundle again (or remove the file: it is optional)."
            )
    legend = known = confidence = suspect = None
    if (path / "bit_legend.json.gz").is_file():
        from engine.model.bitlegend import BitLegend

        legend = BitLegend.load(path / "bit_legend.json.gz")
        legend.check_fingerprint(n_bits)
    if (path / "known_structures.npz").is_file():
        from engine.model.known import KnownStructures

        known = KnownStructures.load(path / "known_structures.npz")
    if (path / "confidence.json").is_file():
        from engine.model.confidence import ConfidenceModel

        confidence = ConfidenceModel.load(path / "confidence.json")
    if (path / "suspect_confidence.json").is_file():
        from engine.model.confidence import ConfidenceModel

        suspect = ConfidenceModel.load(path / "suspect_confidence.json")
    forward = None
    if (path / "forward.json").is_file():
        from engine.model.forward import load_forward

        try:
            forward = load_forward(path, config_file="forward.json")
        except ConfigError as e:
            raise BundleError(f"{path}: {e} (or remove forward.json and forward.safetensors: they are optional)") from e
    return legend, known, confidence, suspect, forward


def add_bundle_file(bundle_dir: str | os.PathLike, file: str | os.PathLike) -> Path:
    """Put an optional file (:data:`OPTIONAL_FILES`) into a bundle and record its sha256 in ``config.json``.

    ``file`` is copied into the bundle unless it is there already; ``config.json`` is rewritten
    atomically (the bundle's checksum changes with it, as it identifies the exact model files).
    """
    import shutil

    bundle_dir, file = Path(bundle_dir), Path(file)
    if file.name not in OPTIONAL_FILES:
        raise ConfigError(f"{file.name!r} is not an optional bundle file; allowed are {', '.join(OPTIONAL_FILES)}.")
    config = _read_json(bundle_dir / "config.json", "config.json")
    target = bundle_dir / file.name
    if file.resolve() != target.resolve():
        tmp = bundle_dir / (file.name + ".tmp")
        shutil.copyfile(file, tmp)
        os.replace(tmp, target)
    config.setdefault("files", {})[file.name] = sha256_file(target)
    _rewrite_config(bundle_dir, config)
    return target


def _rewrite_config(bundle_dir: Path, config: dict) -> None:
    """Write ``config.json`` atomically; the model card, if it names the bundle's checksum, names the new one."""
    card = bundle_dir / "MODEL_CARD.md"
    old = bundle_checksum(bundle_dir)[:16] if card.is_file() else None
    tmp = bundle_dir / "config.json.tmp"
    tmp.write_text(json.dumps(config, indent=1) + "\n")
    os.replace(tmp, bundle_dir / "config.json")
    if old is not None:
        text = card.read_text()
        named = f"bundle checksum `{old}`"
        if named in text:
            tmp = bundle_dir / "MODEL_CARD.md.tmp"
            tmp.write_text(text.replace(named, f"bundle checksum `{bundle_checksum(bundle_dir)[:16]}`"))
            os.replace(tmp, card)


def _attach_adapter(bundle: ModelBundle, adapter_dir: Path) -> None:
    """Load the peft LoRA adapter (safetensors only) and merge it into a copy of the decoder.

    Merging (W + B A scaling, once) makes the adapted model exactly as fast as the base one. The
    decoder keeps its base weights; the tensors the merge changed are kept in both versions for
    :meth:`ModelBundle.set_adapter`.
    """
    from peft import PeftModel

    if not (adapter_dir / "adapter_model.safetensors").is_file():
        pickles = [p.name for p in adapter_dir.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
        why = f" ({', '.join(pickles)} are pickles, which msgpt never loads)" if pickles else ""
        raise BundleError(f"{adapter_dir} lacks adapter_model.safetensors{why}; remove adapter/ or re-save it.")
    if not (adapter_dir / "adapter_config.json").is_file():
        raise BundleError(f"{adapter_dir} lacks adapter_config.json; remove adapter/ or re-save it (training/decoder/adapt.py).")
    base_state = bundle.decoder.state_dict()
    try:
        peft_model = PeftModel.from_pretrained(copy.deepcopy(bundle.decoder), str(adapter_dir), is_trainable=False)
        merged_state = peft_model.merge_and_unload().state_dict()
    except (ValueError, RuntimeError, KeyError, OSError, TypeError) as e:
        raise BundleError(f"Cannot load the adapter in {adapter_dir}: {e}. Remove adapter/ or re-train it.") from e
    if merged_state.keys() != base_state.keys():
        raise BundleError(f"The adapter in {adapter_dir} changes the decoder's structure; it belongs to another model.")
    changed = [k for k, v in base_state.items() if not torch.equal(v, merged_state[k])]
    bundle._base_state = {k: base_state[k].detach().to("cpu", copy=True) for k in changed}
    bundle._merged_state = {k: merged_state[k].detach().to("cpu", copy=True) for k in changed}
    bundle.has_adapter = True


def save_adapter(peft_model, bundle_dir: str | os.PathLike) -> Path:
    """Write the LoRA adapter of a peft model into ``bundle_dir/adapter/``, replacing any adapter there.

    The folder holds what :func:`load_bundle` reads: ``adapter_config.json`` and
    ``adapter_model.safetensors`` (peft's ``save_pretrained`` with safe serialization; never a
    pickle). It is written next to the bundle and renamed into place, so a bundle never holds half an
    adapter. Returns the adapter folder.
    """
    import shutil

    from peft import PeftModel

    if not isinstance(peft_model, PeftModel):
        raise ConfigError(
            f"save_adapter needs a peft PeftModel (get_peft_model(decoder, LoraConfig(...))), got "
            f"{type(peft_model).__name__}."
        )
    bundle_dir = Path(bundle_dir)
    if not bundle_dir.is_dir():
        raise BundleError(f"{bundle_dir} is not a folder; give the bundle folder the adapter belongs to.")
    final, tmp = bundle_dir / "adapter", bundle_dir / ".adapter.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp), safe_serialization=True)
    for extra in tmp.iterdir():  # peft also writes a README model card; the bundle needs only the two files
        if extra.name not in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    if not (tmp / "adapter_model.safetensors").is_file():
        raise BundleError(f"peft wrote no adapter_model.safetensors into {tmp}; the adapter was not saved.")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def weights_checksum(bundle: ModelBundle) -> str:
    """sha256 over the recorded checksums of the files that make the base model (weights, tokenizer,
    calibration): unlike :func:`bundle_checksum` it stays the same when optional files (bit legend,
    known structures, confidence model) are added or an adapter is attached."""
    files = bundle.config.get("files", {})
    return hashlib.sha256(json.dumps({k: files.get(k) for k in CHECKSUMMED_FILES}, sort_keys=True).encode()).hexdigest()


def bundle_checksum(path: Path) -> str:
    """sha256 over config.json and the adapter files: identifies the exact model in exports."""
    h = hashlib.sha256((path / "config.json").read_bytes())
    adapter = path / "adapter"
    if adapter.is_dir():
        for p in sorted(adapter.iterdir()):
            if p.is_file():
                h.update(p.name.encode())
                h.update(sha256_file(p).encode())
    return h.hexdigest()


def save_calibration(path: str | os.PathLike, calibration: Calibration) -> Path:
    """Replace a bundle's ``calibration.json`` (e.g. to add the per-bit calibration of the fingerprint
    score) and its checksum in ``config.json``; both files are written atomically."""
    path = Path(path)
    config = _read_json(path / "config.json", "config.json")
    tmp = path / "calibration.json.tmp"
    calibration.save(tmp)
    os.replace(tmp, path / "calibration.json")
    config.setdefault("files", {})["calibration.json"] = sha256_file(path / "calibration.json")
    _rewrite_config(path, config)
    return path / "calibration.json"


def save_bundle(
    path: str | os.PathLike,
    *,
    decoder: ConditionalDecoder,
    encoder: SpectrumEncoder,
    tokenizer: SafeTokenizer,
    calibration: Calibration,
    name: str,
    supported_adducts=("[M+H]+", "[M+Na]+"),
    extra: dict | None = None,
    dtype: torch.dtype = torch.float32,
    encoder_dtype: torch.dtype = torch.float32,
) -> Path:
    """Write a bundle directory: decoder weights in ``dtype`` (e.g. bfloat16 to halve the size), encoder
    weights in ``encoder_dtype`` (float32 by default: the calibration thresholds were computed on its
    float32 posteriors)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    def weights(module, dtype):  # tied / shared tensors are saved once per name, contiguous
        return {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous().clone()
                for k, v in module.state_dict().items()}

    save_file(weights(decoder, dtype), str(path / "decoder.safetensors"))
    save_file(weights(encoder, encoder_dtype), str(path / "encoder.safetensors"))
    umask = os.umask(0)
    os.umask(umask)
    for weights_file in ("decoder.safetensors", "encoder.safetensors"):  # safetensors writes them 0600:
        os.chmod(path / weights_file, 0o666 & ~umask)  # others sharing the machine could not load the model
    tokenizer.save(path / "tokenizer.json")
    calibration.save(path / "calibration.json")
    config = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "name": name,
        "decoder": decoder.config.to_dict(),
        "encoder": encoder.config.to_dict(),
        "supported_adducts": list(supported_adducts),
        "tokenizer_checksum": tokenizer.fingerprint(),
        "files": {f: sha256_file(path / f) for f in CHECKSUMMED_FILES},
        **(extra or {}),
    }
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return path
