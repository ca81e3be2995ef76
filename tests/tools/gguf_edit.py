#!/usr/bin/env python3
"""gguf_edit.py: rewrites a GGUF with edits, for tests of bad model files.

usage: gguf_edit.py IN.gguf OUT.gguf [--drop TENSOR]... [--set KEY=u32:N|f32:X|str:S]...
                                     [--unset KEY]... [--shape TENSOR=D0,D1[,D2]]...

--drop removes a tensor (its data too); --set adds or replaces a key;
--unset removes one; --shape declares other dimensions for a tensor whose
element count stays the same (its bytes are kept). Everything else is
copied as it is, tensor data realigned to general.alignment (32). Written
with struct alone, so it shares no code with the reader it tests.
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml types: (block elements, block bytes)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2),
          39: (32, 17)}


def read(data):
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF":
        sys.exit("not a GGUF file")
    pos = 24

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n], p + 8 + n

    def skip(t, p):
        if t == 8:
            return string(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + SIZES[t]

    kvs = []
    for _ in range(n_kv):
        start = pos
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos = skip(t, pos + 4)
        kvs.append((key.decode(), data[start:pos]))
    tensors = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from("<%dQ" % nd, data, pos + 4))
        pos += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", data, pos)
        pos += 12
        tensors.append([name.decode(), dims, t, off])
    base = (pos + 31) // 32 * 32
    out = []
    for name, dims, t, off in tensors:
        n = 1
        for d in dims:
            n *= d
        be, bb = BLOCKS[t]
        out.append([name, dims, t, data[base + off:base + off + n // be * bb]])
    return version, kvs, out


def enc_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def enc_kv(key, spec):
    kind, _, v = spec.partition(":")
    if kind == "u32":
        return enc_str(key) + struct.pack("<II", 4, int(v))
    if kind == "f32":
        return enc_str(key) + struct.pack("<If", 6, float(v))
    if kind == "str":
        return enc_str(key) + struct.pack("<I", 8) + enc_str(v)
    sys.exit("--set wants u32:, f32: or str:")


def main():
    src, dst, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(src, "rb") as f:
        version, kvs, tensors = read(f.read())
    for op, arg in zip(args[::2], args[1::2]):
        if op == "--drop":
            tensors = [t for t in tensors if t[0] != arg]
        elif op == "--unset":
            kvs = [kv for kv in kvs if kv[0] != arg]
        elif op == "--set":
            key, _, spec = arg.partition("=")
            kvs = [kv for kv in kvs if kv[0] != key] + [(key, enc_kv(key, spec))]
        elif op == "--shape":
            name, _, dims = arg.partition("=")
            for t in tensors:
                if t[0] == name:
                    t[1] = [int(d) for d in dims.split(",")]
        else:
            sys.exit("unknown edit " + op)
    head = struct.pack("<4sIQQ", b"GGUF", version, len(tensors), len(kvs))
    head += b"".join(raw for _, raw in kvs)
    off, blobs = 0, []
    for name, dims, t, blob in tensors:
        head += enc_str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", t, off)
        pad = (len(blob) + 31) // 32 * 32 - len(blob)
        blobs.append(blob + b"\0" * pad)
        off += len(blob) + pad
    head += b"\0" * ((len(head) + 31) // 32 * 32 - len(head))
    with open(dst, "wb") as f:
        f.write(head + b"".join(blobs))


if __name__ == "__main__":
    main()
