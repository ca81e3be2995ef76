#!/usr/bin/env python3
"""hf_mkdir.py: writes a Hugging Face llama model directory for mfc convert's
tests and benchmark, with the Python standard library only (no torch, no
numpy): config.json, model.safetensors (or shards + index), tokenizer.json,
tokenizer_config.json. Weights are seeded random numbers.

usage: hf_mkdir.py OUT_DIR [--layers N] [--embd N] [--ff N] [--heads N]
         [--kv-heads N] [--vocab bytes|llama3|spm] [--pre gpt2|llama3]
         [--spm-gguf ggml-vocab-llama-spm.gguf]
         [--dtype F32|F16|BF16] [--tied] [--shards N] [--rope-llama3]
         [--arch NAME] [--seed N] [--llama3-json PATH] [--big] [--vocab-size N]
         [--break truncate|offset|dtype|shape|no-tokenizer|layer|extra]
         [--family qwen2|qwen3|qwen3moe|mixtral|gemma2|gemma3|gemma3mm|phi3]
         [--stacked-experts] [--head-dim N] [--experts N] [--window N]
         [--forward PROMPT_IDS N]   print the greedy continuation (ids) that
                                    transformers' LlamaForCausalLM computes
                                    for these weights, in pure Python
--family writes that model class's config.json keys and tensors (Qwen2 with
q/k/v biases, Qwen3 q/k norms, Mixtral and Qwen3-MoE per-expert weights or,
with --stacked-experts, transformers 5's stacked gate_up_proj/down_proj,
Gemma 2/3 sandwich norms and soft-caps, Gemma 3 with three layers of pattern
sliding, sliding, full (gemma3mm: inside Gemma3ForConditionalGeneration with
a vision tensor the converter skips), Phi-3 fused qkv_proj and gate_up_proj
with LongRoPE factors) and a tokenizer of its kind (Qwen: byte-level BPE
with the qwen2 split; Gemma, Phi-3: SentencePiece-style BPE with byte
fallback). With --family, --llama3-json (Llama 3's 128k vocabulary; Qwen
families get Qwen2's split) or --spm-gguf (Llama 2's vocabulary; Gemma
families drop the dummy prefix, as Gemma's tokenizer.json has none) give a
real-size vocabulary instead. --forward is the llama forward only.
--big: weights are one random block repeated (fast to write; for the bench).
--vocab-size N pads the vocabulary (config.json's vocab_size) to N.
"""
import argparse
import json
import math
import os
import random
import struct
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


QWEN2_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
            "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
             "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def pre_tokenizer(kind):
    if kind == "gpt2":
        return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": True}
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_RE if kind == "qwen2" else LLAMA3_RE},
         "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}


def tokenizer_bytes(pre):
    """256 byte symbols, merges for common English pieces, 3 special tokens."""
    b2u = bytes_to_unicode()
    vocab = {}
    for b in range(256):
        vocab[b2u[b]] = len(vocab)
    merges = []
    words = ["the", "and", "ing", "Hello", "world", "ion", "er", "in", "on", "at", "is"]
    sp = b2u[ord(" ")]
    for w in words + [sp + w for w in words]:
        cur = w[0]
        for ch in w[1:]:
            if cur + ch not in vocab:
                merges.append([cur, ch])
                vocab[cur + ch] = len(vocab)
            cur = cur + ch
    n = len(vocab)
    added = [{"id": n, "content": "<|begin_of_text|>", "special": True},
             {"id": n + 1, "content": "<|end_of_text|>", "special": True},
             {"id": n + 2, "content": "<|eot_id|>", "special": True}]
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": pre_tokenizer(pre),
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": pre == "llama3",
                     "vocab": vocab, "merges": merges}}
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
           "chat_template": "{% for m in messages %}<|begin_of_text|>{{ m['content'] }}<|eot_id|>"
                            "{% endfor %}"}
    return tok, cfg, n + 3


