#!/usr/bin/env python3
"""gguf_header.py: an independent GGUF header reader for gguf.bats.

usage: mfc inspect --json FILE | python3 gguf_header.py FILE

Parses FILE's header with struct (no gguf package, no code shared with mfc)
and checks that the JSON on stdin reports the same facts: version, counts,
architecture, name, file type id, vocabulary size, tokenizer model and pre,
bos/eos ids, merges count, chat template length and the architecture's
context length, block count and head counts. Exits 1 naming every mismatch.
"""
import json
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
       10: "<Q", 11: "<q", 12: "<d"}


def read_header(data):
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF", magic
    pos = 24

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n], p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            if et in SIZES:  # fixed-size elements: skip in one step
                return ("array", n), p + n * SIZES[et]
            for _ in range(n):
                _, p = value(et, p)
            return ("array", n), p
        return struct.unpack_from(FMT[t], data, p)[0], p + SIZES[t]

    kv = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        v, pos = value(t, pos + 4)
        kv[key.decode()] = v
    return version, n_tensors, n_kv, kv


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        version, n_tensors, n_kv, kv = read_header(f.read())
    got = json.load(sys.stdin)
    s = lambda k: kv[k].decode() if k in kv else None
    n = lambda k: kv[k][1] if k in kv else None
    arch = s("general.architecture")
    want = {
        ("gguf_version",): version,
        ("tensor_count",): n_tensors,
        ("kv_count",): n_kv,
        ("architecture",): arch,
        ("name",): s("general.name"),
        ("file_type", "id"): kv.get("general.file_type"),
        ("vocab_size",): kv.get(f"{arch}.vocab_size", n("tokenizer.ggml.tokens")),
        ("tokenizer", "model"): s("tokenizer.ggml.model"),
        ("tokenizer", "pre"): s("tokenizer.ggml.pre"),
        ("tokenizer", "tokens"): n("tokenizer.ggml.tokens"),
        ("tokenizer", "merges"): n("tokenizer.ggml.merges"),
        ("tokenizer", "bos_token_id"): kv.get("tokenizer.ggml.bos_token_id"),
        ("tokenizer", "eos_token_id"): kv.get("tokenizer.ggml.eos_token_id"),
        ("chat_template", "length"): len(kv["tokenizer.chat_template"])
        if "tokenizer.chat_template" in kv else None,
        ("context_length",): kv.get(f"{arch}.context_length"),
        ("block_count",): kv.get(f"{arch}.block_count"),
        ("head_count",): kv.get(f"{arch}.attention.head_count"),
        ("head_count_kv",): kv.get(f"{arch}.attention.head_count_kv"),
    }
    bad = []
    for path_keys, w in want.items():
        g = got
        for k in path_keys:
            g = g.get(k) if isinstance(g, dict) else None
        if g != w:
            bad.append(f"{'.'.join(path_keys)}: mfc says {g!r}, the file says {w!r}")
    if bad:
        print(f"{path}:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print(f"{path}: {arch}, {want[('vocab_size',)]} tokens, {s('tokenizer.ggml.model')}: ok")


if __name__ == "__main__":
    main()
