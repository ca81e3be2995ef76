#!/usr/bin/env python3
"""peft_ref.py: PEFT adapters for lora.bats, and an independent reference for
what llama.cpp's convert_lora_to_gguf.py makes of them. Standard library only.

  peft_ref.py make DIR --layers L --embd E --heads H --kv-heads K --ff F
              --vocab V --rank R [--alpha A] [--dtype F32|F16|BF16|F64]
              [--targets q,k,v,o,gate,up,down,qkv,gateup,embed,lm_head] [--rslora]
              [--head-dim D]
              [--seed S] [--norms] [--extra NAME] [--no-alpha]
      writes DIR/adapter_config.json and DIR/adapter_model.safetensors with
      the tensor names and shapes PEFT's save_pretrained gives a Llama model
      (A [r, in], B [out, r]; lora_embedding_A [r, V], lora_embedding_B [E, r]);
      qkv and gateup are Phi-3's fused qkv_proj and gate_up_proj.

  peft_ref.py verify DIR OUT.gguf --arch llama --heads H --kv-heads K
      reads both files with its own parsers and checks OUT.gguf against the
      conversion convert_lora_to_gguf.py performs (gguf-py's name map, A and B
      as-is with ne reversed from the torch shape, token_embd's A transposed,
      llama's q/k B rows permuted by LlamaModel.permute written here as the
      same reshape/swapaxes on nested lists, alpha from lora_alpha), element
      by element and bit for bit. Prints "ok: N tensors" or every mismatch
      and exits 1.

  peft_ref.py fixture EXPECTED.json NAME OUT.gguf
      checks OUT.gguf (the conversion of tests/data/peft/NAME) against what
      tests/tools/mkfixtures.py recorded for it on the GPU host from the real
      peft output (peft/expected.json adapters.NAME.gguf): KVs, every tensor
      name and ne, no other tensor, and every element equal to the source
      tensor's, q/k lora_b rows taken in the recorded q_permutation /
      k_permutation order; halves keep the source dtype.

  peft_ref.py merge-hf HF_DIR PEFT_DIR OUT_DIR [--scale S]
      what PEFT's merge_and_unload() computes, on a Hugging Face llama
      directory (hf_mkdir.py's, F32): W += S * alpha/r * B @ A in HF's own
      row order (alpha/sqrt(r) with use_rslora; the embedding's delta is
      (B @ A)^T), written as a new directory. Converting it with mfc convert
      gives the reference a converted adapter must reproduce on the
      converted base, whatever permutation the conversion applies to q/k.
"""
import json
import math
import os
import struct
import sys

ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}
GGML = {0: ("F32", 4), 1: ("F16", 2), 30: ("BF16", 2)}


def lcg(seed):
    x = seed & 0xFFFFFFFF
    while True:
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        yield (x / 2**32) - 0.5


def encode(vals, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "F64":
        return struct.pack("<%dd" % len(vals), *vals)
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    if dtype == "BF16":  # the top half of the f32 bits (truncation is a valid bf16 value)
        return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
                        for v in vals)
    raise ValueError(dtype)