def tokenizer_llama3(path, pre="llama3"):
    """The Llama 3 vocabulary from the GGUF-form dump in shared/data/vocab
    (pre "qwen2": with Qwen2's split instead, a real-size vocabulary for the
    qwen2 pre-tokenizer)."""
    d = json.load(open(path, encoding="utf-8"))
    toks, types, merges = (d["tokenizer.ggml.tokens"], d["tokenizer.ggml.token_type"],
                           d["tokenizer.ggml.merges"])
    vocab = {t: i for i, t in enumerate(toks) if types[i] == 1}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(toks) if types[i] == 3]
    tok = {"version": "1.0", "added_tokens": added, "normalizer": None,
           "pre_tokenizer": pre_tokenizer(pre), "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "byte_fallback": False, "ignore_merges": True,
                     "vocab": vocab, "merges": [m.split(" ") for m in merges]}}
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return tok, cfg, len(toks)


def tokenizer_spm(path):
    """A Llama 2 style tokenizer.json (BPE with byte_fallback, merges made from
    the piece scores as transformers' SentencePieceExtractor makes them) from a
    SentencePiece vocabulary GGUF such as ggml-vocab-llama-spm.gguf."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hf_gguf
    kvs, _, _ = hf_gguf.parse(open(path, "rb").read())
    kv = {k: v for k, t, v in kvs}
    toks, scores, types = (kv["tokenizer.ggml.tokens"][1], kv["tokenizer.ggml.scores"][1],
                           kv["tokenizer.ggml.token_type"][1])
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for i, piece in enumerate(toks):
        if types[i] != 1:
            continue
        local = [(piece[:k], piece[k:], scores[i]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(toks)
             if types[i] in (2, 3)]
    tok = {"version": "1.0", "added_tokens": added,
           "normalizer": {"type": "Sequence", "normalizers": [
               {"type": "Prepend", "prepend": "\u2581"},
               {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
           "pre_tokenizer": None,
           "decoder": {"type": "Sequence", "decoders": [
               {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
               {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ",
                                                            "start": 1, "stop": 0}]},
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                     "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                     "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]}}
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "add_bos_token": True, "add_eos_token": False}
    return tok, cfg, len(toks)


def tokenizer_spm_tiny(kind):
    """A small SentencePiece-style tokenizer.json (BPE with byte fallback):
    Gemma's (no dummy prefix, <pad> <eos> <bos> <unk> first, turn markers)
    or Phi-3's (Llama 2's <unk> <s> </s>, a dummy prefix, chat tokens added)."""
    U = "\u2581"
    if kind == "gemma":
        specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    else:
        specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    merges = []
    words = ["the", "and", "ing", "Hello", "world", "ion", "er", "in", "on", "at", "is"]
    for ch in sorted(set("".join(words)) | {U}):
        vocab.setdefault(ch, len(vocab))
    for w in words + [U + w for w in words]:
        cur = w[0]
        for ch in w[1:]:
            if cur + ch not in vocab:
                merges.append([cur, ch])
                vocab[cur + ch] = len(vocab)
            cur = cur + ch
    n = len(vocab)
    extra = ["<start_of_turn>", "<end_of_turn>"] if kind == "gemma" else \
        ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|system|>", "<|user|>"]
    added = [{"id": vocab[t], "content": t, "special": True} for t in specials] + \
        [{"id": n + i, "content": t, "special": True} for i, t in enumerate(extra)]
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": kind != "gemma" and
                  a["id"] >= n, "normalized": False})
    norm = [{"type": "Replace", "pattern": {"String": " "}, "content": U}]
    if kind != "gemma":
        norm.insert(0, {"type": "Prepend", "prepend": U})
    tok = {"version": "1.0", "added_tokens": added,
           "normalizer": {"type": "Sequence", "normalizers": norm}, "pre_tokenizer": None,
           "decoder": {"type": "Sequence", "decoders": [
               {"type": "Replace", "pattern": {"String": U}, "content": " "},
               {"type": "ByteFallback"}, {"type": "Fuse"}]},
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True,
                     "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
                     "merges": merges}}
    if kind == "gemma":
        cfg = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
               "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}
    else:
        cfg = {"bos_token": "<s>", "eos_token": "<|end|>",
               "unk_token": "<unk>", "pad_token": "<|endoftext|>", "add_bos_token": False,
               "add_eos_token": False}
    return tok, cfg, n + len(extra)


def tokenizer_qwen():
    """Byte-level BPE with Qwen2's split and its three control tokens."""
    tok, _, n = tokenizer_bytes("qwen2")
    tok["added_tokens"] = [{"id": n - 3 + i, "content": t, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
                           for i, t in enumerate(["<|endoftext|>", "<|im_start|>",
                                                  "<|im_end|>"])]
    tok["normalizer"] = {"type": "NFC"}
    cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "add_bos_token": False}
    return tok, cfg, n


