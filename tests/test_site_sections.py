"""Real tiny runs of every suite, through one plan, into `mixbench publish`: each suite's page carries the section
its own hook renders (the core renders none by name), every page passes the escaping and CSP checks, and the board
of real runs parses under the board schema."""

from __future__ import annotations

import html
import json
import re

import pytest

from fake_judge import FakeJudge
from harness.cli import main
from harness.reporting.site_html import CSP
from harness.reporting.board_document import validate_board_document

PLAN = """\
name: sections
presets: [tiny]
mixers: [protot, attention]
controls: []
suites:
  perplexity: {max_windows: 8, bootstrap: 50}
  robustness: {pairs_per_slice: 6, samples_per_slice: 2, bootstrap: 50}
  glue: {tasks: [standin-sentiment], max_train_examples: 64, max_eval_examples: 48, epochs: 1, lrs: [0.003], seeds: [0]}
  interpretability: {parts: "units,null,interventions", profile_tokens: 2048, intervene_tokens: 2048, max_units_per_layer: 4}
  judge: {n_prompts: 2, max_new_tokens: 8}
  lm-eval: {limit: 24}
  long-context: {factor: 2, max_windows: 4, bootstrap: 50, tasks: [passkey], lengths: [1.0, 2.0], depths: [0.5],
                 examples: 2, finetune_steps: 2, finetune_batch: 2}
  synthetic: {tasks: [mqar], settings: "mqar:seq_len=32,num_kv_pairs=2,num_train_examples=64,vocab_size=64", d_model: 16, max_steps: 4, eval_every: 2, lrs: [0.003], valid_examples: 8, test_examples: 16, extrapolation: []}
train: {token_budget: 8192}
data: {max_train_docs: 30}
"""

#: what each suite's own section writes on its page (from its site_section hook)
SECTIONS = {
    "robustness": "Example pairs",
    "interpretability": "Units and interventions",
    "judge": "LLM-judge ratings",
    "synthetic": "Synthetic tasks: accuracy against decode state",
    "long-context": "Loss by position",
}


@pytest.mark.slow
def test_real_runs_of_every_suite_publish_their_own_sections(tmp_path, monkeypatch, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    results, site = tmp_path / "results", tmp_path / "site"
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    with FakeJudge(lambda p, a, b: "A" if len(a) >= len(b) else "B") as judge:
        monkeypatch.setenv("MIXBENCH_JUDGE_URL", judge.url)
        monkeypatch.setenv("MIXBENCH_JUDGE_MODEL", "fake-judge")
        assert main(["run", str(plan), "--results", str(results), "--no-progress"]) == 0
    assert main(["publish", "--results", str(results), "--out", str(site)]) == 0
    pages = {p.name.rsplit("-", 1)[0]: p.read_text() for p in (site / "suites").glob("*.html")}
    assert set(pages) == {"perplexity", "robustness", "glue", "interpretability", "judge", "lm-eval", "synthetic",
                          "long-context"}
    for suite, heading in SECTIONS.items():
        assert heading in pages[suite], suite
    for page in site.rglob("*.html"):
        if "plots" in page.parts:
            continue
        text = page.read_text()
        assert f'content="{html.escape(CSP)}"' in text and not re.search(r"<[^>]*\son\w+\s*=", text), page
    doc = json.loads((site / "board.json").read_text())
    validate_board_document(doc)
    assert {r["mixer"] for r in doc["rows"]} == {"protot", "attention"}
    assert all(r["gate"] == "passed" for r in doc["rows"])
