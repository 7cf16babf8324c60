"""``mixbench export``: a checkpoint as a ``transformers`` model folder (docs/huggingface.md).

The folder holds ``config.json`` (a :class:`harness.hf.modeling_mixbench.MixbenchConfig` with ``auto_map``),
``modeling_mixbench.py`` (that module's source with a header), ``model.safetensors`` (the checkpoint's weights
under ``model.``), the tokenizer (``tokenizer.json``, ``tokenizer_config.json``), ``generation_config.json`` and
``README.md``, a model card carrying the model's board row from a results store. It is written into a hidden
sibling folder and renamed into place, so an interrupted export leaves no half folder behind (the next one removes
what it left), with a marker file (``.mixbench-export``) that lets a later ``--force`` replace it and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from harness.config import to_dict
from harness.errors import MixbenchError
from harness.hf import modeling_mixbench
from harness.hf.card import model_card
from harness.model.checkpoint import Checkpoint, load_model
from harness.store.output_folder import Keep, OutputKind, check_output_folder, replacing

MODELING_FILE = "modeling_mixbench.py"
AUTO_MAP = {
    "AutoConfig": "modeling_mixbench.MixbenchConfig",
    "AutoModelForCausalLM": "modeling_mixbench.MixbenchForCausalLM",
}
EXPORT_FORMAT = 1  # bump when the folder's layout or the config's mixbench fields change


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    files: tuple[str, ...]
    parameters: int
    runs_in_card: int


#: the marker file in every folder ``mixbench export`` writes: only such a folder is replaced, and only with --force
EXPORT_MARKER = ".mixbench-export"
MODEL_FOLDER = OutputKind("model folder", EXPORT_MARKER, own_needs_force=True)


def export_checkpoint(checkpoint: Path | str, out: Path | str, *, results: Any = None, force: bool = False,
                      keep: list[Keep] | None = None, progress: bool = False) -> ExportResult:
    """Write the ``transformers`` folder of ``checkpoint`` at ``out``; ``results`` (a ResultsStore or None) gives
    the model card its board row. ``out`` passes the shared guard (harness/store/output_folder.py): a folder an
    earlier export wrote is replaced with ``force``, nothing else ever is; ``keep`` adds what else it must not
    touch (the CLI's results store also when the card does not read it)."""
    out = Path(out).expanduser()
    keep = _kept(Path(checkpoint).expanduser(), results) + list(keep or [])
    check_output_folder(out, MODEL_FOLDER, keep, force)
    model, ckpt = load_model(checkpoint, "cpu")
    if not ckpt.tokenizer_path.is_file():
        raise MixbenchError(f"checkpoint {ckpt.path} has no tokenizer.json; it cannot be exported with its tokenizer.")
    with replacing(out, MODEL_FOLDER, recheck=lambda: check_output_folder(out, MODEL_FOLDER, keep, force)) as tmp:
        config = _config(ckpt, model)
        config.save_pretrained(tmp)
        weights = {f"{modeling_mixbench.MixbenchForCausalLM.base_model_prefix}.{k}": v.detach().contiguous().cpu()
                   for k, v in model.state_dict().items()}
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / MODELING_FILE).write_text(_modeling_source(ckpt), encoding="utf-8")
        _copy_plugin(config, tmp)
        _save_tokenizer(ckpt, tmp)
        _generation_config(config).save_pretrained(tmp)
        runs = _model_runs(results, ckpt) if results is not None else []
        card = model_card(ckpt, config.to_dict(), model.num_parameters(), runs, results=results)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    files = tuple(sorted(p.name for p in out.iterdir() if p.name != EXPORT_MARKER))
    return ExportResult(out, files, model.num_parameters(), len(runs))


def _kept(checkpoint: Path, results: Any) -> list[Keep]:
    """What an export must not delete: the checkpoint (and the training folder of a snapshot inside one) and the
    results store its card reads."""
    keep = [Keep(checkpoint, "the checkpoint being exported")]
    if (checkpoint.parent / "LATEST").is_file():
        keep.append(Keep(checkpoint.parent, "the checkpoint being exported"))
    local = getattr(results, "local_path", None)
    if local is not None:
        keep.append(Keep(Path(local), f"the results store {results.root}"))
    return keep


def _config(ckpt: Checkpoint, model) -> modeling_mixbench.MixbenchConfig:
    from harness.registry import MIXERS

    spec = ckpt.spec.model
    from harness import __version__
    from harness.store.provenance import code_location, git_revision

    identity = ckpt.meta.get("model_identity") or {}
    return modeling_mixbench.MixbenchConfig(
        mixer=spec.mixer,
        mixer_config=to_dict(model.mixer_config),
        mixer_source=MIXERS.get(spec.mixer).source,
        backbone=to_dict(spec.backbone),
        mixbench_code=modeling_mixbench.code_fingerprints(spec.mixer, to_dict(model.mixer_config)),
        auto_map=dict(AUTO_MAP),
        architectures=[modeling_mixbench.MixbenchForCausalLM.__name__],
        dtype="float32",
        eos_token_id=model_tokenizer(ckpt).eos_id,
        bos_token_id=model_tokenizer(ckpt).eos_id,  # a document starts after an end-of-text (docs/DESIGN.md §4)
        pad_token_id=model_tokenizer(ckpt).pad_id,
        mixbench_export={
            "format": EXPORT_FORMAT,
            "mixbench": __version__,
            "git": git_revision(code_location()),
            "model_identity": identity.get("id"),
            "weights_sha256": ckpt.meta.get("weights_sha256"),
            "checkpoint_step": ckpt.step,
            "preset": ckpt.spec.preset,
            "train": to_dict(ckpt.spec.train),
            "data": to_dict(ckpt.spec.data),
            "corpus_fingerprint": ckpt.meta.get("corpus_fingerprint"),
        },
    )