def family_config(a, n_vocab, hd):
    """config.json of --family, and the special ids."""
    f = a.family
    base = {"vocab_size": n_vocab, "hidden_size": a.embd, "intermediate_size": a.ff,
            "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads, "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6, "torch_dtype": {"F32": "float32", "F16": "float16",
                                                   "BF16": "bfloat16"}[a.dtype]}
    if f in ("qwen2", "qwen3", "qwen3moe"):
        base.update({"rope_theta": 1000000.0, "tie_word_embeddings": f == "qwen2",
                     "use_sliding_window": False, "sliding_window": None,
                     "hidden_act": "silu", "bos_token_id": n_vocab - 3,
                     "eos_token_id": n_vocab - 1})
        base["architectures"] = [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                                  "qwen3moe": "Qwen3MoeForCausalLM"}[f]]
        base["model_type"] = {"qwen2": "qwen2", "qwen3": "qwen3", "qwen3moe": "qwen3_moe"}[f]
        if f != "qwen2":
            base.update({"head_dim": hd, "attention_bias": False})
        if f == "qwen3moe":
            base.update({"num_experts": a.experts, "num_experts_per_tok": 2,
                         "moe_intermediate_size": a.ff // 2, "norm_topk_prob": True,
                         "decoder_sparse_step": 1, "mlp_only_layers": [],
                         "output_router_logits": False})
    elif f == "mixtral":
        base.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                     "rope_theta": 1000000.0, "tie_word_embeddings": False,
                     "num_local_experts": a.experts, "num_experts_per_tok": 2,
                     "sliding_window": None, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                     "bos_token_id": n_vocab - 3, "eos_token_id": n_vocab - 1})
    elif f in ("gemma2", "gemma3", "gemma3mm"):
        base.update({"head_dim": hd, "query_pre_attn_scalar": hd, "rope_theta": 10000.0,
                     "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                     "sliding_window": a.window, "bos_token_id": 2, "eos_token_id": 1,
                     "pad_token_id": 0, "attention_bias": False})
        if f == "gemma2":
            base.update({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})
        else:
            base.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                         "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                         "attn_logit_softcapping": None, "final_logit_softcapping": None,
                         "layer_types": ["full_attention" if (i + 1) % 3 == 0 else
                                         "sliding_attention" for i in range(a.layers)],
                         "rope_scaling": None})
        if f == "gemma3mm":
            text = base
            base = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                    "text_config": text, "vision_config": {"hidden_size": 8},
                    "mm_tokens_per_image": 4, "eos_token_id": [1, 106]}
    elif f == "phi3":
        half = hd // 2
        base.update({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                     "rope_theta": 10000.0, "tie_word_embeddings": False,
                     "original_max_position_embeddings": 64, "sliding_window": None,
                     "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": n_vocab - 3,
                     "partial_rotary_factor": 1.0, "rms_norm_eps": 1e-5,
                     "rope_scaling": {"type": "longrope",
                                      "long_factor": [1.0 + 0.25 * i for i in range(half)],
                                      "short_factor": [1.0 + 0.01 * i for i in range(half)]}})
    return base


