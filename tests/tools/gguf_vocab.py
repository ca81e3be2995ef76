#!/usr/bin/env python3
"""gguf_vocab.py: rewrites a vocabulary-only byte-level BPE GGUF, for
tokenizer tests that need a vocabulary the shared data does not have.

usage: gguf_vocab.py IN.gguf OUT.gguf [--pre NAME] [--join AB]...

--pre sets tokenizer.ggml.pre; each --join AB (two characters) adds, ahead
of every existing merge, the merges that build A and B from their bytes and
then the token AB, and those tokens, so that a pre-tokenizer that keeps A
and B in one piece produces the token AB and one that splits them cannot.
Everything else is copied as it is. Written with struct alone, like
tests/tools/gguf_edit.py, so it shares no code with the reader it tests.
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def byte_chars():
    """GPT-2's byte-to-unicode table: printable bytes map to themselves,
    the others to code points from 256 on, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def pieces_of(text, table):
    """The merges that build text (one character) from its bytes, left to
    right, and the byte-level spelling of text."""
    chars = [table[b] for b in text.encode()]
    merges, cur = [], chars[0]
    for c in chars[1:]:
        merges.append((cur, c))
        cur += c
    return merges, cur


def read(data):
    """(header fields, [(key, type, raw value bytes, value offset)])"""
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", data, 0)
    if magic != 0x46554747 or n_tensors != 0:
        sys.exit("a vocabulary-only GGUF is expected")
    pos, kvs = 24, []

    def skip(t, p):
        if t == 8:
            return p + 8 + struct.unpack_from("<Q", data, p)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + SIZES[t]

    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + kl].decode()
        (t,) = struct.unpack_from("<I", data, pos + 8 + kl)
        vstart = pos + 12 + kl
        end = skip(t, vstart)
        kvs.append((key, t, data[vstart:end]))
        pos = end
    return (magic, version), kvs


def strings(raw):
    et, n = struct.unpack_from("<IQ", raw, 0)
    assert et == 8
    out, p = [], 12
    for _ in range(n):
        (ln,) = struct.unpack_from("<Q", raw, p)
        out.append(raw[p + 8:p + 8 + ln].decode())
        p += 8 + ln
    return out


def pack_strings(items):
    body = b"".join(struct.pack("<Q", len(s.encode())) + s.encode() for s in items)
    return struct.pack("<IQ", 8, len(items)) + body


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    src, dst, pre, joins = argv[1], argv[2], None, []
    i = 3
    while i < len(argv):
        if argv[i] == "--pre":
            pre = argv[i + 1]
        elif argv[i] == "--join" and len(argv[i + 1]) == 2:
            joins.append(argv[i + 1])
        else:
            sys.exit(f"bad argument {argv[i]}")
        i += 2
    (magic, version), kvs = read(open(src, "rb").read())
    kv = {k: (t, raw) for k, t, raw in kvs}
    tokens = strings(kv["tokenizer.ggml.tokens"][1])
    merges = strings(kv["tokenizer.ggml.merges"][1])
    et, n = struct.unpack_from("<IQ", kv["tokenizer.ggml.token_type"][1], 0)
    types = list(struct.unpack_from(f"<{n}i", kv["tokenizer.ggml.token_type"][1], 12))
    table, new_merges, known = byte_chars(), [], set(tokens)
    for ab in joins:
        ma, a = pieces_of(ab[0], table)
        mb, b = pieces_of(ab[1], table)
        for left, right in ma + mb + [(a, b)]:
            if f"{left} {right}" not in new_merges:
                new_merges.append(f"{left} {right}")
            if left + right not in known:
                known.add(left + right)
                tokens.append(left + right)
                types.append(1)
    out = []
    for key, t, raw in kvs:
        if key == "tokenizer.ggml.pre" and pre is not None:
            raw = struct.pack("<Q", len(pre.encode())) + pre.encode()
        elif key == "tokenizer.ggml.tokens":
            raw = pack_strings(tokens)
        elif key == "tokenizer.ggml.merges":
            raw = pack_strings(new_merges + [m for m in merges if m not in new_merges])
        elif key == "tokenizer.ggml.token_type":
            raw = struct.pack("<IQ", 5, len(types)) + struct.pack(f"<{len(types)}i", *types)
        out.append(struct.pack("<Q", len(key.encode())) + key.encode() + struct.pack("<I", t) + raw)
    body = struct.pack("<IIQQ", magic, version, 0, len(out)) + b"".join(out)
    open(dst, "wb").write(body + b"\0" * (-len(body) % 32))


if __name__ == "__main__":
    main(sys.argv)
