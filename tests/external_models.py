"""Small, randomly initialised ``transformers`` causal LMs saved to disk with their own tokenizers, for the tests
of scoring a model mixbench did not train (docs/huggingface.md): a LLaMA with a SentencePiece-style BPE (``▁``
spaces, byte fallback, ``<s>``/``</s>``) and a Mamba with a byte-level BPE (``<|endoftext|>``), so two
tokenizers unlike mixbench's meet on bits per byte. Nothing comes from the network."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def _sentencepiece_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="\u2581",
                                                                                 prepend_scheme="first")])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def _byte_level_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tiny_llama(folder: Path, texts: list[str], vocab_size: int = 640, seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = _sentencepiece_bpe(texts, vocab_size)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                     model_max_length=256)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    hf_tok.save_pretrained(folder)
    return folder


def save_tiny_mamba(folder: Path, texts: list[str], vocab_size: int = 512, seed: int = 0) -> Path:
    from transformers import MambaConfig, MambaForCausalLM, PreTrainedTokenizerFast

    tok = _byte_level_bpe(texts, vocab_size)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                     pad_token="<|padding|>", model_max_length=256)
    config = MambaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, state_size=8, num_hidden_layers=2,
                         expand=2, conv_kernel=4, bos_token_id=hf_tok.bos_token_id,
                         eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id)
    torch.manual_seed(seed)
    MambaForCausalLM(config).save_pretrained(folder)
    hf_tok.save_pretrained(folder)
    return folder
