"""An lm-eval model backed by any mixbench checkpoint, registered as ``mixbench`` when this module is imported:
``lm_eval.simple_evaluate(model="mixbench", model_args="pretrained=DIR")``; the ``lm-eval`` suite wraps a
loaded model with :meth:`MixbenchLM.wrap`.

Scoring conventions follow lm-eval's own HF model so numbers are comparable:

* ``loglikelihood``: the context is left-truncated so context + continuation fit the model's context; the
  continuation must fit on its own.
* ``loglikelihood_rolling``: lm-eval's disjoint rolling windows (``get_rolling_token_windows`` with one token of
  context): the first window starts at the end-of-text prefix, each later full window with the token before its
  first target, and a last, partial window gets the full context; every token is predicted exactly once.
  Returns plain floats (lm-eval sums them).
* ``generate_until``: greedy unless ``do_sample``; through ``MixerLM.generate`` (prefill, then each mixer's
  ``step()``), cut at the first stop string; at most ``max_gen_toks`` tokens, the prompt left-truncated to make
  room for them.

Requests are batched longest first and right-padded, which is exact for every mixer because all are causal.
``generate`` needs equal prompt lengths, so generation batches group prompts of one length.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from tqdm.auto import tqdm

from harness.kit import Tokenizer, load_model
from harness.errors import MixbenchError

log = logging.getLogger(__name__)

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default


def _int_or_default(value, default: int) -> int:
    """lm-eval passes ``batch_size`` as an int, a string, or ``"auto"`` (taken as the default here)."""
    if value is None or value == "auto" or (isinstance(value, str) and value.startswith("auto")):
        return default
    return int(value)


@register_model("mixbench")
class MixbenchLM(TemplateLM):
    def __init__(
        self,
        pretrained: str,
        device: str | None = None,
        batch_size: int | str | None = 16,
        max_length: int | str | None = None,
        max_gen_toks: int | str = DEFAULT_MAX_GEN_TOKS,
        seed: int | str = 1234,
        **kwargs,
    ) -> None:
        kwargs.pop("max_batch_size", None)  # simple_evaluate passes it to every model; batching here is fixed-size
        if kwargs:
            raise MixbenchError(f"mixbench lm-eval model: unknown model argument(s) {', '.join(sorted(kwargs))}.")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, checkpoint = load_model(pretrained, device)
        self._setup(model, Tokenizer.from_file(checkpoint.tokenizer_path), device, batch_size, max_length,
                    max_gen_toks, seed)

    @classmethod
    def wrap(cls, model, tokenizer: Tokenizer, device: str, batch_size: int = 16, seed: int = 1234,
             progress: bool = True) -> "MixbenchLM":
        """An lm-eval model around an already loaded model and its tokenizer (the lm-eval suite's way in)."""
        lm = cls.__new__(cls)
        lm._setup(model, tokenizer, device, batch_size, None, DEFAULT_MAX_GEN_TOKS, seed)
        lm.progress = progress
        return lm

    def _setup(self, model, tokenizer: Tokenizer, device: str, batch_size, max_length, max_gen_toks, seed) -> None:
        TemplateLM.__init__(self)
        self.model = model
        self.tok = tokenizer
        self._device = torch.device(device)
        self.batch_size = _int_or_default(batch_size, 16)
        self.max_length = _int_or_default(max_length, self.model.config.context)
        self.model.check_context(self.max_length)
        self.max_gen_toks = int(max_gen_toks)
        self.seed = int(seed)
        self.progress = True

    # ------------------------------------------------------------------ tokenizer
    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tok.encode(string)

    def tok_decode(self, tokens: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tok.decode(tokens, skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def _loglikelihood_tokens(
        self, requests: list[tuple[tuple[str, str] | None, list[int], list[int]]], disable_tqdm: bool = False, **kwargs
    ) -> list[tuple[float, bool]]:
        """Sum of log-probabilities of each continuation and whether greedy decoding would produce it."""
        inputs = []
        for _, context, continuation in requests:
            if not continuation:
                raise MixbenchError("lm-eval asked to score an empty continuation; check the task's doc_to_target.")
            if len(continuation) > self.max_length:
                raise MixbenchError(
                    f"a continuation of {len(continuation)} tokens does not fit the model's context "
                    f"({self.max_length}); use a model with a longer context or a task with shorter targets."
                )
            whole = (context + continuation)[-(self.max_length + 1) :]  # left-truncate the context
            inputs.append((whole[:-1], continuation))
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i][0]))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(inputs)
        self.model.eval()
        bar = tqdm(total=len(order), desc="loglikelihood", disable=disable_tqdm or not self.progress, leave=False)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            ids = torch.full((len(batch), len(inputs[batch[0]][0])), self.tok.pad_id, dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : len(inputs[i][0])] = torch.tensor(inputs[i][0])
            logprobs = F.log_softmax(self.model(ids.to(self._device))[0].float(), dim=-1).cpu()
            for row, i in enumerate(batch):
                n_in, cont = len(inputs[i][0]), torch.tensor(inputs[i][1])
                lp = logprobs[row, n_in - len(cont) : n_in]  # positions that predict the continuation
                results[i] = (float(lp.gather(1, cont[:, None]).sum()), bool((lp.argmax(-1) == cont).all()))
            bar.update(len(batch))
        bar.close()
        for (key, _, _), answer in zip(requests, results, strict=True):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for index, req in enumerate(requests):
            (text,) = req.args
            for context, targets in map(
                lm_utils.make_disjoint_window,
                lm_utils.get_rolling_token_windows(self.tok_encode(text), self.prefix_token_id, self.max_length, 1),
            ):
                windows.append((None, context, targets))
                owner.append(index)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for index, (logprob, _) in zip(owner, scores, strict=True):
            totals[index] += logprob
        for req, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        eos_text = self.tok_decode([self.eot_token_id])
        groups: dict[tuple, list[tuple[int, list[int]]]] = defaultdict(list)
        stops: dict[int, list[str]] = {}
        for index, req in enumerate(requests):
            context, gen_kwargs = req.args
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            until = [s for s in handle_stop_sequences(kwargs.pop("until", None), eos=eos_text) if s]
            max_new = int(kwargs.pop("max_gen_toks"))
            if max_new >= self.max_length:  # keep at least one prompt token
                log.warning("max_gen_toks %d does not fit the context %d; generating %d.", max_new, self.max_length,
                            self.max_length - 1)  # fmt: skip
                max_new = self.max_length - 1
            sampling = (  # temperature 0 is greedy
                float(kwargs.get("temperature") or 0.0) if kwargs.get("do_sample") else 0.0,
                int(kwargs.get("top_k") or 0),
                float(kwargs.get("top_p") or 1.0),
            )
            prompt = (self.tok_encode(context) or [self.prefix_token_id])[-(self.max_length - max_new) :]
            key = (len(prompt), max_new, sampling)
            groups[key].append((index, prompt))
            stops[index] = until
        outputs = [""] * len(requests)
        generator = torch.Generator(device=self._device).manual_seed(self.seed)
        bar = tqdm(total=len(requests), desc="generate_until", disable=disable_tqdm or not self.progress, leave=False)
        for key, items in sorted(groups.items(), key=lambda g: -g[0][0]):  # longest prompts first
            length, max_new, (temperature, top_k, top_p) = key
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                prompt = torch.tensor([p for _, p in chunk], device=self._device)
                out = self.model.generate(
                    prompt, max_new, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
                )
                for (index, _), row in zip(chunk, out[:, length:].tolist(), strict=True):
                    outputs[index] = _cut(self.tok_decode(row), stops[index])
                    self.cache_hook.add_partial("generate_until", requests[index].args, outputs[index])
                bar.update(len(chunk))
        bar.close()
        return outputs


def _cut(text: str, until: list[str]) -> str:
    """``text`` up to the first occurrence of any stop string."""
    end = min((i for i in (text.find(s) for s in until) if i >= 0), default=len(text))
    return text[:end]
