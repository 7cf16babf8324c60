"""Start-up: ``--help``, argument errors and the listings answer without importing torch (docs/cli.md), and
the listing cache follows the code it describes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import sys
    from harness.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    print("TORCH", "torch" in sys.modules, "CODE", code, file=sys.stderr)
""")


def _run(args: list[str], cache: Path, cwd: Path = ROOT) -> tuple[str, str]:
    env = {**os.environ, "MIXBENCH_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)
    return done.stdout, done.stderr


def test_help_errors_and_listings_do_not_import_torch(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _run(["mixers"], cache)  # fills the cache (imports everything once)
    _run(["judge", "--help"], cache)
    _run(["suites"], cache)
    for args in (["--help"], ["train", "--help"], ["run", "--bogus"], ["mixers"], ["suites"], ["judge", "--help"],
                 ["nosuchcommand"]):
        out, err = _run(args, cache)
        assert "TORCH False" in err, (args, err[-2000:])
    again, _ = _run(["mixers"], cache)
    assert again == first and "attention" in first and "controls" in first
    help_text, _ = _run(["judge", "--help"], cache)
    assert "--judge-url" in help_text
    _, err = _run(["rnu"], cache)  # a typo: the closest command, one line, from the cached index
    assert err.startswith("mixbench: error: unknown command 'rnu'; did you mean 'run'?") and "CODE 2" in err
    assert err.count("\n") == 2 and "TORCH False" in err  # the error line and the probe's own


def test_listing_follows_a_plugin_edit(tmp_path):
    cache = tmp_path / "cache"
    plugin = tmp_path / "myplug.py"
    body = textwrap.dedent('''
        import torch
        from harness.mixer import Mixer
        from harness.registry import register_mixer

        @register_mixer("{name}")
        class Passthrough(Mixer):
            """{name}: a test plugin."""
            control = False
            def forward(self, x, **_):
                return x
    ''')
    plugin.write_text(body.format(name="first-name"))
    env_args = ["mixers", "--plugin", "myplug"]
    out, err = _run(env_args, cache, cwd=tmp_path)
    assert "first-name" in out, err[-2000:]
    plugin.write_text(body.format(name="second-name-longer"))  # size changes, so the stat does even within one tick
    out, err = _run(env_args, cache, cwd=tmp_path)
    assert "second-name-longer" in out and "first-name" not in out, err[-2000:]
