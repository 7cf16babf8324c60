"""What a published page says of where a run came from: the provenance summary of a run, the fields in which the
runs of one row differ, and the local paths taken out of everything a site shows (docs/site.md)."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from harness.store.results import ResultsStore, RunRecord

PROVENANCE_PACKAGES = ("torch", "mamba-ssm", "flash-linear-attention", "fla-core", "triton", "transformers")


def provenance_summary(run: RunRecord) -> dict[str, str]:
    """The fields of a run a reader compares across runs: code, packages, device, kernel, gate."""
    m = run.manifest
    prov = m.provenance or {}
    git = prov.get("git") or {}
    commit = git.get("commit")
    code = " ".join(
        p for p in (
            str(prov.get("mixbench") or ""),
            (str(commit)[:12] if commit else "no commit") if git else "no git",
            "+dirty" if git.get("dirty") else "",
        ) if p
    ) if prov else ""  # fmt: skip
    hw = prov.get("hardware") or {}
    cuda = hw.get("cuda") or {}
    packages = {**(prov.get("packages") or {}), **(m.subject.packages or {})}
    out = {
        "code": code,
        "gate": f"{m.gate.status} (v{m.gate.version})",
        "device": str(m.subject.device or ""),
        "gpu": ", ".join(map(str, cuda.get("devices") or [])) + (f" (CUDA {cuda.get('cuda_version')})" if cuda else ""),
        "cpu": str(hw.get("cpu") or ""),
        "kernel": str(m.subject.kernel or ""),
        "dtype": str(m.subject.dtype or ""),
        "python": str(prov.get("python") or ""),
        "platform": str(prov.get("platform") or ""),
    }
    for name in PROVENANCE_PACKAGES:
        out[name] = str(packages.get(name) or "")
    return out


def provenance_differences(summaries: list[dict[str, str]]) -> list[str]:
    """Fields with more than one recorded value among the runs (an unrecorded field is unknown, not different)."""
    fields = list(dict.fromkeys(f for s in summaries for f in s))
    return [f for f in fields if len({s.get(f) for s in summaries if s.get(f)}) > 1]


# ---------------------------------------------------------------------------------------------- the site



# ---------------------------------------------------------------------------------------------- local paths

#: an absolute POSIX or Windows path of two parts or more, not part of a URL or of a relative path
_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.:/~\\-])(?:file://)?(?:/|[A-Za-z]:\\)"  # a root not inside a word, a URL or a relative path
    r"(?:[^\s/\\\"'<>|]+[/\\])+"  # one or more folders
    r"[^\s/\\\"'<>|,;)\]]*"  # and the last part
)


class LocalPaths:
    """Takes the local paths out of what the site shows: a published site is read by others, and a path of the
    machine it was made on (the store's folder, a home directory, a checkout or a cache) tells them nothing they
    can use and something about that machine they need not know. The store's folder becomes its base name, the
    home directory ``~``, any other absolute path its last part after ``…/``."""

    def __init__(self, store: ResultsStore):
        local = store.local_path
        self.store_name = store_name_of(store)
        roots: list[tuple[str, str]] = []
        if local is not None:
            for path in {str(local), str(local.expanduser().absolute()), str(local.expanduser().resolve())}:
                if os.path.isabs(path) and path not in ("/", ""):
                    roots.append((path.rstrip("/"), self.store_name))
        with contextlib.suppress(RuntimeError, KeyError):
            home = str(Path.home())
            if os.path.isabs(home) and home.rstrip("/"):
                roots += [(home.rstrip("/"), "~"), (os.path.realpath(home).rstrip("/"), "~")]
        # longest first: the store under the home directory becomes the store's name, not ~/...
        self.roots = sorted(set(roots), key=lambda r: len(r[0]), reverse=True)

    def text(self, value: Any) -> str:
        text = str(value)
        for root, name in self.roots:
            text = re.sub(re.escape(root) + r"(?=$|[/\\\s\"',;)\]])", lambda _, name=name: name, text)
        return _ABSOLUTE_PATH.sub(lambda m: "…/" + re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)

    def json(self, obj: Any) -> Any:
        """``obj`` (JSON-ready) with every string, keys included, passed through :meth:`text`."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.json(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.json(v) for v in obj]
        return obj


def store_name_of(store: ResultsStore) -> str:
    """The store as the site names it: the last part of its folder or URL, never the full local path."""
    local = store.local_path
    if local is not None:
        return local.expanduser().resolve().name or "results"
    return str(store.root).rstrip("/").rsplit("/", 1)[-1] or "results"



