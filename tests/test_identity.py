"""Source fingerprints (harness.store.identity): what they cover, and that computing one imports nothing foreign."""

import sys
import textwrap

from harness.store.identity import source_fingerprint


def test_fingerprint_follows_own_package_and_never_imports_outside_ones(tmp_path, monkeypatch):
    """``from pkg import helper`` in the package is followed (editing the helper changes the fingerprint); an
    outside package is neither hashed nor imported (telling its submodules from its names would import it, and
    importing flash-linear-attention alone took 5-10 s of every training process)."""
    own, foreign = tmp_path / "fp_own", tmp_path / "fp_foreign"
    (foreign / "ops").mkdir(parents=True)
    (foreign / "__init__.py").write_text("raise RuntimeError('imported fp_foreign')\n")
    (foreign / "ops" / "__init__.py").write_text("")
    (foreign / "ops" / "kernel.py").write_text("def fast(): ...\n")
    own.mkdir()
    (own / "__init__.py").write_text("")
    (own / "helper.py").write_text("SCALE = 2\n")
    (own / "mixer.py").write_text(textwrap.dedent("""\
        from . import helper
        from fp_own.helper import SCALE


        def route():
            from fp_foreign.ops import kernel
            from fp_foreign.ops.kernel import fast
            return kernel, fast
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        first = source_fingerprint("fp_own.mixer")
        assert "fp_foreign" not in sys.modules
        source_fingerprint.cache_clear()
        assert source_fingerprint("fp_own.mixer") == first  # deterministic
        (own / "helper.py").write_text("SCALE = 3\n")
        source_fingerprint.cache_clear()
        assert source_fingerprint("fp_own.mixer") != first  # the helper's source is covered
        source_fingerprint.cache_clear()
        (foreign / "ops" / "kernel.py").write_text("def fast(): return 1\n")
        (own / "helper.py").write_text("SCALE = 2\n")
        assert source_fingerprint("fp_own.mixer") == first  # an outside package's source is not
    finally:
        source_fingerprint.cache_clear()
        for name in [n for n in sys.modules if n.startswith(("fp_own", "fp_foreign"))]:
            sys.modules.pop(name)
