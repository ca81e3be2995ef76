#!/usr/bin/env python3
# train_spec_pair.py: the "real pair" of bench/spec: a target llama of about
# 100M parameters and a draft of about a tenth of it, trained with the real
# `transformers` on the same text with the same tokenizer, so that the
# draft's acceptance and the speed-ups bench/spec reports come from models
# that predict text, not from random weights. Runs on the GPU host (about
# 20 minutes on one H100 with the default budgets; nothing here needs the
# network).
#
# The text is source code: every .py file of the Python installation that
# runs this script (its standard library, ~40 MB), split into files for
# training and held-out files for the prompts. Code is what the copy-heavy
# task needs (an edit of code given in the prompt repeats most of it), and
# every host has it.
#
# Writes under OUT (default /tmp/mfc-spec-pair):
#   tokenizer: a Llama-3-shaped byte-level BPE of 8192 tokens (mkfixtures.py's
#              train_bpe, the one the demo model uses), saved with each model
#   target/    HF LlamaForCausalLM, BF16: 12 layers, 768 wide, 12 heads (GQA 4),
#              FF 2048, tied embeddings: ~92M parameters
#   draft/     HF LlamaForCausalLM, BF16: 4 layers, 384 wide, 6 heads (GQA 2),
#              FF 1024, tied: ~11M parameters
#   prompts/   held-out prompts as token ids (spec_bench --copy-tokens):
#              free-NNN.ids  the first 256 tokens of a held-out file (continue it)
#              copy-NNN.ids  "# Rewrite this function with <old> renamed to <new>:"
#                            then a held-out function, then its first line
#                            renamed (the model continues by copying the rest)
#   train.json losses, held-out loss of each model, the draft's greedy agreement
#              with the target on the held-out text (an estimate of acceptance)
#
# Then (printed at the end, for the lead to run):
#   mfc convert OUT/target -o OUT/target.gguf (and the draft; -q Q8_0 variants), spec_bench on the GPU and CPU, llama.cpp's
#   llama-speculative / llama-server -md on the same GGUFs.
#
# Usage: python3 bench/train_spec_pair.py [--out DIR] [--target-minutes M]
#            [--draft-minutes M] [--seq 512] [--batch 64] [--smoke]
# --smoke: tiny models, a few steps, on whatever device: checks the script.

import argparse
import glob
import json
import math
import os
import random
import re
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tools"))
import mkfixtures  # noqa: E402  (train_bpe, save_hf_tokenizer, llama_config)

SEED = 20261206
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]
# no chat: the messages' contents one after another
PLAIN_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
T0 = time.time()


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


