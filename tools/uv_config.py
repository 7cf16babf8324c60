"""Writes a uv.toml that makes ``uv pip install`` look where this machine's pip looks (the Makefile's setup).

uv installs the pinned set (constraints.txt) in about a quarter of pip's time, but it does not read pip's
configuration files or ``PIP_*`` variables. Where pip is told to take packages from a local wheel folder or an
extra index (a machine whose CPU build of torch lies on disk, say), uv must be told the same, or it would resolve
``torch==2.13.0`` on the public index alone. So this reads pip's effective settings (``pip config list``: the files
and the environment, environment last, ``install.`` over ``global.``) and prints them as uv settings. pip's own
rule for several indexes, the best version among all of them, is kept (``unsafe-best-match``). Standard library
only: it runs before anything is installed. Usage: ``python tools/uv_config.py > .venv/uv.toml``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

#: pip setting -> how it reads (one value or a list of them)
LISTS = ("extra-index-url", "find-links", "trusted-host")
SINGLE = ("index-url", "no-index", "cert")
#: lower to higher precedence, as pip applies them
SECTIONS = ("global", "install", ":env:")


def pip_settings(listing: str) -> dict[str, str]:
    """The values of ``pip config list`` output by setting, the highest-precedence section winning."""
    found: dict[tuple[str, str], str] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot or section not in SECTIONS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        found[(section, name)] = str(value)
    out: dict[str, str] = {}
    for section in SECTIONS:
        out.update({name: value for (sec, name), value in found.items() if sec == section})
    return out


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def uv_toml(settings: dict[str, str]) -> str:
    """uv.toml text for pip ``settings``."""
    lines = ["# written by tools/uv_config.py from this machine's pip configuration", "[pip]",
             'index-strategy = "unsafe-best-match"']
    if settings.get("index-url"):
        lines.append(f"index-url = {json.dumps(settings['index-url'].split()[0])}")
    for name, uv_name in (("extra-index-url", "extra-index-url"), ("find-links", "find-links"),
                          ("trusted-host", "allow-insecure-host")):
        values = settings.get(name, "").split()
        if values:
            lines.append(f"{uv_name} = {json.dumps(values)}")
    if _truthy(settings.get("no-index", "")):
        lines.append("no-index = true")
    if settings.get("cert"):  # a machine-wide CA bundle: use the system's certificates, as pip is told to
        lines.insert(1, "native-tls = true")
    return "\n".join(lines) + "\n"


def main() -> int:
    try:
        listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        listing = ""  # no pip here: uv's defaults, as pip's would be
    sys.stdout.write(uv_toml(pip_settings(listing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
