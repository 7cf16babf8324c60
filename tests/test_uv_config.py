"""tools/uv_config.py: uv is told where pip looks (the Makefile's setup installs with uv, which reads no pip
configuration); a wheel folder or extra index lost in translation would resolve torch on the public index."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("uv_config", Path(__file__).resolve().parents[1] / "tools" / "uv_config.py")
uv_config = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(uv_config)

LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
global.index-url='https://mirror.example/simple'
install.index-url='https://install.example/simple'
:env:.find-links='/env/wheels /env/more'
:env:.default-timeout='180'
"""


def test_precedence_is_pips_environment_then_install_then_global():
    settings = uv_config.pip_settings(LISTING)
    assert settings["find-links"] == "/env/wheels /env/more"  # PIP_FIND_LINKS beats the file
    assert settings["index-url"] == "https://install.example/simple"  # [install] beats [global]
    assert settings["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"


def test_uv_toml_carries_every_source_and_pips_rule_for_several_indexes():
    doc = tomllib.loads(uv_config.uv_toml(uv_config.pip_settings(LISTING)))
    assert doc["native-tls"] is True
    assert doc["pip"] == {
        "index-strategy": "unsafe-best-match",
        "index-url": "https://install.example/simple",
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
        "find-links": ["/env/wheels", "/env/more"],
    }


def test_no_configuration_gives_uvs_defaults_and_no_index_is_kept():
    assert tomllib.loads(uv_config.uv_toml({})) == {"pip": {"index-strategy": "unsafe-best-match"}}
    doc = tomllib.loads(uv_config.uv_toml(uv_config.pip_settings(":env:.no-index='true'\nnot a setting\n")))
    assert doc["pip"]["no-index"] is True


def test_hostile_values_stay_strings_in_the_toml():
    """A path with quotes, a backslash or a TOML line break cannot end its string and add settings of its own."""
    evil = 'C:\\wheels\\" \nno-index = true\n# '
    doc = tomllib.loads(uv_config.uv_toml({"find-links": evil, "index-url": 'https://a.example/"x'}))
    assert "no-index" not in doc["pip"] and doc["pip"]["index-url"] == 'https://a.example/"x'
    assert doc["pip"]["find-links"] == evil.split()
