#!/usr/bin/env python3
"""hf_gguf.py: an independent GGUF reader for convert.bats (struct only, no code
shared with mfc).

usage: hf_gguf.py kv FILE            one line per KV in file order: KEY TYPE [VALUE]
                                     (TYPE as gguf-py names it: uint32, float32,
                                     string, bool, array[int32], ...; scalars and
                                     strings up to 60 chars show their value)
       hf_gguf.py tensors FILE       one line per tensor: NAME TYPE DIM0,DIM1,...
       hf_gguf.py f32 FILE NAME      the values of an F32 tensor, one per line
"""
import struct
import sys

TNAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
          6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
          12: "float64"}
FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
       10: "<Q", 11: "<q", 12: "<d"}
GTYPES = {0: "F32", 1: "F16", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16"}


def parse(data):
    pos = 24
    _, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = value(et, p)
                out.append(v)
            return (et, out), p
        (v,) = struct.unpack_from(FMT[t], data, p)
        return v, p + struct.calcsize(FMT[t])

    kvs = []
    for _ in range(n_kv):
        k, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        v, pos = value(t, pos + 4)
        kvs.append((k, t, v))
    align = next((v for k, t, v in kvs if k == "general.alignment"), 32)
    tensors = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", data, pos)
        dims = struct.unpack_from("<%dQ" % nd, data, pos + 4)
        t, off = struct.unpack_from("<IQ", data, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        tensors.append((name, t, dims, off))
    base = (pos + align - 1) // align * align
    return kvs, tensors, base


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    data = open(path, "rb").read()
    kvs, tensors, base = parse(data)
    if cmd == "kv":
        for k, t, v in kvs:
            if t == 9:
                print(k, "array[%s]" % TNAMES[v[0]], len(v[1]))
            elif t == 8:
                print(k, "string", v[:60].replace("\n", "\\n"))
            elif t == 6:
                print(k, TNAMES[t], "%g" % v)
            else:
                print(k, TNAMES[t], v)
    elif cmd == "tensors":
        for name, t, dims, _ in tensors:
            print(name, GTYPES.get(t, str(t)), ",".join(map(str, dims)))
    elif cmd == "f32":
        for name, t, dims, off in tensors:
            if name == sys.argv[3]:
                assert t == 0, "not F32"
                n = 1
                for d in dims:
                    n *= d
                for v in struct.unpack_from("<%df" % n, data, base + off):
                    print("%.9g" % v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
