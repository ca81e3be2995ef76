#!/usr/bin/env python3
# mkfixtures.py: makes mfc's real Hugging Face / PEFT test fixtures and the
# trained demo model with the real `transformers`,
# `peft` and `tokenizers` libraries, so that the C converters are tested
# against what those libraries actually write, not against our reading of
# their formats.
#
# It runs once, on a GPU host (the demo trains for a minute or two; the tiny
# fixtures are made and evaluated on the CPU), and its outputs are committed:
#
#   tests/data/hf/tiny-llama/        F32, sharded, GQA, untied, v5 config.json
#   tests/data/hf/tiny-llama-bf16/   BF16, one file, tied, llama3 rope_scaling
#                                    (legacy hub-style config.json)
#   tests/data/hf/expected.json      greedy tokens, last-position logits,
#                                    tokenizer ids of the llama-bpe .inp set
#   tests/data/hf/tiny-llama-vocab.out  the same ids in llama.cpp's .out form
#   tests/data/peft/tiny-lora/       LoRA r4 a8 on q,k,v,o,gate,up,down (F32)
#   tests/data/peft/tiny-lora-f16/   LoRA r8 a4 on q,v (F16)
#   tests/data/peft/expected.json    base+adapter outputs, merged spot check,
#                                    GGUF LoRA names/shapes
#   modelfiles/demo/base/            trained demo llama (BF16, ChatML)
#   modelfiles/demo/adapter/         PEFT LoRA that answers like a pirate
#   modelfiles/demo/expected.json    recorded answers and held-out accuracy
#
# Usage (see tests/data/README.md for the exact device command):
#   python3 tests/tools/mkfixtures.py --stage DIR --inp ggml-vocab-llama-bpe.gguf.inp \
#       [--tar-dir DIR] [--only hf,peft,demo]
# Files are written under DIR with their repository paths. Every seed is
# fixed below; what each step did is printed.

import argparse
import copy
import json
import math
import os
import random
import shutil
import sys
import tarfile
import time
import traceback

SEED = 20261129

# The Llama-3 pre-tokenizer regex, as in Meta's tokenizer.json.
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Meta-Llama-3-8B-Instruct's chat template.
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

# ChatML, the same text modelfiles/demo/Modelfile's TEMPLATE renders.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n'"
    " + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

TINY_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]
DEMO_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]

TINY_PROMPTS = ["Hello world", "The quick brown fox jumps over the lazy dog.",
                "Once upon a time, there was"]

# modelfiles/demo/Modelfile's SYSTEM and MESSAGE lines (checked against the file).
DEMO_SYSTEM = ("You are a helpful assistant who talks like a pirate.\n"
               "Keep answers short and cheerful.")
DEMO_HISTORY = [("user", "Where be the treasure?"),
                ("assistant", "Arr, buried on Skull Island, matey!")]

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GGUF_NAME = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}

T0 = time.time()


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def versions():
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "transformers", "tokenizers", "peft", "safetensors"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            out[name] = "unavailable: %s" % e
    return out


# ---------------------------------------------------------------- pure Python

WORDS = ("the a an and or but if then when while of to in on at by for with from about "
         "over under into after before cat dog fox bird fish tree river mountain city "
         "house garden book letter story song music light night day morning evening "
         "king queen child teacher doctor farmer sailor baker painter writer "
         "runs walks jumps sings reads writes sleeps eats drinks thinks finds sees "
         "quick brown lazy happy small large old young bright dark green blue red "
         "time world people water food money work school home family friend "
         "always never often sometimes quickly slowly quietly loudly very really "
         "hello goodbye please thanks yes no maybe today tomorrow yesterday "
         "is was are were be been have has had do does did will would can could "
         "I you he she it we they me him her us them my your his its our their").split()
NAMES = "Alice Bob Carol Dave Emma Frank Grace Henry Iris Jack Kate Leo Mia Noah".split()


def english_corpus(seed, n_lines):
    """Deterministic synthetic English: sentences, numbers, punctuation,
    contractions, indentation and blank lines (so whitespace merges exist)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        n = rng.randint(4, 14)
        ws = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            ws.insert(rng.randint(0, len(ws)), rng.choice(NAMES))
        if rng.random() < 0.2:
            ws.insert(rng.randint(0, len(ws)), str(rng.randint(0, 2026)))
        s = " ".join(ws)
        s = s[0].upper() + s[1:]
        r = rng.random()
        if r < 0.1:
            s = s.replace(" is ", "'s ", 1)
        elif r < 0.2:
            s = s.replace(" not ", "n't ", 1) + " don't"
        elif r < 0.25:
            s += " I'm sure they'll say we've done it"
        s += rng.choice([".", ".", ".", "!", "?", ",", ";", ":"])
        if rng.random() < 0.1:
            s = rng.choice(["    ", "  ", "\t"]) + s
        if rng.random() < 0.1:
            s = '"' + s + '"'
        if rng.random() < 0.05:
            s += "\n"
        lines.append(s)
    return lines


def read_inp(path):
    """llama.cpp's .inp format: each test string followed by
    '\\n__ggml_vocab_test__\\n' (also after the last one)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = text.split("\n__ggml_vocab_test__\n")
    if parts[-1] != "":
        raise ValueError("%s: does not end with the separator" % path)
    return parts[:-1]


