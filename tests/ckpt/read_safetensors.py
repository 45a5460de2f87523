#!/usr/bin/env python3
"""An independent reader for hsdp-ckpt's safetensors export.

    read_safetensors.py stdlib|numpy MODEL.safetensors GPT2.bin

Parses the safetensors file by the format's definition (8-byte little-endian header length, JSON header, data),
parses the llm.c model file the checkpoint was imported from by llm.c's layout, and checks that every tensor has
nanoGPT's name and shape and the same float32 values, that lm_head.weight equals the wte rows, and that the data
offsets tile the buffer. `numpy` mode reads with numpy (exit 77, skipped, when numpy is missing); `stdlib` mode
uses only Python's struct and array modules.
"""
import json
import struct
import sys
from array import array


def llmc_tensors(path):
    """name -> (shape, flat float list or numpy array) from an llm.c fp32 model file."""
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack_from("<256i", raw, 0)
    magic, version, max_t, vocab, layers, heads, channels, padded = header[:8]
    assert magic == 20240326 and version == 3, (magic, version)
    values = array("f")
    values.frombytes(raw[1024:])
    c = channels
    tensors = {}
    at = 0

    def take(n):
        nonlocal at
        out = values[at:at + n]
        at += n
        return out

    wte = take(padded * c)
    tensors["transformer.wte.weight"] = ([vocab, c], wte[:vocab * c])
    tensors["transformer.wpe.weight"] = ([max_t, c], take(max_t * c))
    per_layer = [("ln_1.weight", [c]), ("ln_1.bias", [c]), ("attn.c_attn.weight", [3 * c, c]),
                 ("attn.c_attn.bias", [3 * c]), ("attn.c_proj.weight", [c, c]), ("attn.c_proj.bias", [c]),
                 ("ln_2.weight", [c]), ("ln_2.bias", [c]), ("mlp.c_fc.weight", [4 * c, c]),
                 ("mlp.c_fc.bias", [4 * c]), ("mlp.c_proj.weight", [c, 4 * c]), ("mlp.c_proj.bias", [c])]
    for name, shape in per_layer:
        n = 1
        for d in shape:
            n *= d
        for layer in range(layers):
            tensors["transformer.h.%d.%s" % (layer, name)] = (shape, take(n))
    tensors["transformer.ln_f.weight"] = ([c], take(c))
    tensors["transformer.ln_f.bias"] = ([c], take(c))
    assert at == len(values), "llm.c file has %d floats, layout uses %d" % (len(values), at)
    assert heads > 0
    return tensors


def main():
    mode, st_path, llmc_path = sys.argv[1:4]
    if mode == "numpy":
        try:
            import numpy as np
        except ImportError as e:
            print("SKIP: numpy is not available to this python (%s): %s" % (sys.executable, e))
            return 77
    with open(st_path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), meta
    expected = llmc_tensors(llmc_path)
    names = set(header)
    want = set(expected) | {"lm_head.weight"}
    assert names == want, "names differ: extra %s, missing %s" % (sorted(names - want), sorted(want - names))
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())
    end = 0
    for begin, stop in spans:
        assert begin == end, "offsets do not tile the buffer at %d" % begin
        end = stop
    assert end == len(data), "buffer holds %d bytes, offsets end at %d" % (len(data), end)
    for name, info in header.items():
        shape, values = expected["transformer.wte.weight" if name == "lm_head.weight" else name]
        assert info["dtype"] == "F32", (name, info["dtype"])
        assert info["shape"] == shape, (name, info["shape"], shape)
        begin, stop = info["data_offsets"]
        if mode == "numpy":
            got = np.frombuffer(data[begin:stop], dtype="<f4").reshape(shape)
            ref = np.asarray(values, dtype=np.float32).reshape(shape)
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), name
        else:
            got = array("f")
            got.frombytes(data[begin:stop])
            assert got.tobytes() == values.tobytes(), name
    print("OK: %d tensors read back with %s, names, shapes and values as in %s" % (len(header), mode, llmc_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