#: top-level packages of mixbench itself: a mixer from anywhere else is a plugin
_OWN_PACKAGES = ("harness", "mixers", "suites")


def _copy_plugin(config: modeling_mixbench.MixbenchConfig, folder: Path) -> None:
    """A plugin mixer defined in one top-level file is copied beside the modeling file, and ``config.json`` records
    its module, file name and sha256 (harness/hf/modeling_mixbench.py, ``import_mixer``), so the folder loads
    where the plugin is not installed. A plugin inside a package stays a requirement (named on load)."""
    from harness.registry import MIXERS

    entry = MIXERS.get(config.mixer)
    components = getattr(entry.cls, "components", None)  # a hybrid's parts (docs/hybrids.md)
    if components is not None:
        parts = [MIXERS.get(name).source.rsplit(".", 1)[0]
                 for name, _ in components(entry.make_config(config.mixer_config))]
        config.mixbench_part_plugins = [r for m in dict.fromkeys(parts) if (r := _plugin_record(m, folder))]
    record = _plugin_record(config.mixer_source.rsplit(".", 1)[0], folder)
    if record:
        config.mixbench_plugin = record
    config.save_pretrained(folder)


def _plugin_record(module: str, folder: Path) -> dict[str, str]:
    """What ``import_mixer`` needs to import a plugin module: its name, and for a single file the copy written into
    ``folder`` with its sha256; empty for mixbench's own modules."""
    import sys

    if not module or module.split(".")[0] in _OWN_PACKAGES:
        return {}
    file = getattr(sys.modules.get(module), "__file__", None)
    single = "." not in module and module != "__main__" and bool(file) and str(file).endswith(".py")
    if not single or Path(file).name == "__init__.py":
        return {"module": module}
    data = Path(file).read_bytes()
    (folder / f"{module}.py").write_bytes(data)
    return {"module": module, "file": f"{module}.py", "sha256": hashlib.sha256(data).hexdigest()}


def model_tokenizer(ckpt: Checkpoint):
    from harness.corpus.tokenizer import Tokenizer

    return Tokenizer.from_file(ckpt.tokenizer_path)


def _modeling_source(ckpt: Checkpoint) -> str:
    source = Path(modeling_mixbench.__file__).read_text(encoding="utf-8")
    header = (f"# Generated by `mixbench export` from harness/hf/modeling_mixbench.py for a '{ckpt.spec.model.mixer}' "
              "model; it imports mixbench\n# (pip install mixbench at the revision in config.json's mixbench_export). "
              "Do not edit: regenerate with mixbench export.\n")
    return header + source


def _save_tokenizer(ckpt: Checkpoint, folder: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    ours = model_tokenizer(ckpt)
    vocab = {i: t for t, i in json.loads(ours.to_str())["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in json.loads(ours.to_str()).get("added_tokens", [])}
    name = {**vocab, **added}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(ckpt.tokenizer_path),
        eos_token=name[ours.eos_id], bos_token=name[ours.eos_id], pad_token=name[ours.pad_id],
        model_max_length=ckpt.spec.model.backbone.context, clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(folder)


def _generation_config(config: modeling_mixbench.MixbenchConfig):
    from transformers import GenerationConfig

    return GenerationConfig(eos_token_id=config.eos_token_id, bos_token_id=config.bos_token_id,
                            pad_token_id=config.pad_token_id)


def _model_runs(results, ckpt: Checkpoint) -> list:
    """The newest run of each suite and config that scored exactly these weights (default and grid configs,
    as the board takes them)."""
    weights = ckpt.meta.get("weights_sha256")
    newest: dict[tuple[str, str], Any] = {}
    for run in results.iter_runs(samples=False):
        m = run.manifest
        if m.subject.weights_sha256 != weights or m.kind != "suite" or m.config_source == "override":
            continue
        key = (m.suite, json.dumps(m.suite_config, sort_keys=True))
        if key not in newest or m.written_at > newest[key].manifest.written_at:
            newest[key] = run
    return sorted(newest.values(), key=lambda r: r.manifest.suite)


def push_to_hub(folder: Path, repo: str, private: bool = False) -> str:
    """Upload an exported folder to a model repository (needs the network and a token in the environment)."""
    import os

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise MixbenchError("--push-to-hub needs the network, but HF_HUB_OFFLINE is set; unset it to upload.")
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message="mixbench export")
    except Exception as exc:  # network, authentication, permissions: one sentence, no traceback
        from harness.store.redaction import redact_text

        reason = f"{type(exc).__name__}: {exc}"
        raise MixbenchError(redact_text(f"could not upload {folder} to {repo} ({reason}).")) from None
    return str(getattr(info, "commit_url", repo))