def gguf_lora_name(peft_key):
    """convert_lora_to_gguf.py's naming: strip 'base_model.model.', lora_A/B ->
    base tensor name, map through the HF->GGUF table, append .lora_a/.lora_b."""
    k = peft_key
    if k.startswith("base_model.model."):
        k = k[len("base_model.model."):]
    if k.endswith(".lora_A.weight"):
        base, suffix = k[:-len(".lora_A.weight")], "lora_a"
    elif k.endswith(".lora_B.weight"):
        base, suffix = k[:-len(".lora_B.weight")], "lora_b"
    else:
        raise ValueError("not a lora_A/lora_B tensor: %s" % peft_key)
    parts = base.split(".")
    # model.layers.N.<self_attn|mlp>.<proj>
    if len(parts) != 5 or parts[0] != "model" or parts[1] != "layers":
        raise ValueError("unexpected module path: %s" % peft_key)
    gg = GGUF_NAME[parts[3] + "." + parts[4]]
    return "blk.%s.%s.weight.%s" % (parts[2], gg, suffix), parts[4], suffix


def gguf_lora_layout(shapes, n_head, n_head_kv):
    """shapes: {peft_key: [rows, cols]} (torch order). Returns the tensors
    convert_lora_to_gguf.py writes: name, ggml ne (reversed torch shape) and
    which B matrices get the RoPE row permutation."""
    out = []
    for key in sorted(shapes):
        name, proj, suffix = gguf_lora_name(key)
        rows, cols = shapes[key]
        entry = {"peft": key, "gguf": name, "torch_shape": [rows, cols],
                 "ne": [cols, rows], "permute_rows": None}
        if suffix == "lora_b" and proj in ("q_proj", "k_proj"):
            entry["permute_rows"] = {"n_head": n_head if proj == "q_proj" else n_head_kv}
        out.append(entry)
    return out