def family_shapes(a, n_vocab, hd):
    """(name, shape) of --family's tensors, in the order transformers saves them."""
    f = a.family
    pre = "model.language_model." if f == "gemma3mm" else "model."
    E, Q, KV = a.embd, a.heads * hd, a.kv_heads * hd
    shapes = [(pre + "embed_tokens.weight", [n_vocab, E])]
    for i in range(a.layers):
        p = pre + "layers.%d." % i
        shapes.append((p + "input_layernorm.weight", [E]))
        if f == "phi3":
            shapes.append((p + "self_attn.qkv_proj.weight", [Q + 2 * KV, E]))
        else:
            shapes += [(p + "self_attn.q_proj.weight", [Q, E]),
                       (p + "self_attn.k_proj.weight", [KV, E]),
                       (p + "self_attn.v_proj.weight", [KV, E])]
        if f == "qwen2":
            shapes += [(p + "self_attn.q_proj.bias", [Q]), (p + "self_attn.k_proj.bias", [KV]),
                       (p + "self_attn.v_proj.bias", [KV])]
        if f in ("qwen3", "qwen3moe", "gemma3", "gemma3mm"):
            shapes += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        shapes.append((p + "self_attn.o_proj.weight", [E, Q]))
        shapes.append((p + "post_attention_layernorm.weight", [E]))
        if f.startswith("gemma"):
            shapes += [(p + "pre_feedforward_layernorm.weight", [E]),
                       (p + "post_feedforward_layernorm.weight", [E])]
        if f in ("mixtral", "qwen3moe"):
            ffx = a.ff // 2 if f == "qwen3moe" else a.ff
            gate = "block_sparse_moe.gate.weight" if f == "mixtral" else "mlp.gate.weight"
            if a.stacked_experts:
                gate = "mlp.gate.weight"
            shapes.append((p + gate, [a.experts, E]))
            # --stacked-experts: write_family packs the per-expert weights (same values)
            for x in range(a.experts):
                if f == "mixtral" and not a.stacked_experts:
                    q = p + "block_sparse_moe.experts.%d." % x
                    shapes += [(q + "w1.weight", [ffx, E]), (q + "w2.weight", [E, ffx]),
                               (q + "w3.weight", [ffx, E])]
                else:
                    q = p + "mlp.experts.%d." % x
                    shapes += [(q + "gate_proj.weight", [ffx, E]),
                               (q + "up_proj.weight", [ffx, E]),
                               (q + "down_proj.weight", [E, ffx])]
        elif f == "phi3":
            shapes += [(p + "mlp.gate_up_proj.weight", [2 * a.ff, E]),
                       (p + "mlp.down_proj.weight", [E, a.ff])]
        else:
            shapes += [(p + "mlp.gate_proj.weight", [a.ff, E]), (p + "mlp.up_proj.weight", [a.ff, E]),
                       (p + "mlp.down_proj.weight", [E, a.ff])]
    shapes.append((pre + "norm.weight", [E]))
    if f in ("mixtral", "qwen3", "qwen3moe", "phi3"):
        shapes.append(("lm_head.weight", [n_vocab, E]))
    if f == "gemma3mm":
        shapes += [("model.vision_tower.vision_model.embeddings.patch_embedding.weight", [8, 12]),
                   ("model.multi_modal_projector.mm_input_projection_weight", [8, E])]
    return shapes


def f16(x):
    return struct.pack("<e", max(-65504.0, min(65504.0, x)))


