#!/usr/bin/env python3
"""hf_families.py: each family mfc converts, saved by transformers itself and
compared, after `mfc convert`, with mfc's engine.

    python3 tests/gpu/hf_families.py save DIR     (a host with torch and transformers)
    python3 tests/gpu/hf_families.py check DIR    (a host with mfc and mfc-eval built)
    python3 tests/gpu/hf_families.py all DIR      (both on one host)

save: for Qwen2, Qwen3, Qwen3-MoE, Mixtral, Gemma 2, Gemma 3 and Phi-3 (with
LongRoPE) builds a tiny model from its transformers config class (F32,
seeded weights with a spread that makes the logits differ: the default
initialisation's 0.02 leaves them all but equal), saves it with
save_pretrained (transformers' own safetensors names, its config.json of
this version), writes a tokenizer.json of the family's kind
(tests/cli/hf_mkdir.py's), and records in DIR/expected.json the logits
after a 24-token prompt and 8 greedy tokens, computed on the CPU in F32
with eager attention. The prompt is longer than the Gemma models' 8-position
sliding window, so their sliding layers drop positions.

check: converts each directory with `mfc convert --outtype f32` ($MFC, or
./mfc), runs the prompt through mfc-eval ($MFC_EVAL, or
./tests/tools/mfc-eval) with an F32 KV cache, and requires
max |logit difference| / std(transformers' logits) <= 1e-3 and the same 8
greedy tokens. The bound: both sides compute in F32; measured differences
between mfc and llama.cpp on such models are 1e-6 .. 5e-6 of the spread
(tests/cli/convert-families.bats), and transformers sums in other orders
again; 1e-3 leaves room for that and is still far below what a wrong
norm offset, RoPE pairing, soft-cap or expert order gives (1e-1 and up).
Phi-3 is evaluated with a 64-token context (its original one), where both
transformers and mfc use the short LongRoPE factors.

tests/gpu/run calls `save` and packs DIR into $OUT/hf_families.tgz; unpack
it beside a build and run `check` there. Exit status 1 if any family fails.
"""
import inspect
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import hf_mkdir  # noqa: E402  (stdlib-only tokenizer writers)

PROMPT = [1, 17, 200, 33, 4, 250, 61, 7, 88, 9, 100, 11, 30, 13, 14, 41, 16, 170, 18, 190, 20,
          21, 220, 23]
N_GEN = 8
TOL = 1e-3
FAMILIES = ["qwen2", "qwen3", "qwen3moe", "mixtral", "gemma2", "gemma3", "phi3"]


def tokenizer(fam):
    if fam.startswith("qwen"):
        return hf_mkdir.tokenizer_qwen()
    if fam == "mixtral":
        return hf_mkdir.tokenizer_bytes("llama3")
    return hf_mkdir.tokenizer_spm_tiny("gemma" if fam.startswith("gemma") else "phi3")


def make_config(fam, n_vocab):
    import transformers as tf
    common = dict(vocab_size=n_vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    if fam == "qwen2":
        return tf.Qwen2Config(tie_word_embeddings=True, **common)
    if fam == "qwen3":
        return tf.Qwen3Config(head_dim=16, tie_word_embeddings=False, **common)
    if fam == "qwen3moe":
        return tf.Qwen3MoeConfig(head_dim=16, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, norm_topk_prob=True,
                                 decoder_sparse_step=1, mlp_only_layers=[],
                                 tie_word_embeddings=False, **common)
    if fam == "mixtral":
        return tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                tie_word_embeddings=False, **common)
    if fam == "gemma2":
        return tf.Gemma2Config(head_dim=8, query_pre_attn_scalar=8, sliding_window=8,
                               attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                               **common)
    if fam == "gemma3":
        common["num_hidden_layers"] = 6  # the default pattern: 5 sliding layers, 1 full
        return tf.Gemma3TextConfig(head_dim=8, query_pre_attn_scalar=8, sliding_window=8,
                                   **common)
    if fam == "phi3":
        half = 4  # head_dim 8
        rope = {"rope_type": "longrope", "original_max_position_embeddings": 64,
                "long_factor": [1.0 + 0.25 * i for i in range(half)],
                "short_factor": [1.0 + 0.1 * i for i in range(half)]}
        key = "rope_parameters" if "rope_parameters" in inspect.signature(
            tf.Phi3Config.__init__).parameters else "rope_scaling"
        return tf.Phi3Config(original_max_position_embeddings=64, tie_word_embeddings=False,
                             **{key: rope}, **common)
    raise ValueError(fam)


def randomize(model, fam, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    gemma = fam.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # Gemma scales by 1 + w, the others by w
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                std = 0.5 if "embed" in name else 0.2
                p.copy_(std * torch.randn(p.shape, generator=g))


def reference(model, ids):
    import torch
    seq = list(ids)
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0, -1].float()
        first = logits.tolist()
        out = []
        for _ in range(N_GEN):
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            seq.append(nxt)
            logits = model(torch.tensor([seq])).logits[0, -1].float()
    return first, out


def save(root):
    import torch
    import transformers as tf
    torch.set_default_dtype(torch.float32)
    os.makedirs(root, exist_ok=True)
    expected = {"transformers": tf.__version__, "torch": torch.__version__, "prompt": PROMPT,
                "models": {}}
    for i, fam in enumerate(FAMILIES):
        tok, tcfg, n_vocab = tokenizer(fam)
        cfg = make_config(fam, n_vocab)
        # F32 through the default dtype; eager attention (the soft-capped,
        # sliding-window path every version implements)
        model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        model.eval()
        randomize(model, fam, 100 + i)
        d = os.path.join(root, fam)
        model.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(tcfg, f)
        logits, gen = reference(model, PROMPT)
        expected["models"][fam] = {"class": type(model).__name__, "logits": logits,
                                   "greedy": gen}
        print(f"{fam}: {type(model).__name__} saved, greedy {gen}", flush=True)
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump(expected, f)


def check(root):
    mfc = os.environ.get("MFC", "./mfc")
    ev = os.environ.get("MFC_EVAL", "./tests/tools/mfc-eval")
    exp = json.load(open(os.path.join(root, "expected.json")))
    print(f"reference: transformers {exp['transformers']}, torch {exp['torch']}")
    bad = 0
    for fam, want in exp["models"].items():
        d = os.path.join(root, fam)
        gguf = d + ".gguf"
        subprocess.run([mfc, "convert", d, "-o", gguf, "--outtype", "f32"], check=True,
                       stdout=subprocess.DEVNULL)
        cmd = [ev, "--model", gguf, "--tokens", ",".join(map(str, exp["prompt"])), "--n",
               str(N_GEN), "--kv", "f32", "--threads", "4"]
        if fam == "phi3":
            cmd += ["--ctx", "64"]
        got = json.loads(subprocess.check_output(cmd))
        a, b = got["logits"], want["logits"]
        mean = sum(b) / len(b)
        std = math.sqrt(sum((x - mean) ** 2 for x in b) / len(b))
        score = max(abs(x - y) for x, y in zip(a, b)) / std
        same = got["generated"] == want["greedy"]
        ok = len(a) == len(b) and score <= TOL and same
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'} {fam} ({want['class']}): max|dlogit|/std = "
              f"{score:.2e} (bound {TOL:g}), greedy {N_GEN} "
              f"{'identical' if same else 'differ: %s vs %s' % (got['generated'], want['greedy'])}",
              flush=True)
    print(f"{len(exp['models']) - bad} passed, {bad} failed")
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "check", "all"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if sys.argv[1] in ("save", "all"):
        save(sys.argv[2])
    if sys.argv[1] in ("check", "all"):
        return check(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
