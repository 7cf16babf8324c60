"""Text corpora and tokenizers: the embedded defaults, local files and hub datasets, cached on disk."""