def bf16(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return struct.pack("<H", (u >> 16) & 0xFFFF)


def encode(vals, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "F16":
        return b"".join(f16(v) for v in vals)
    return b"".join(bf16(v) for v in vals)


def decode(vals, dtype):
    """What the stored values read back as (the forward uses these)."""
    if dtype == "F32":
        return [struct.unpack("<f", struct.pack("<f", v))[0] for v in vals]
    if dtype == "F16":
        return [struct.unpack("<e", f16(v))[0] for v in vals]
    return [struct.unpack("<f", b"\0\0" + bf16(v))[0] for v in vals]


def write_safetensors(path, tensors, brk=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    if brk == "offset":
        first = header[next(iter(header))]["data_offsets"]
        first[0], first[1] = off + 4096, off + 4096 + first[1] - first[0]
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)
    if brk == "truncate":
        os.truncate(path, os.path.getsize(path) - 100)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=32)
    ap.add_argument("--ff", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", default="bytes")
    ap.add_argument("--pre", default="llama3")
    ap.add_argument("--llama3-json")
    ap.add_argument("--spm-gguf")
    ap.add_argument("--dtype", default="F32")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--rope-llama3", action="store_true")
    ap.add_argument("--arch", default="LlamaForCausalLM")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big", dest="big_mb", action="store_true")
    ap.add_argument("--vocab-size", type=int, default=0)
    ap.add_argument("--break", dest="brk")
    ap.add_argument("--forward", nargs=2)
    ap.add_argument("--family")
    ap.add_argument("--stacked-experts", action="store_true")
    ap.add_argument("--head-dim", type=int, default=0)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.family:
        return write_family(a)
    if a.vocab == "llama3":
        tok, tcfg, n_vocab = tokenizer_llama3(a.llama3_json)
    elif a.vocab == "spm":
        tok, tcfg, n_vocab = tokenizer_spm(a.spm_gguf)
    else:
        tok, tcfg, n_vocab = tokenizer_bytes(a.pre)
    n_vocab = max(n_vocab, a.vocab_size)
    hd = a.embd // a.heads
    cfg = {"architectures": [a.arch], "model_type": "llama", "vocab_size": n_vocab,
           "hidden_size": a.embd, "intermediate_size": a.ff, "num_hidden_layers": a.layers,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": a.tied, "torch_dtype": {"F32": "float32", "F16": "float16",
                                                          "BF16": "bfloat16"}[a.dtype],
           "bos_token_id": {"bytes": n_vocab - 3, "llama3": 128000, "spm": 1}[a.vocab],
           "eos_token_id": {"bytes": n_vocab - 1, "llama3": 128009, "spm": 2}[a.vocab],
           "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
    if a.rope_llama3:
        cfg["rope_scaling"] = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if a.brk != "no-tokenizer":
        with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f)

    rng = random.Random(a.seed)
    shapes = [("model.embed_tokens.weight", [n_vocab, a.embd])]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        shapes += [(p + "input_layernorm.weight", [a.embd]),
                   (p + "self_attn.q_proj.weight", [a.heads * hd, a.embd]),
                   (p + "self_attn.k_proj.weight", [a.kv_heads * hd, a.embd]),
                   (p + "self_attn.v_proj.weight", [a.kv_heads * hd, a.embd]),
                   (p + "self_attn.o_proj.weight", [a.embd, a.heads * hd]),
                   (p + "post_attention_layernorm.weight", [a.embd]),
                   (p + "mlp.gate_proj.weight", [a.ff, a.embd]),
                   (p + "mlp.up_proj.weight", [a.ff, a.embd]),
                   (p + "mlp.down_proj.weight", [a.embd, a.ff])]
    shapes.append(("model.norm.weight", [a.embd]))
    if not a.tied:
        shapes.append(("lm_head.weight", [n_vocab, a.embd]))
    if a.brk == "shape":
        shapes[2] = (shapes[2][0], [shapes[2][1][0] + 2, shapes[2][1][1]])
    if a.brk == "extra":
        shapes.append(("model.layers.0.self_attn.rotary_emb.inv_freq", [hd // 2]))
        shapes.append(("model.vision_tower.weight", [4]))
    if a.brk == "layer":
        shapes.append(("model.layers.%d.input_layernorm.weight" % a.layers, [a.embd]))
    weights, tensors = {}, []
    chunk = None
    for name, shape in shapes:
        n = 1
        for s in shape:
            n *= s
        dtype = a.dtype
        if a.big_mb:
            if chunk is None:
                chunk = encode([rng.gauss(0, 0.02) for _ in range(4096)], "F16")
                if dtype != "F16":
                    chunk = encode([rng.gauss(0, 0.02) for _ in range(4096 * 2 // (
                        4 if dtype == "F32" else 2))], dtype)
            esz = 4 if dtype == "F32" else 2
            data = (chunk * (n * esz // len(chunk) + 1))[:n * esz]
        else:
            if name.endswith("norm.weight"):
                vals = [1.0 + rng.gauss(0, 0.1) for _ in range(n)]
            else:
                vals = [rng.gauss(0, 0.5 if "embed" in name else 0.2) for _ in range(n)]
            data = encode(vals, dtype)
            weights[name] = (shape, decode(vals, dtype))
        if a.brk == "dtype" and name.endswith("q_proj.weight"):
            dtype = "F8_E4M3"
            data = data[:n]
        tensors.append((name, dtype, shape, data))
    if a.shards > 1:
        per = (len(tensors) + a.shards - 1) // a.shards
        wm = {}
        for s in range(a.shards):
            fn = "model-%05d-of-%05d.safetensors" % (s + 1, a.shards)
            part = tensors[s * per:(s + 1) * per]
            write_safetensors(os.path.join(a.out, fn), part, a.brk if s == 0 else None)
            for t in part:
                wm[t[0]] = fn
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
                       "weight_map": wm}, f)
    else:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.brk)
    if a.forward:
        ids = [int(x) for x in a.forward[0].split(",")]
        print(",".join(str(t) for t in greedy(cfg, weights, ids, int(a.forward[1]))))


def stack_experts(tensors, n_exp):
    """transformers 5's MoE layout: each layer's per-expert gate/up/down as
    mlp.experts.gate_up_proj [n, 2 ff, embd] (gate rows, then up rows) and
    mlp.experts.down_proj [n, embd, ff]."""
    out, layer = [], {}
    for name, dtype, shape, data in tensors:
        if ".experts." not in name:
            out.append((name, dtype, shape, data))
            continue
        pre, rest = name.split(".experts.")
        x, part = rest.split(".", 1)
        layer.setdefault(pre, {})[(int(x), part)] = (dtype, shape, data)
        parts = layer[pre]
        if len(parts) == 3 * n_exp:
            ff, embd = parts[(0, "gate_proj.weight")][1]
            gu = b"".join(parts[(e, "gate_proj.weight")][2] + parts[(e, "up_proj.weight")][2]
                          for e in range(n_exp))
            dn = b"".join(parts[(e, "down_proj.weight")][2] for e in range(n_exp))
            out.append((pre + ".experts.gate_up_proj", dtype, [n_exp, 2 * ff, embd], gu))
            out.append((pre + ".experts.down_proj", dtype, [n_exp, embd, ff], dn))
    return out


def write_family(a):
    f = a.family
    if a.llama3_json:  # a real-size byte-level BPE with the family's split
        tok, tcfg, n_vocab = tokenizer_llama3(a.llama3_json,
                                              "qwen2" if f.startswith("qwen") else "llama3")
    elif a.spm_gguf:  # a real-size SentencePiece vocabulary; Gemma's has no dummy prefix
        tok, tcfg, n_vocab = tokenizer_spm(a.spm_gguf)
        if f.startswith("gemma"):
            tok["normalizer"]["normalizers"] = [n for n in tok["normalizer"]["normalizers"]
                                                if n["type"] != "Prepend"]
    elif f in ("qwen2", "qwen3", "qwen3moe"):
        tok, tcfg, n_vocab = tokenizer_qwen()
    elif f == "mixtral":
        tok, tcfg, n_vocab = tokenizer_bytes("llama3")
    else:
        tok, tcfg, n_vocab = tokenizer_spm_tiny("gemma" if f.startswith("gemma") else "phi3")
    n_vocab = max(n_vocab, a.vocab_size)
    hd = a.head_dim or a.embd // a.heads
    cfg = family_config(a, n_vocab, hd)
    with open(os.path.join(a.out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as fp:
        json.dump(tok, fp, ensure_ascii=False)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as fp:
        json.dump(tcfg, fp)
    rng = random.Random(a.seed)
    tensors = []
    for name, shape in family_shapes(a, n_vocab, hd):
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight") and f.startswith("gemma"):
            vals = [rng.gauss(0, 0.1) for _ in range(n)]  # Gemma scales by 1 + w
        elif name.endswith("norm.weight"):
            vals = [1.0 + rng.gauss(0, 0.1) for _ in range(n)]
        else:
            vals = [rng.gauss(0, 0.5 if "embed" in name else 0.2) for _ in range(n)]
        tensors.append((name, a.dtype, shape, encode(vals, a.dtype)))
    if a.stacked_experts:
        tensors = stack_experts(tensors, a.experts)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    return 0


# ---- transformers' LlamaForCausalLM forward, in plain Python ----

def matvec(w, shape, x):
    rows, cols = shape
    return [sum(w[r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]


def rmsnorm(x, w, eps):
    ms = sum(v * v for v in x) / len(x)
    s = 1.0 / math.sqrt(ms + eps)
    return [v * s * w[i] for i, v in enumerate(x)]


def rope(v, pos, hd, theta):
    """rotate_half: pairs (i, i + hd/2)."""
    out = v[:]
    half = hd // 2
    for i in range(half):
        inv = 1.0 / (theta ** (2 * i / hd))
        c, s = math.cos(pos * inv), math.sin(pos * inv)
        a, b = v[i], v[i + half]
        out[i] = a * c - b * s
        out[i + half] = b * c + a * s
    return out


def greedy(cfg, W, ids, n):
    E, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, L, eps, theta = E // H, cfg["num_hidden_layers"], cfg["rms_norm_eps"], cfg["rope_theta"]
    V = cfg["vocab_size"]
    emb = W["model.embed_tokens.weight"][1]
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    kcache = [[] for _ in range(L)]
    vcache = [[] for _ in range(L)]
    seq, out = list(ids), []
    pos = 0
    logits = None
    for step in range(len(ids) + n - 1):
        tok = seq[step]
        x = emb[tok * E:(tok + 1) * E]
        for l in range(L):
            p = "model.layers.%d." % l
            h = rmsnorm(x, W[p + "input_layernorm.weight"][1], eps)
            q = matvec(W[p + "self_attn.q_proj.weight"][1], W[p + "self_attn.q_proj.weight"][0], h)
            k = matvec(W[p + "self_attn.k_proj.weight"][1], W[p + "self_attn.k_proj.weight"][0], h)
            v = matvec(W[p + "self_attn.v_proj.weight"][1], W[p + "self_attn.v_proj.weight"][0], h)
            q = sum((rope(q[i * hd:(i + 1) * hd], pos, hd, theta) for i in range(H)), [])
            k = sum((rope(k[i * hd:(i + 1) * hd], pos, hd, theta) for i in range(KV)), [])
            kcache[l].append(k)
            vcache[l].append(v)
            att = []
            for hh in range(H):
                g = hh // (H // KV)
                qs = q[hh * hd:(hh + 1) * hd]
                sc = [sum(qs[d] * kk[g * hd + d] for d in range(hd)) / math.sqrt(hd)
                      for kk in kcache[l]]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                att += [sum(e[t] / z * vcache[l][t][g * hd + d] for t in range(len(e)))
                        for d in range(hd)]
            o = matvec(W[p + "self_attn.o_proj.weight"][1], W[p + "self_attn.o_proj.weight"][0], att)
            x = [x[i] + o[i] for i in range(E)]
            h = rmsnorm(x, W[p + "post_attention_layernorm.weight"][1], eps)
            gt = matvec(W[p + "mlp.gate_proj.weight"][1], W[p + "mlp.gate_proj.weight"][0], h)
            up = matvec(W[p + "mlp.up_proj.weight"][1], W[p + "mlp.up_proj.weight"][0], h)
            act = [gt[i] / (1.0 + math.exp(-gt[i])) * up[i] for i in range(len(gt))]
            d = matvec(W[p + "mlp.down_proj.weight"][1], W[p + "mlp.down_proj.weight"][0], act)
            x = [x[i] + d[i] for i in range(E)]
        pos += 1
        if step >= len(ids) - 1:
            h = rmsnorm(x, W["model.norm.weight"][1], eps)
            logits = matvec(head[1], [V, E], h)
            nxt = max(range(V), key=lambda i: logits[i])
            out.append(nxt)
            if len(seq) == step + 1:
                seq.append(nxt)
    return out


if __name__ == "__main__":
    sys.exit(main())