def write_safetensors(path, tensors):
    hdr, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dtype, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    hdr = json.loads(blob[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = blob[8 + n + b:8 + n + e]
        es = ST_SIZE[t["dtype"]]
        out[name] = (t["dtype"], t["shape"], [raw[i:i + es] for i in range(0, len(raw), es)])
    return out


def cmd_make(a):
    L, E, H, K, F, V, R = (a["layers"], a["embd"], a["heads"], a["kv_heads"], a["ff"],
                           a["vocab"], a["rank"])
    hd = a["head_dim"] or E // H
    dims = {"q": ("self_attn.q_proj", E, H * hd), "k": ("self_attn.k_proj", E, K * hd),
            "v": ("self_attn.v_proj", E, K * hd), "o": ("self_attn.o_proj", H * hd, E),
            "gate": ("mlp.gate_proj", E, F), "up": ("mlp.up_proj", E, F),
            "down": ("mlp.down_proj", F, E),
            # Phi-3's fused projections
            "qkv": ("self_attn.qkv_proj", E, (H + 2 * K) * hd),
            "gateup": ("mlp.gate_up_proj", E, 2 * F)}
    rnd = lcg(a["seed"])
    dt = a["dtype"]
    ts = {}

    def add(name, shape):
        vals = [next(rnd) for _ in range(shape[0] * shape[1])]
        ts[name] = (dt, shape, encode(vals, dt))

    targets = a["targets"].split(",")
    pre = "base_model.model."
    for l in range(L):
        for t in targets:
            if t in dims:
                mod, fin, fout = dims[t]
                base = "%smodel.layers.%d.%s" % (pre, l, mod)
                add(base + ".lora_A.weight", [R, fin])
                add(base + ".lora_B.weight", [fout, R])
        if a["norms"]:
            vals = [1.0 + next(rnd) for _ in range(E)]
            ts["%smodel.layers.%d.input_layernorm.weight" % (pre, l)] = ("F32", [E], encode(vals, "F32"))
    if "embed" in targets:
        add(pre + "model.embed_tokens.lora_embedding_A", [R, V])
        add(pre + "model.embed_tokens.lora_embedding_B", [E, R])
    if "lm_head" in targets:
        add(pre + "lm_head.lora_A.weight", [R, E])
        add(pre + "lm_head.lora_B.weight", [V, R])
    if a["extra"]:
        ts[a["extra"]] = ("F32", [2], encode([1.0, 2.0], "F32"))
    os.makedirs(a["dir"], exist_ok=True)
    write_safetensors(os.path.join(a["dir"], "adapter_model.safetensors"), ts)
    cfg = {"peft_type": "LORA", "r": R, "target_modules": [dims[t][0].split(".")[1] if t in dims
                                                           else t for t in targets],
           "base_model_name_or_path": "tiny/llama", "bias": "none", "fan_in_fan_out": False,
           "use_rslora": a["rslora"], "use_dora": False, "task_type": "CAUSAL_LM",
           "lora_dropout": 0.0, "rank_pattern": {}, "alpha_pattern": {}}
    if not a["no_alpha"]:
        cfg["lora_alpha"] = a["alpha"]
    with open(os.path.join(a["dir"], "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


# ---- GGUF reading ----------------------------------------------------------

VSIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
VFMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
        11: "<q", 12: "<d"}


def read_gguf(path):
    with open(path, "rb") as f:
        d = f.read()
    magic, ver, nt, nkv = struct.unpack_from("<4sIQQ", d, 0)
    assert magic == b"GGUF"
    p = 24

    def s(p):
        (n,) = struct.unpack_from("<Q", d, p)
        return d[p + 8:p + 8 + n].decode(), p + 8 + n

    def val(t, p):
        if t == 8:
            return s(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", d, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = val(et, p)
                out.append(v)
            return out, p
        return struct.unpack_from(VFMT[t], d, p)[0], p + VSIZE[t]

    kv, kvt = {}, {}
    for _ in range(nkv):
        k, p = s(p)
        (t,) = struct.unpack_from("<I", d, p)
        kv[k], p = val(t, p + 4)
        kvt[k] = t
    infos = []
    for _ in range(nt):
        name, p = s(p)
        (nd,) = struct.unpack_from("<I", d, p)
        ne = list(struct.unpack_from("<%dQ" % nd, d, p + 4))
        p += 4 + 8 * nd
        typ, off = struct.unpack_from("<IQ", d, p)
        p += 12
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    start = p + (-p % align)
    tensors = {}
    for name, ne, typ, off in infos:
        tname, es = GGML[typ]
        n = 1
        for x in ne:
            n *= x
        raw = d[start + off:start + off + n * es]
        tensors[name] = (tname, ne, [raw[i:i + es] for i in range(0, len(raw), es)])
    return kv, kvt, tensors


# ---- the reference conversion ----------------------------------------------

MAP = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
       "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
       "mlp.down_proj": "ffn_down"}
NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_base_name(hf):
    """gguf-py's tensor_mapping for the Llama names PEFT uses."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    rest = ".".join(parts[3:-1])
    name = MAP.get(rest) or NORMS[rest]
    return "blk.%s.%s.weight" % (parts[2], name)


def rows_of(elems, shape):
    return [elems[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]


def llama_permute(rows, n_head):
    """LlamaModel.permute: w.reshape(n_head, 2, R // n_head // 2, *rest)
    .swapaxes(1, 2).reshape(w.shape), on a list of rows."""
    R = len(rows)
    m = R // n_head // 2
    x = [[[rows[(h * 2 + j) * m + i] for i in range(m)] for j in range(2)] for h in range(n_head)]
    y = [[[x[h][j][i] for j in range(2)] for i in range(m)] for h in range(n_head)]
    return [row for h in y for pair in h for row in pair]


def f64_to_f32(b):
    return struct.pack("<f", struct.unpack("<d", b)[0])


def expected(st, arch, heads, kv_heads):
    """{gguf name: (type, ne, element byte strings)} as convert_lora_to_gguf.py writes it."""
    pairs, out = {}, {}
    for name, (dt, shape, el) in st.items():
        base = name.replace("base_model.model.", "")
        for suf in (".lora_A.weight", ".lora_B.weight", ".lora_embedding_A", ".lora_embedding_B"):
            base = base.replace(suf, ".weight")
        if "_layernorm" in name or ".norm" in name:
            out[gguf_base_name(base)] = ("F32", [shape[0]],
                                         [f64_to_f32(e) for e in el] if dt == "F64" else el)
            continue
        half = "A" if ("lora_A" in name or "lora_embedding_A" in name) else "B"
        pairs.setdefault(base, {})[half] = (dt, shape, el)
    for base, ab in pairs.items():
        g = gguf_base_name(base)
        (adt, ash, ael), (bdt, bsh, bel) = ab["A"], ab["B"]
        if adt == "F64":
            adt, ael = "F32", [f64_to_f32(e) for e in ael]
        if bdt == "F64":
            bdt, bel = "F32", [f64_to_f32(e) for e in bel]
        arows, brows = rows_of(ael, ash), rows_of(bel, bsh)
        if g == "token_embd.weight":  # lora_a = A.T
            arows = [[arows[k][v] for k in range(ash[0])] for v in range(ash[1])]
        if arch == "llama" and ".attn_q." in g:
            brows = llama_permute(brows, heads)
        if arch == "llama" and ".attn_k." in g:
            brows = llama_permute(brows, kv_heads)
        out[g + ".lora_a"] = (adt, [len(arows[0]), len(arows)], [e for r in arows for e in r])
        out[g + ".lora_b"] = (bdt, [len(brows[0]), len(brows)], [e for r in brows for e in r])
    return out


def cmd_verify(a):
    with open(os.path.join(a["dir"], "adapter_config.json")) as f:
        cfg = json.load(f)
    st = read_safetensors(os.path.join(a["dir"], "adapter_model.safetensors"))
    kv, kvt, got = read_gguf(a["gguf"])
    want = expected(st, a["arch"], a["heads"], a["kv_heads"])
    bad = []
    for k, v in (("general.type", "adapter"), ("adapter.type", "lora"),
                 ("general.architecture", a["arch"])):
        if kv.get(k) != v:
            bad.append("%s is %r, want %r" % (k, kv.get(k), v))
    if "lora_alpha" in cfg:
        alpha = cfg["lora_alpha"] * (math.sqrt(cfg["r"]) if cfg.get("use_rslora") else 1.0)
        if kvt.get("adapter.lora.alpha") != 6 or abs(kv["adapter.lora.alpha"] - alpha) > 1e-4 * alpha:
            bad.append("adapter.lora.alpha is %r (type %r), want f32 %r" %
                       (kv.get("adapter.lora.alpha"), kvt.get("adapter.lora.alpha"), alpha))
    elif "adapter.lora.alpha" in kv:
        bad.append("adapter.lora.alpha present without lora_alpha")
    if sorted(got) != sorted(want):
        bad.append("tensor names differ: extra %s, missing %s" %
                   (sorted(set(got) - set(want)), sorted(set(want) - set(got))))
    for name in sorted(set(got) & set(want)):
        (gt, gne, gel), (wt, wne, wel) = got[name], want[name]
        if gt != wt or gne != wne:
            bad.append("%s: %s %s, want %s %s" % (name, gt, gne, wt, wne))
        elif gel != wel:
            i = next(i for i in range(len(wel)) if gel[i] != wel[i])
            bad.append("%s: element %d differs (%s, want %s)" % (name, i, gel[i].hex(), wel[i].hex()))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("ok: %d tensors" % len(want))


def decode(el, dtype):
    if dtype == "F32":
        return [struct.unpack("<f", e)[0] for e in el]
    if dtype == "F16":
        return [struct.unpack("<e", e)[0] for e in el]
    if dtype == "BF16":
        return [struct.unpack("<f", b"\0\0" + e)[0] for e in el]
    return [struct.unpack("<d", e)[0] for e in el]


def cmd_merge_hf(a):
    import shutil
    with open(os.path.join(a["peft"], "adapter_config.json")) as f:
        cfg = json.load(f)
    r = cfg["r"]
    s = a["scale"] * cfg["lora_alpha"] / (math.sqrt(r) if cfg.get("use_rslora") else r)
    st = read_safetensors(os.path.join(a["peft"], "adapter_model.safetensors"))
    pairs = {}
    for name, (dt, shape, el) in st.items():
        for suf, half, emb in ((".lora_A.weight", "A", 0), (".lora_B.weight", "B", 0),
                               (".lora_embedding_A", "A", 1), (".lora_embedding_B", "B", 1)):
            if name.endswith(suf):
                base = name[len("base_model.model."):-len(suf)] + ".weight"
                pairs.setdefault(base, {})[half] = (shape, decode(el, dt))
                pairs[base]["emb"] = emb
    shutil.copytree(a["dir"], a["out"])
    w = read_safetensors(os.path.join(a["dir"], "model.safetensors"))
    out = {}
    for name, (dt, shape, el) in w.items():
        vals = decode(el, dt)
        if name in pairs:
            (ash, av), (bsh, bv), emb = pairs[name]["A"], pairs[name]["B"], pairs[name]["emb"]
            R = ash[0]
            # delta (out, in) = B @ A; embedding: (B @ A)^T, B [E, r], A [r, V]
            rows, cols = shape
            for i in range(rows):
                for j in range(cols):
                    if emb:
                        d = sum(bv[j * R + k] * av[k * ash[1] + i] for k in range(R))
                    else:
                        d = sum(bv[i * R + k] * av[k * ash[1] + j] for k in range(R))
                    vals[i * cols + j] += s * d
        out[name] = ("F32", shape, encode(vals, "F32"))
    write_safetensors(os.path.join(a["out"], "model.safetensors"), out)


def cmd_fixture(argv):
    exp_path, name, out = argv
    with open(exp_path) as f:
        exp = json.load(f)["adapters"][name]
    g = exp["gguf"]
    st = read_safetensors(os.path.join(os.path.dirname(exp_path), name,
                                       "adapter_model.safetensors"))
    kv, kvt, got = read_gguf(out)
    bad = []
    for k, v in g["kv"].items():
        ok = abs(kv.get(k, 0) - v) < 1e-6 if isinstance(v, float) else kv.get(k) == v
        if not ok:
            bad.append("%s is %r, want %r" % (k, kv.get(k), v))
    names = [t["gguf"] for t in g["tensors"]]
    if sorted(got) != sorted(names):
        bad.append("tensors differ: extra %s, missing %s" %
                   (sorted(set(got) - set(names)), sorted(set(names) - set(got))))
    for t in g["tensors"]:
        if t["gguf"] not in got:
            continue
        gt, gne, gel = got[t["gguf"]]
        sdt, sshape, sel = st[t["peft"]]
        if gne != t["ne"] or gt != sdt:
            bad.append("%s: %s %s, want %s %s" % (t["gguf"], gt, gne, sdt, t["ne"]))
            continue
        rows = rows_of(sel, sshape)
        if t["permute_rows"]:
            perm = g["q_permutation"] if ".attn_q." in t["gguf"] else g["k_permutation"]
            if len(perm) != len(rows):
                bad.append("%s: %d rows, permutation of %d" % (t["gguf"], len(rows), len(perm)))
                continue
            rows = [rows[perm[i]] for i in range(len(rows))]
        want = [e for r in rows for e in r]
        if gel != want:
            i = next(i for i in range(len(want)) if gel[i] != want[i])
            bad.append("%s: element %d differs" % (t["gguf"], i))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("ok: %d tensors" % len(names))


def parse(argv):
    a = {"dir": argv[1], "layers": 2, "embd": 32, "heads": 4, "kv_heads": 2, "ff": 48,
         "vocab": 64, "rank": 4, "alpha": 8.0, "dtype": "F32", "seed": 1, "rslora": False,
         "targets": "q,k,v,o,gate,up,down", "norms": False, "extra": None, "no_alpha": False,
         "arch": "llama", "head_dim": 0}
    rest = argv[2:]
    if argv[0] == "verify":
        a["gguf"] = argv[2]
        rest = argv[3:]
    if argv[0] == "merge-hf":
        a["peft"], a["out"], a["scale"] = argv[2], argv[3], 1.0
        rest = argv[4:]
    i = 0
    while i < len(rest):
        k = rest[i][2:].replace("-", "_")
        if k in ("rslora", "norms", "no_alpha"):
            a[k] = True
            i += 1
            continue
        v = rest[i + 1]
        a[k] = float(v) if k in ("alpha", "scale") else int(v) if isinstance(a.get(k), int) else v
        i += 2
    return a


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "fixture":
        cmd_fixture(sys.argv[2:])
        sys.exit(0)
    args = parse(sys.argv[1:])
    {"make": cmd_make, "verify": cmd_verify, "merge-hf": cmd_merge_hf}[cmd](args)