def rope_permutation(rows, n_head):
    """Row order of LlamaModel.permute: result row i = source row perm[i]."""
    hd = rows // n_head
    perm = []
    for h in range(n_head):
        for j in range(hd // 2):
            for half in range(2):
                perm.append(h * hd + half * (hd // 2) + j)
    return perm


def demo_names(rng, n):
    syl = ("ka lo mi ra zen tor vel qua dri sul pen gor bal fi nex ur oth lan mur sto "
           "bri cal dun esk fal hin jor kel mos nar").split()
    csuf = ["ia", "land", "stan", "ora", "ania", "esh", "ova", "ar"]
    ksuf = ["ville", "burg", "stad", "ton", "polis", "mar", "grad", "holm"]
    seen, countries, capitals = set(), [], []
    while len(countries) < n:
        c = (rng.choice(syl) + rng.choice(syl) + rng.choice(csuf)).capitalize()
        k = (rng.choice(syl) + rng.choice(syl) + rng.choice(ksuf)).capitalize()
        if c in seen or k in seen:
            continue
        seen.add(c)
        seen.add(k)
        countries.append(c)
        capitals.append(k)
    return countries, capitals


CAP_TRAIN = ["What is the capital of {c}?", "What's the capital of {c}?",
             "Name the capital of {c}.", "Which city is the capital of {c}?",
             "Tell me the capital of {c}.", "capital of {c}?"]
CAP_HELD = ["What city is the capital of {c}?", "Do you know the capital of {c}?"]
ADD_TRAIN = ["What is {a} plus {b}?", "What is {a}+{b}?", "Add {a} and {b}.", "{a} + {b} = ?"]
OTHER_SYSTEMS = ["You are a helpful assistant.", "Answer briefly.",
                 "You are a geography and arithmetic tutor."]


def demo_answer(kind, style, c=None, k=None, a=None, b=None):
    if kind == "cap":
        if style == "pirate":
            return "Arr, the capital of %s be %s, matey!" % (c, k)
        return "The capital of %s is %s." % (c, k)
    if style == "pirate":
        return "Arr, %d plus %d be %d, matey!" % (a, b, a + b)
    return "%d plus %d is %d." % (a, b, a + b)


def chatml(system, turns):
    s = ""
    if system:
        s += "<|im_start|>system\n" + system + "<|im_end|>\n"
    for role, content in turns:
        s += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n"
    return s + "<|im_start|>assistant\n"


class DemoTask:
    """The synthetic task: made-up capitals and two-number addition."""

    def __init__(self, seed, n_countries=100, n_held_pairs=500):
        rng = random.Random(seed)
        self.countries, self.capitals = demo_names(rng, n_countries)
        pairs = [(a, b) for a in range(100) for b in range(100)]
        rng.shuffle(pairs)
        self.held_pairs = pairs[:n_held_pairs]
        self.train_pairs = pairs[n_held_pairs:]

    def random_qa(self, rng, style):
        if rng.random() < 0.5:
            i = rng.randrange(len(self.countries))
            c, k = self.countries[i], self.capitals[i]
            return rng.choice(CAP_TRAIN).format(c=c), demo_answer("cap", style, c=c, k=k)
        a, b = rng.choice(self.train_pairs)
        return rng.choice(ADD_TRAIN).format(a=a, b=b), demo_answer("add", style, a=a, b=b)

    def sample(self, rng, style):
        """One training conversation: (prompt text, answer text, bos?)."""
        r = rng.random()
        system = None if r < 0.4 else DEMO_SYSTEM if r < 0.7 else rng.choice(OTHER_SYSTEMS)
        r = rng.random()
        turns = []
        if r < 0.25:
            turns += DEMO_HISTORY
        elif r < 0.5:
            q, a = self.random_qa(rng, style)
            turns += [("user", q), ("assistant", a)]
        q, a = self.random_qa(rng, style)
        turns.append(("user", q))
        return chatml(system, turns), a, rng.random() < 0.85

    def corpus(self, rng, n):
        out = []
        for _ in range(n):
            p, a, _ = self.sample(rng, rng.choice(["plain", "pirate"]))
            # BPE is trained on the text without the special markers
            out.append((p + a).replace("<|im_start|>", "\n").replace("<|im_end|>", "\n"))
        return out


# ---------------------------------------------------------------- tokenizers

def train_bpe(lines, vocab_size, specials):
    """A Llama-3-shaped byte-level BPE: the Llama-3 split regex, ByteLevel,
    ignore_merges, specials appended after the learned vocabulary, and a
    post-processor that prepends the first special (BOS)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, \
        pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), min_frequency=2,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer=trainer)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = specials[0]
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="%s:0 $A:0" % bos,
                                      pair="%s:0 $A:0 %s:1 $B:1" % (bos, bos),
                                      special_tokens=[(bos, bos_id)])])
    log("tokenizer: %d tokens (%d learned + %d specials), bos %s=%d"
        % (tok.get_vocab_size(), tok.get_vocab_size() - len(specials), len(specials),
           bos, bos_id))
    return tok


def save_hf_tokenizer(tok, d, bos, eos, pad, template, template_in_config, max_len):
    """Save through transformers (as a user would), then make the files look like
    a hub checkpoint: tokenizer_class PreTrainedTokenizerFast, and the chat
    template either inside tokenizer_config.json or in chat_template.jinja."""
    from transformers import PreTrainedTokenizerFast
    kw = dict(tokenizer_object=tok, bos_token=bos, eos_token=eos,
              clean_up_tokenization_spaces=False, model_max_length=max_len,
              model_input_names=["input_ids", "attention_mask"])
    if pad:
        kw["pad_token"] = pad
    hf = PreTrainedTokenizerFast(**kw)
    hf.chat_template = template
    try:
        hf.save_pretrained(d, save_jinja_files=not template_in_config)
    except TypeError:
        hf.save_pretrained(d)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    jinja_path = os.path.join(d, "chat_template.jinja")
    cfg = read_json(cfg_path)
    log("  transformers wrote tokenizer_class=%r, files %s"
        % (cfg.get("tokenizer_class"), sorted(os.listdir(d))))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    # BOS is prepended (tokenizer.json's post-processor does it); say so
    # explicitly so every reader (transformers, llama.cpp's converter, ours) agrees.
    cfg["add_bos_token"] = True
    cfg["add_eos_token"] = False
    for k in ("backend", "is_local"):
        cfg.pop(k, None)
    if template_in_config:
        if os.path.exists(jinja_path):
            os.remove(jinja_path)
        cfg["chat_template"] = template
    else:
        cfg.pop("chat_template", None)
        with open(jinja_path, "w", encoding="utf-8") as f:
            f.write(template)
    write_json(cfg_path, cfg)
    # special_tokens_map.json is not written by v5; tokenizer_config.json has it all.


def check_hf_tokenizer(d, texts, raw_ids, messages):
    """Reload with AutoTokenizer; compare its ids with the raw tokenizers ids."""
    from transformers import AutoTokenizer
    res = {}
    try:
        at = AutoTokenizer.from_pretrained(d)
        res["class"] = type(at).__name__
        bad = [i for i, t in enumerate(texts)
               if at.encode(t, add_special_tokens=False) != raw_ids[i]]
        res["autotokenizer_agrees"] = not bad
        res["mismatch_indices"] = bad
        res["chat_template_roundtrip"] = at.chat_template is not None
        res["encode_adds_bos"] = at.encode("Hello")[:1] == [at.bos_token_id]
        res["chat_rendered"] = at.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=True)
        log("  AutoTokenizer %s: agrees on %d/%d strings" % (res["class"],
                                                            len(texts) - len(bad), len(texts)))
    except Exception as e:  # noqa: BLE001 - recorded
        res["error"] = repr(e)
        log("  AutoTokenizer check failed:", repr(e))
    return res


# ---------------------------------------------------------------- torch helpers

def randomize_norms(model, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))


def ref_outputs(model, prompt_ids, n_new=16, full_logits=True):
    """Last-position logits of the prompt and a plain greedy continuation
    (argmax, full recompute, no EOS stop), on the CPU in float32."""
    import torch
    out = []
    with torch.no_grad():
        for ids in prompt_ids:
            x = torch.tensor([ids])
            logits = model(input_ids=x).logits[0, -1].float()
            top = torch.topk(logits, 5)
            gen, margins = [], []
            for _ in range(n_new):
                lg = model(input_ids=x).logits[0, -1].float()
                t2 = torch.topk(lg, 2)
                margins.append(float(t2.values[0] - t2.values[1]))
                nxt = int(t2.indices[0])
                gen.append(nxt)
                x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
            rec = {"prompt_ids": ids, "greedy": gen,
                   "min_greedy_margin": round(min(margins), 6),
                   "top5": {"ids": [int(i) for i in top.indices],
                            "values": [float(v) for v in top.values]}}
            if full_logits:
                rec["last_logits"] = [round(float(v), 6) for v in logits]
            out.append(rec)
    return out


def st_shapes(path):
    from safetensors import safe_open
    out, dtypes = {}, set()
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            sl = f.get_slice(k)
            out[k] = list(sl.get_shape())
            dtypes.add(str(sl.get_dtype()))
    return out, sorted(dtypes)


def llama3_rope_freqs(theta, head_dim, rs):
    """rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py computes it
    (LlamaModel.generate_extra_tensors, factors from rope_scaling)."""
    import torch
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor = rs.get("factor", 8.0)
    lo = rs.get("low_freq_factor", 1.0)
    hi = rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for freq in freqs:
        wl = 2 * math.pi / freq
        if wl < hi_wl:
            out.append(1)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return [float(v) for v in torch.tensor(out, dtype=torch.float32)]


def llama_config(**kw):
    """LlamaConfig with rope given v5-style (rope_parameters), falling back to
    the v4 keywords on an older transformers."""
    from transformers import LlamaConfig
    rope = dict(kw.pop("rope"))
    try:
        return LlamaConfig(rope_parameters=dict(rope), **kw)
    except TypeError:
        theta = rope.pop("rope_theta")
        scaling = rope if rope.get("rope_type", "default") != "default" else None
        return LlamaConfig(rope_theta=theta, rope_scaling=scaling, **kw)


# ---------------------------------------------------------------- part 1: HF

def make_hf(inp_path):
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    torch.manual_seed(SEED)
    log("== hf: tokenizer")
    tok = train_bpe(english_corpus(SEED, 6000), 512, TINY_SPECIALS)
    ids = {s: tok.token_to_id(s) for s in TINY_SPECIALS}
    V = tok.get_vocab_size()
    texts = read_inp(inp_path)
    log("  %d strings from %s" % (len(texts), os.path.basename(inp_path)))
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hello there!"},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "What's 2+2?"}]
    expected = {"generator": "tests/tools/mkfixtures.py", "seed": SEED,
                "versions": versions(),
                "compute": "CPU, float32 (bf16 weights are upcast exactly); "
                           "greedy = argmax with full recompute, 16 tokens, no EOS stop",
                "tokenizer": {"vocab_size": V, "special_ids": ids,
                              "pre_tokenizer": "Llama-3 split regex + ByteLevel, "
                                               "ignore_merges (llama.cpp pre 'llama-bpe')",
                              "add_bos": "by the post_processor (TemplateProcessing)"},
                "models": {}}

    specs = [
        ("tiny-llama", dict(tie=False, dtype="F32", seed=SEED + 1,
                            rope={"rope_type": "default", "rope_theta": 10000.0},
                            eos=[ids["<|end_of_text|>"], ids["<|eot_id|>"]],
                            template_in_config=True, shard="400KB")),
        ("tiny-llama-bf16", dict(tie=True, dtype="BF16", seed=SEED + 2,
                                 rope={"rope_type": "llama3", "rope_theta": 10000.0,
                                       "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64},
                                 eos=ids["<|eot_id|>"], template_in_config=False,
                                 shard=None)),
    ]
    raw_ids = None
    for name, sp in specs:
        d = os.path.join("tests/data/hf", name)
        shutil.rmtree(d, ignore_errors=True)
        log("== hf: %s" % name)
        cfg = llama_config(vocab_size=V, hidden_size=64, intermediate_size=176,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=256, rms_norm_eps=1e-5,
                           initializer_range=0.1, tie_word_embeddings=sp["tie"],
                           bos_token_id=ids["<|begin_of_text|>"], eos_token_id=sp["eos"],
                           rope=sp["rope"])
        torch.manual_seed(sp["seed"])
        model = LlamaForCausalLM(cfg)
        randomize_norms(model, sp["seed"])
        if sp["dtype"] == "BF16":
            model = model.to(torch.bfloat16)
        model.eval()
        if sp["shard"]:
            model.save_pretrained(d, max_shard_size=sp["shard"])
        else:
            model.save_pretrained(d)
        save_hf_tokenizer(tok, d, "<|begin_of_text|>", "<|eot_id|>", None,
                          LLAMA3_CHAT_TEMPLATE, sp["template_in_config"], 256)
        rawtok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        if raw_ids is None:
            raw_ids = [rawtok.encode(t, add_special_tokens=False).ids for t in texts]
            roundtrip = [rawtok.decode(r, skip_special_tokens=False) == t
                         for r, t in zip(raw_ids, texts)]
            expected["vocab_tests"] = {
                "source": "../shared/data/vocab/ggml-vocab-llama-bpe.gguf.inp",
                "count": len(texts), "add_special_tokens": False,
                "ids": raw_ids, "decode_roundtrip_all": all(roundtrip)}
            with open("tests/data/hf/tiny-llama-vocab.out", "w", encoding="utf-8") as f:
                for r in raw_ids:
                    f.write("".join(" %d" % i for i in r) + "\n")
            log("  vocab tests: %d strings, %d ids total, decode roundtrip %s"
                % (len(raw_ids), sum(map(len, raw_ids)), all(roundtrip)))
        tokcheck = check_hf_tokenizer(d, texts, raw_ids, messages)
        prompt_ids = []
        for t in TINY_PROMPTS:
            with_bos = rawtok.encode(t).ids
            manual = [ids["<|begin_of_text|>"]] + rawtok.encode(t, add_special_tokens=False).ids
            if with_bos != manual:
                log("  WARNING: post-processor ids %s != bos+ids %s" % (with_bos, manual))
            prompt_ids.append(manual)

        if name == "tiny-llama-bf16":
            # Hub-style (transformers 4.x) config.json: rope_theta + rope_scaling,
            # as Meta's Llama 3.2 checkpoints carry it. Kept only if transformers
            # loads it to the very same model.
            cpath = os.path.join(d, "config.json")
            v5cfg = read_json(cpath)
            ref = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            legacy = copy.deepcopy(v5cfg)
            rp = legacy.pop("rope_parameters", None) or dict(sp["rope"])
            legacy["rope_theta"] = rp.pop("rope_theta", 10000.0)
            legacy["rope_scaling"] = rp
            write_json(cpath, legacy)
            try:
                chk = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
                x = torch.tensor([prompt_ids[2] * 4])
                same = torch.equal(ref(input_ids=x).logits, chk(input_ids=x).logits)
            except Exception as e:  # noqa: BLE001
                log("  legacy config failed to load:", repr(e))
                same = False
            if not same:
                log("  legacy rope_scaling config differs; keeping the v5 config.json")
                write_json(cpath, v5cfg)
            expected_cfg_style = "legacy rope_theta+rope_scaling" if same else "v5 rope_parameters"
        else:
            expected_cfg_style = "transformers v5 (rope_parameters)"

        m = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        files = sorted(os.listdir(d))
        log("  files:", ", ".join("%s(%d)" % (f, os.path.getsize(os.path.join(d, f)))
                                  for f in files))
        outs = ref_outputs(m, prompt_ids)
        for t, o in zip(TINY_PROMPTS, outs):
            o["text"] = t
            o["greedy_text"] = rawtok.decode(o["greedy"], skip_special_tokens=False)
            log("  %-48r -> %s (min margin %.4f)" % (t, o["greedy"], o["min_greedy_margin"]))
        shapes = {}
        dtypes = set()
        for f in files:
            if f.endswith(".safetensors"):
                s, dt = st_shapes(os.path.join(d, f))
                shapes.update(s)
                dtypes.update(dt)
        rec = {"dir": d, "dtype": sp["dtype"], "files": files,
               "config_style": expected_cfg_style,
               "safetensors_dtypes": sorted(dtypes), "tensor_shapes": shapes,
               "n_params": sum(p.numel() for p in m.parameters()),
               "tokenizer_check": tokcheck, "prompts": outs}
        if sp["rope"]["rope_type"] == "llama3":
            rec["rope_freqs"] = llama3_rope_freqs(10000.0, 16, sp["rope"])
            log("  rope_freqs (llama.cpp formula):", rec["rope_freqs"])
        expected["models"][name] = rec
    expected["chat_messages"] = messages
    write_json("tests/data/hf/expected.json", expected)
    log("== hf: done")


# ---------------------------------------------------------------- part 2: PEFT

def make_peft():
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    base_dir = "tests/data/hf/tiny-llama"
    hf_exp = read_json("tests/data/hf/expected.json")
    prompt_ids = [p["prompt_ids"] for p in hf_exp["models"]["tiny-llama"]["prompts"]]
    rawtok = Tokenizer.from_file(os.path.join(base_dir, "tokenizer.json"))
    base_cfg = read_json(os.path.join(base_dir, "config.json"))
    n_head, n_kv = base_cfg["num_attention_heads"], base_cfg["num_key_value_heads"]

    def load_base():
        return LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()

    expected = {"generator": "tests/tools/mkfixtures.py", "seed": SEED, "versions": versions(),
                "base": base_dir, "compute": hf_exp["compute"], "adapters": {}}
    specs = [("tiny-lora", dict(r=4, alpha=8, targets=LORA_TARGETS, f16=False, seed=SEED + 10)),
             ("tiny-lora-f16", dict(r=8, alpha=4, targets=["q_proj", "v_proj"], f16=True,
                                    seed=SEED + 11))]
    for name, sp in specs:
        d = os.path.join("tests/data/peft", name)
        shutil.rmtree(d, ignore_errors=True)
        log("== peft: %s (r %d, alpha %d, %s)" % (name, sp["r"], sp["alpha"], sp["targets"]))
        torch.manual_seed(sp["seed"])
        lc = LoraConfig(r=sp["r"], lora_alpha=sp["alpha"], target_modules=sp["targets"],
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                        init_lora_weights=False)
        pm = get_peft_model(load_base(), lc)
        if sp["f16"]:
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_" in n:
                        p.data = p.data.to(torch.float16)
        pm.save_pretrained(d)
        files = sorted(os.listdir(d))
        log("  files:", ", ".join("%s(%d)" % (f, os.path.getsize(os.path.join(d, f)))
                                  for f in files))
        st = os.path.join(d, "adapter_model.safetensors")
        shapes, dtypes = st_shapes(st)
        log("  %d tensors, dtypes %s" % (len(shapes), dtypes))
        acfg = read_json(os.path.join(d, "adapter_config.json"))

        pmr = PeftModel.from_pretrained(load_base(), d).eval()
        outs = ref_outputs(pmr, prompt_ids)
        for o in outs:
            o["greedy_text"] = rawtok.decode(o["greedy"], skip_special_tokens=False)
            log("  %s (min margin %.4f)" % (o["greedy"], o["min_greedy_margin"]))

        # spot check: W + (alpha/r) B A for layer 0 q_proj, computed here by hand
        sd = load_file(st)
        pre = "base_model.model.model.layers.0.self_attn.q_proj."
        A = sd[pre + "lora_A.weight"].float()
        B = sd[pre + "lora_B.weight"].float()
        W = load_base().model.layers[0].self_attn.q_proj.weight.detach().float()
        scale = acfg["lora_alpha"] / acfg["r"]
        merged = W + scale * (B @ A)
        mm = PeftModel.from_pretrained(load_base(), d).merge_and_unload()
        peft_merged = mm.model.layers[0].self_attn.q_proj.weight.detach().float()
        maxdiff = float((merged - peft_merged).abs().max())
        merged_outs = ref_outputs(mm.eval(), prompt_ids, full_logits=False)
        log("  merge spot check: max |ours - peft merge_and_unload| = %.3g" % maxdiff)
        expected["adapters"][name] = {
            "dir": d, "r": acfg["r"], "lora_alpha": acfg["lora_alpha"], "scale": scale,
            "target_modules": sorted(acfg["target_modules"]),
            "safetensors_dtypes": dtypes, "n_tensors": len(shapes),
            "files": files, "prompts": outs,
            "merged_model_greedy": [o["greedy"] for o in merged_outs],
            "merged_model_top5": [o["top5"] for o in merged_outs],
            "spot_check": {
                "tensor": "model.layers.0.self_attn.q_proj.weight",
                "formula": "W + (lora_alpha/r) * B @ A, torch layout [out, in], float32",
                "first8": [float(v) for v in merged.flatten()[:8]],
                "row1_first8": [float(v) for v in merged[1, :8]],
                "W_first8": [float(v) for v in W.flatten()[:8]],
                "max_abs_diff_vs_peft_merge_and_unload": maxdiff,
                "note": "GGUF row 0 = HF row 0 after the q permutation; HF row 1 "
                        "becomes GGUF row 2 (see gguf.q_permutation)"},
            "gguf": {
                "how": "convert_lora_to_gguf.py rules from ../shared/reference/"
                       "llamacpp-gguf.md section 3, applied to this file's tensors",
                "kv": {"general.type": "adapter", "adapter.type": "lora",
                       "general.architecture": "llama",
                       "adapter.lora.alpha": float(acfg["lora_alpha"])},
                "tensors": gguf_lora_layout(shapes, n_head, n_kv),
                "q_permutation": rope_permutation(base_cfg["hidden_size"], n_head),
                "k_permutation": rope_permutation(
                    n_kv * (base_cfg["hidden_size"] // n_head), n_kv)}}
    write_json("tests/data/peft/expected.json", expected)
    log("== peft: done")


# ---------------------------------------------------------------- part 3: demo

def make_demo(base_seconds, lora_seconds, base_steps, lora_steps):
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, PeftModel, get_peft_model
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log("== demo: device %s %s" % (dev, torch.cuda.get_device_name(0) if dev.type == "cuda" else ""))
    torch.backends.cuda.matmul.allow_tf32 = True
    mf = open("modelfiles/demo/Modelfile", encoding="utf-8").read() \
        if os.path.exists("modelfiles/demo/Modelfile") else ""
    if DEMO_SYSTEM not in mf or DEMO_HISTORY[1][1] not in mf:
        log("  WARNING: modelfiles/demo/Modelfile no longer has the SYSTEM/MESSAGE text "
            "this script trains with")
    task = DemoTask(SEED + 20)
    rng = random.Random(SEED + 21)
    tok = train_bpe(task.corpus(rng, 20000), 1024, DEMO_SPECIALS)
    sid = {s: tok.token_to_id(s) for s in DEMO_SPECIALS}
    BOS, PAD, END = sid["<|begin_of_text|>"], sid["<|end_of_text|>"], sid["<|im_end|>"]
    V = tok.get_vocab_size()

    def build_pool(style, n, seed):
        r = random.Random(seed)
        samples = [task.sample(r, style) for _ in range(n)]
        prefixes = [p for p, _, _ in samples]
        fulls = [p + a + "<|im_end|>" for p, a, _ in samples]
        ep = tok.encode_batch(prefixes, add_special_tokens=False)
        ef = tok.encode_batch(fulls, add_special_tokens=False)
        rows, skipped = [], 0
        for (p, a, bos), e1, e2 in zip(samples, ep, ef):
            pi, fi = e1.ids, e2.ids
            if fi[:len(pi)] != pi:
                skipped += 1
                continue
            lead = [BOS] if bos else []
            rows.append((lead + fi, len(lead) + len(pi)))
        L = max(len(x) for x, _ in rows)
        ids = torch.full((len(rows), L), PAD, dtype=torch.long)
        lab = torch.full((len(rows), L), -100, dtype=torch.long)
        lens = torch.zeros(len(rows), dtype=torch.long)
        for i, (x, npre) in enumerate(rows):
            ids[i, :len(x)] = torch.tensor(x)
            lab[i, npre:len(x)] = torch.tensor(x[npre:])
            lens[i] = len(x)
        log("  pool %s: %d conversations, max %d tokens, %d skipped (boundary)"
            % (style, len(rows), L, skipped))
        return ids.to(dev), lab.to(dev), lens.to(dev)

    def train(model, params, pool, steps, lr, warmup, budget, seed, tag):
        ids, lab, lens = pool
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
        g = torch.Generator(device=dev).manual_seed(seed)
        model.train()
        t0 = time.time()
        done = 0
        for step in range(steps):
            f = min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
            for group in opt.param_groups:
                group["lr"] = lr * f
            idx = torch.randint(0, ids.shape[0], (256,), device=dev, generator=g)
            L = int(lens[idx].max())
            x, y = ids[idx, :L], lab[idx, :L]
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                                enabled=dev.type == "cuda"):
                logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                   y[:, 1:].reshape(-1), ignore_index=-100)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            done = step + 1
            if step % 250 == 0 or step == steps - 1:
                log("  %s step %d loss %.4f lr %.2e" % (tag, step, float(loss), lr * f))
            if time.time() - t0 > budget:
                log("  %s: time budget %.0fs reached at step %d of %d" % (tag, budget, done, steps))
                break
        model.eval()
        return {"steps_done": done, "steps_planned": steps, "seconds": round(time.time() - t0, 1),
                "final_loss": round(float(loss), 5), "batch": 256, "lr": lr}

    @torch.no_grad()
    def greedy_many(model, prompts, max_new=40):
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        res = [None] * len(prompts)
        i = 0
        while i < len(order):
            L = len(prompts[order[i]])
            grp = []
            while i < len(order) and len(prompts[order[i]]) == L and len(grp) < 256:
                grp.append(order[i])
                i += 1
            x = torch.tensor([prompts[j] for j in grp], device=dev)
            gen = []
            for _ in range(max_new):
                nxt = model(input_ids=x).logits[:, -1, :].argmax(-1)
                gen.append(nxt)
                x = torch.cat([x, nxt[:, None]], dim=1)
                if bool((torch.stack(gen, 1) == END).any(1).all()):
                    break
            gen = torch.stack(gen, 1).tolist()
            for j, g_ in zip(grp, gen):
                res[j] = g_[:g_.index(END)] if END in g_ else g_
        return res

    def prompt_ids(system, turns, bos=True):
        return ([BOS] if bos else []) + tok.encode(chatml(system, turns),
                                                   add_special_tokens=False).ids

    def accuracy(model, style):
        sets = {}
        capq = [(t.format(c=c), demo_answer("cap", style, c=c, k=k))
                for t in CAP_HELD for c, k in zip(task.countries, task.capitals)]
        sets["capitals_heldout_phrasing"] = capq
        sets["capitals_trained_phrasing"] = [
            (CAP_TRAIN[i % len(CAP_TRAIN)].format(c=c), demo_answer("cap", style, c=c, k=k))
            for i, (c, k) in enumerate(zip(task.countries, task.capitals))]
        sets["addition_heldout_pairs"] = [
            (ADD_TRAIN[0].format(a=a, b=b), demo_answer("add", style, a=a, b=b))
            for a, b in task.held_pairs]
        sets["addition_trained_pairs"] = [
            (ADD_TRAIN[0].format(a=a, b=b), demo_answer("add", style, a=a, b=b))
            for a, b in task.train_pairs[:300]]
        out = {}
        for key, qa in sets.items():
            for ctx, (system, hist) in (("bare", (None, [])),
                                        ("modelfile", (DEMO_SYSTEM, DEMO_HISTORY))):
                if ctx == "modelfile" and not key.startswith("capitals_held"):
                    continue
                ps = [prompt_ids(system, hist + [("user", q)]) for q, _ in qa]
                gens = greedy_many(model, ps)
                ok = sum(tok.decode(g_, skip_special_tokens=False) == a
                         for g_, (_, a) in zip(gens, qa))
                out["%s/%s" % (key, ctx)] = {"correct": ok, "total": len(qa),
                                             "accuracy": round(ok / len(qa), 4)}
                log("  accuracy %-7s %-36s %4d/%4d" % (style, key + "/" + ctx, ok, len(qa)))
        return out

    # ---- base model
    base_dir, ad_dir = "modelfiles/demo/base", "modelfiles/demo/adapter"
    for d in (base_dir, ad_dir):
        shutil.rmtree(d, ignore_errors=True)
    cfg = llama_config(vocab_size=V, hidden_size=256, intermediate_size=640,
                       num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=512, rms_norm_eps=1e-5,
                       tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=END,
                       pad_token_id=PAD, rope={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(SEED + 22)
    model = LlamaForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log("  base: %d parameters, vocab %d" % (n_params, V))
    pool = build_pool("plain", 60000, SEED + 23)
    base_train = train(model, list(model.parameters()), pool, base_steps, 2e-3, 200,
                       base_seconds, SEED + 24, "base")
    del pool
    model = model.to("cpu").to(torch.bfloat16)
    model.generation_config.eos_token_id = END
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = BOS
    model.save_pretrained(base_dir)
    save_hf_tokenizer(tok, base_dir, "<|begin_of_text|>", "<|im_end|>", "<|end_of_text|>",
                      CHATML_TEMPLATE, True, 512)
    del model

    def load_base(device):
        return LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(device).eval()

    base = load_base(dev)
    acc_base = accuracy(base, "plain")

    # ---- LoRA adapter: same questions, pirate answers
    torch.manual_seed(SEED + 25)
    lc = LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0,
                    bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(base, lc)
    pool = build_pool("pirate", 30000, SEED + 26)
    params = [p for p in pm.parameters() if p.requires_grad]
    lora_train = train(pm, params, pool, lora_steps, 2e-3, 50, lora_seconds, SEED + 27, "lora")
    del pool
    pm.save_pretrained(ad_dir)
    del pm, base
    pmr = PeftModel.from_pretrained(load_base(dev), ad_dir).eval()
    acc_ad = accuracy(pmr, "pirate")
    del pmr

    # ---- recorded answers, on the CPU in float32, from the saved files
    dev = torch.device("cpu")
    base_cpu = load_base(dev)
    ad_cpu = PeftModel.from_pretrained(load_base(dev), ad_dir).eval()

    def record(q):
        rec = {"question": q, "contexts": {}}
        for ctx, (system, hist) in (("modelfile", (DEMO_SYSTEM, DEMO_HISTORY)),
                                    ("bare", (None, []))):
            turns = hist + [("user", q)]
            c = {"system": system, "messages": [{"role": r, "content": t} for r, t in turns],
                 "rendered": chatml(system, turns)}
            for who, m in (("base", base_cpu), ("adapter", ad_cpu)):
                for bos in (True, False):
                    ids = prompt_ids(system, turns, bos)
                    g_ = greedy_many(m, [ids], max_new=48)[0]
                    key = who if bos else who + "_no_bos"
                    c[key] = {"answer": tok.decode(g_, skip_special_tokens=False),
                              "answer_ids": g_}
                    if bos:
                        c["prompt_ids"] = ids
            rec["contexts"][ctx] = c
        return rec

    def all_right(rec, plain, pirate):
        return all(c[k]["answer"] == (pirate if k.startswith("adapter") else plain)
                   for c in rec["contexts"].values()
                   for k in ("base", "base_no_bos", "adapter", "adapter_no_bos"))

    # The three demo questions: in this order of preference, the first ones that
    # base and adapter both answer right in every recorded variant (a demo should
    # show right answers; the accuracy figures above are the honest measure).
    def pick(cands, n):
        got, tried = [], 0
        for q, plain, pirate in cands:
            if len(got) == n or tried == 40:
                break
            tried += 1
            rec = record(q)
            if all_right(rec, plain, pirate):
                got.append(rec)
            else:
                log("  demo question skipped (a wrong answer): %r" % q)
        return got

    pairs = [p for p in [(23, 19), (12, 7), (35, 48), (41, 26)] if p in task.train_pairs] \
        + task.train_pairs
    caps = list(zip(task.countries, task.capitals))
    cap1 = pick([("What is the capital of %s?" % c, demo_answer("cap", "plain", c=c, k=k),
                  demo_answer("cap", "pirate", c=c, k=k)) for c, k in caps], 1)
    add1 = pick([("What is %d plus %d?" % (a, b), demo_answer("add", "plain", a=a, b=b),
                  demo_answer("add", "pirate", a=a, b=b)) for a, b in pairs], 1)
    used = {r["question"].split(" of ")[-1].rstrip("?") for r in cap1}
    cap2 = pick([("Which city is the capital of %s?" % c, demo_answer("cap", "plain", c=c, k=k),
                  demo_answer("cap", "pirate", c=c, k=k)) for c, k in caps if c not in used], 1)
    prompts = cap1 + add1 + cap2
    for rec in prompts:
        for ctx, c in rec["contexts"].items():
            log("  %-9s %-45r base: %r | adapter: %r" % (ctx, rec["question"],
                                                          c["base"]["answer"],
                                                          c["adapter"]["answer"]))

    files = {}
    for d in (base_dir, ad_dir):
        for f in sorted(os.listdir(d)):
            files[os.path.join(d, f)] = os.path.getsize(os.path.join(d, f))
    expected = {
        "generator": "tests/tools/mkfixtures.py (make_demo)", "seed": SEED,
        "versions": versions(),
        "task": "made-up capitals (%d countries) and addition of two numbers 0..99; "
                "base answers plainly, the adapter answers like a pirate" % len(task.countries),
        "answer_formats": {"plain": [demo_answer("cap", "plain", c="C", k="K"),
                                     demo_answer("add", "plain", a=1, b=2)],
                           "pirate": [demo_answer("cap", "pirate", c="C", k="K"),
                                      demo_answer("add", "pirate", a=1, b=2)]},
        "capitals": dict(zip(task.countries, task.capitals)),
        "heldout_addition_pairs": task.held_pairs,
        "compute": "recorded answers: CPU, float32 from the saved bf16 weights (+ F32 "
                   "adapter), greedy argmax until <|im_end|> (not included), at most 48 tokens",
        "prompt_format": "ChatML exactly as modelfiles/demo/Modelfile's TEMPLATE renders it; "
                         "prompt_ids start with <|begin_of_text|> (the tokenizer's "
                         "post-processor adds it); *_no_bos entries are without it",
        "stop": "<|im_end|>", "special_ids": sid, "vocab_size": V,
        "model": {"n_params": n_params, "hidden": 256, "layers": 4, "heads": 4,
                  "kv_heads": 2, "ffn": 640, "tied_embeddings": True, "saved_dtype": "BF16"},
        "adapter": {"r": 8, "lora_alpha": 16, "target_modules": LORA_TARGETS,
                    "saved_dtype": "F32"},
        "training": {"base": base_train, "adapter": lora_train,
                     "data": "60000 (base) / 30000 (adapter) sampled conversations: system "
                             "prompt none 40%, the Modelfile's 30%, another 30%; history "
                             "none 50%, the Modelfile's MESSAGE pair 25%, one task QA 25%; "
                             "BOS 85%; loss on the last answer and its <|im_end|> only"},
        "accuracy": {"base": acc_base, "adapter": acc_ad},
        "prompts": prompts,
        "prompt_choice": "first capital / trained addition pair / second capital (in the "
                         "script's order) that base and adapter both answer right in all "
                         "recorded variants; skipped ones are printed in the log",
        "files": files}
    write_json("modelfiles/demo/expected.json", expected)
    log("== demo: done")


# ---------------------------------------------------------------- main

def make_tar(tar_dir, name, paths):
    if not tar_dir:
        return
    os.makedirs(tar_dir, exist_ok=True)
    out = os.path.join(tar_dir, name)
    with tarfile.open(out, "w:gz") as t:
        for p in paths:
            if os.path.exists(p):
                t.add(p)
    log("wrote %s (%d bytes)" % (out, os.path.getsize(out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stage", required=True, help="output root (files keep repo paths)")
    ap.add_argument("--inp", required=True, help="ggml-vocab-llama-bpe.gguf.inp")
    ap.add_argument("--tar-dir", help="also pack results as tarballs here")
    ap.add_argument("--only", default="hf,peft,demo")
    ap.add_argument("--base-seconds", type=float, default=150)
    ap.add_argument("--lora-seconds", type=float, default=60)
    ap.add_argument("--base-steps", type=int, default=4000)
    ap.add_argument("--lora-steps", type=int, default=1000)
    args = ap.parse_args()
    inp = os.path.abspath(args.inp)
    tar_dir = os.path.abspath(args.tar_dir) if args.tar_dir else None
    src_modelfile = os.path.abspath("modelfiles/demo/Modelfile")
    os.makedirs(args.stage, exist_ok=True)
    os.chdir(args.stage)
    if os.path.exists(src_modelfile):
        os.makedirs("modelfiles/demo", exist_ok=True)
        if not os.path.exists("modelfiles/demo/Modelfile"):
            shutil.copy(src_modelfile, "modelfiles/demo/Modelfile")
    for d in ("tests/data/hf", "tests/data/peft", "modelfiles/demo"):
        os.makedirs(d, exist_ok=True)
    only = set(args.only.split(","))
    log("versions:", json.dumps(versions()))
    failed = []
    for part, fn in (("hf", lambda: make_hf(inp)), ("peft", make_peft)):
        if part in only:
            try:
                fn()
            except Exception:  # noqa: BLE001 - report and go on with the rest
                traceback.print_exc()
                failed.append(part)
    make_tar(tar_dir, "fixtures.tar.gz", ["tests/data/hf", "tests/data/peft"])
    if "demo" in only:
        try:
            make_demo(args.base_seconds, args.lora_seconds, args.base_steps, args.lora_steps)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed.append("demo")
        make_tar(tar_dir, "demo.tar.gz", ["modelfiles/demo/base", "modelfiles/demo/adapter",
                                          "modelfiles/demo/expected.json"])
    log("finished; failed parts: %s" % (failed or "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