def corpus_files():
    """The standard library's .py files, sorted, split 97/3 by a fixed shuffle."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(f for f in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
                   if "site-packages" not in f and os.path.getsize(f) > 2000)
    rng = random.Random(SEED)
    rng.shuffle(files)
    n_held = max(20, len(files) * 3 // 100)
    return files[n_held:], files[:n_held]


def read(f):
    with open(f, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def token_stream(tok, files, bos, eos):
    ids = []
    for f in files:
        ids.append(bos)
        ids.extend(tok.encode(read(f), add_special_tokens=False).ids)
        ids.append(eos)
    return ids


def make_model(cfg_kw, V, bos, eos, seed, dev):
    import torch
    from transformers import LlamaForCausalLM
    cfg = mkfixtures.llama_config(vocab_size=V, max_position_embeddings=2048, rms_norm_eps=1e-5,
                                  tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos,
                                  pad_token_id=eos,
                                  rope={"rope_type": "default", "rope_theta": 10000.0}, **cfg_kw)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).to(dev)


def train(model, data, seq, batch, minutes, max_steps, lr, dev, tag):
    """Next-token training on random windows of the token stream, bf16
    autocast, AdamW with warmup and cosine decay over the time budget."""
    import torch
    import torch.nn.functional as F
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator(device="cpu").manual_seed(SEED + len(tag))
    n = data.shape[0] - seq - 1
    t0, step, losses = time.time(), 0, []
    budget = minutes * 60
    model.train()
    while step < max_steps:
        frac = min(1.0, (time.time() - t0) / budget)
        if frac >= 1.0:
            break
        f = min(1.0, (step + 1) / 200) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr * f
        starts = torch.randint(0, n, (batch,), generator=g)
        x = torch.stack([data[s:s + seq + 1] for s in starts.tolist()]).to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 200 == 0 or step == 1:
            losses.append((step, round(float(loss), 4)))
            log("  %s step %d loss %.4f lr %.2e" % (tag, step, float(loss), lr * f))
    model.eval()
    return {"steps": step, "seconds": round(time.time() - t0, 1), "losses": losses}


def heldout(model, tok, files, bos, eos, seq, dev, other=None):
    """Held-out loss, and with other the share of positions where the two
    models' greedy next tokens agree (the draft's acceptance at temperature 0,
    roughly)."""
    import torch
    import torch.nn.functional as F
    ids = token_stream(tok, files, bos, eos)
    data = torch.tensor(ids[: (len(ids) // seq) * seq][: seq * 64]).view(-1, seq).to(dev)
    tot, agree, n = 0.0, 0, 0
    with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                                         enabled=dev.type == "cuda"):
        for row in data.split(8):
            lg = model(input_ids=row).logits.float()
            tot += float(F.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]),
                                         row[:, 1:].reshape(-1), reduction="sum"))
            n += row[:, 1:].numel()
            if other is not None:
                lo = other(input_ids=row).logits
                agree += int((lg[:, :-1].argmax(-1) == lo[:, :-1].argmax(-1)).sum())
    out = {"loss": round(tot / n, 4)}
    if other is not None:
        out["greedy_agreement"] = round(agree / n, 4)
    return out


FUNC = re.compile(r"^def ([A-Za-z_][A-Za-z0-9_]*)\(.*?(?=^\S|\Z)", re.M | re.S)


def write_prompts(tok, files, bos, out_dir):
    """Held-out prompts as token ids: free continuation and copy-heavy edits."""
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(SEED + 7)
    n_free = n_copy = 0
    for f in files:
        text = read(f)
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) > 300 and n_free < 16:
            with open(os.path.join(out_dir, "free-%03d.ids" % n_free), "w") as fh:
                fh.write(" ".join(map(str, [bos] + ids[:256])) + "\n")
            n_free += 1
        for m in FUNC.finditer(text):
            body = m.group(0).rstrip()
            name = m.group(1)
            if n_copy >= 16 or not (300 < len(body) < 1500) or body.count(name) < 2:
                continue
            new = name + "_v2" if rng.random() < 0.5 else "new_" + name
            head = "# Rewrite this function with %s renamed to %s:\n\n" % (name, new)
            first = body.split("\n", 1)[0].replace(name, new, 1)
            prompt = head + body + "\n\n\n" + first + "\n"
            with open(os.path.join(out_dir, "copy-%03d.ids" % n_copy), "w") as fh:
                pids = tok.encode(prompt, add_special_tokens=False).ids
                fh.write(" ".join(map(str, [bos] + pids)) + "\n")
            n_copy += 1
    log("prompts: %d free, %d copy (%s)" % (n_free, n_copy, out_dir))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/mfc-spec-pair")
    ap.add_argument("--target-minutes", type=float, default=14)
    ap.add_argument("--draft-minutes", type=float, default=5)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    import torch
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    log("device %s %s, torch %s" % (dev, torch.cuda.get_device_name(0) if dev.type == "cuda"
                                    else "", torch.__version__))
    train_files, held_files = corpus_files()
    if a.smoke:
        train_files, held_files = train_files[:40], held_files[:20]
    log("corpus: %d training files, %d held out" % (len(train_files), len(held_files)))
    tok = mkfixtures.train_bpe((read(f) for f in train_files), 8192 if not a.smoke else 600,
                               SPECIALS)
    bos, eos = tok.token_to_id(SPECIALS[0]), tok.token_to_id(SPECIALS[1])
    V = tok.get_vocab_size()
    data = torch.tensor(token_stream(tok, train_files, bos, eos), dtype=torch.long)
    log("training stream: %d tokens" % data.shape[0])
    shapes = {
        "target": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=4),
        "draft": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=4,
                      num_attention_heads=6, num_key_value_heads=2),
    }
    if a.smoke:
        shapes = {k: dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2 if k ==
                          "target" else 1, num_attention_heads=2, num_key_value_heads=1)
                  for k in shapes}
    report = {"vocab": V, "train_tokens": int(data.shape[0]), "seed": SEED}
    models = {}
    for name, minutes, lr in (("target", a.target_minutes, 6e-4), ("draft", a.draft_minutes, 1e-3)):
        model = make_model(shapes[name], V, bos, eos, SEED + len(name), dev)
        n = sum(p.numel() for p in model.parameters())
        log("%s: %d parameters" % (name, n))
        r = train(model, data, a.seq if not a.smoke else 64, a.batch if not a.smoke else 4,
                  minutes if not a.smoke else 0.2, 10 ** 9 if not a.smoke else 5, lr, dev, name)
        r["parameters"] = n
        report[name] = r
        models[name] = model
    report["target"]["heldout"] = heldout(models["target"], tok, held_files, bos, eos,
                                          a.seq if not a.smoke else 64, dev)
    report["draft"]["heldout"] = heldout(models["draft"], tok, held_files, bos, eos,
                                         a.seq if not a.smoke else 64, dev, other=models["target"])
    log("held out: target %s, draft %s" % (report["target"]["heldout"],
                                          report["draft"]["heldout"]))
    for name, model in models.items():
        d = os.path.join(a.out, name)
        model = model.to("cpu").to(torch.bfloat16)
        model.generation_config.bos_token_id = bos
        model.generation_config.eos_token_id = eos
        model.save_pretrained(d)
        mkfixtures.save_hf_tokenizer(tok, d, SPECIALS[0], SPECIALS[1], None, PLAIN_TEMPLATE, True,
                                     2048)
    write_prompts(tok, held_files, bos, os.path.join(a.out, "prompts"))
    with open(os.path.join(a.out, "train.json"), "w") as fh:
        json.dump(report, fh, indent=2)
    o = a.out
    print("""
next (from a build tree with CUDA; see bench/README.md "Speculative decoding"):
  ./mfc convert %(o)s/target -o %(o)s/target.gguf && ./mfc convert %(o)s/draft -o %(o)s/draft.gguf
  ./mfc convert %(o)s/target -q Q8_0 -o %(o)s/target-q8_0.gguf
  ./mfc convert %(o)s/draft -q Q8_0 -o %(o)s/draft-q8_0.gguf
  MFC_BENCH_PAIR=%(o)s bench/spec --device cuda --pair
""" % {"o": o})


if __name__ == "__main__":
    main()
