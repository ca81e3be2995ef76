### Tokenizer (runtime/tokenizer*): SentencePiece and byte-level BPE from GGUF metadata
