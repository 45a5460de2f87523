#!/usr/bin/env python3
"""An independent Llama forward pass in plain Python (float64) over a Hugging Face LlamaForCausalLM directory.

    llama_reference.py logits DIR IDS                  the logits of every position, one line each
    llama_reference.py greedy DIR IDS N                the N greedy tokens after IDS, as "5,17,3", and on stderr
                                                       the smallest gap between the two largest logits on the way
    llama_reference.py compare DIR IDS HSDP_LOGITS TOL max |hsdp - reference| / max |reference| over every logit
                                                       of every position; exit 1 if above TOL

DIR holds config.json and model.safetensors as transformers' LlamaForCausalLM reads them (hsdp-ckpt export --format
hf). Written from transformers' documented Llama conventions, not from hsdp's code: safetensors is an 8-byte
little-endian header length, a JSON header, then the data; nn.Linear computes x @ W^T with W stored [out, in];
LlamaRMSNorm is w * x / sqrt(mean(x^2) + rms_norm_eps); rotary embeddings turn q and k with cos and sin of
position * rope_theta^(-2i/head_dim) in the rotate_half layout (x * cos + rotate_half(x) * sin, rotate_half(x) =
(-x2, x1) for the halves x1, x2 of a head); repeat_kv gives query head h the key/value head h // (heads / kv_heads);
scores are q.k / sqrt(head_dim) with a causal mask; the MLP is down_proj(silu(gate_proj(x)) * up_proj(x)); the LM
head is lm_head.weight, or embed_tokens when tie_word_embeddings. IDS is "1,2,3". Plain Python (no numpy): the
test models are small.
"""
import json
import math
import os
import struct
import sys
from operator import mul


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        shape = info["shape"]
        if len(shape) == 1:
            tensors[name] = list(values)
        else:
            rows, cols = shape
            tensors[name] = [list(values[r * cols:(r + 1) * cols]) for r in range(rows)]
    return config, tensors


def linear(x, weight):
    """x [in] @ weight [out, in]^T -> [out]"""
    return [sum(map(mul, row, x)) for row in weight]


def rms_norm(x, weight, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * r * w for v, w in zip(x, weight)]


def rotate(x, heads, head_dim, position, theta):
    half = head_dim // 2
    out = list(x)
    for h in range(heads):
        base = h * head_dim
        for i in range(half):
            angle = position * theta ** (-2.0 * i / head_dim)
            c, s = math.cos(angle), math.sin(angle)
            x1, x2 = x[base + i], x[base + half + i]
            out[base + i] = x1 * c - x2 * s       # x1 cos + (-x2) sin
            out[base + half + i] = x2 * c + x1 * s  # x2 cos + x1 sin
    return out


def silu(v):
    return v / (1.0 + math.exp(-v))


def forward(config, w, ids):
    """logits [len(ids)][vocab_size]"""
    c = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    hd = c // heads
    group = heads // kv_heads
    eps = config.get("rms_norm_eps", 1e-6)
    theta = config.get("rope_theta", 10000.0)
    assert config.get("hidden_act", "silu") == "silu"
    assert len(ids) <= config["max_position_embeddings"]
    xs = [list(w["model.embed_tokens.weight"][i]) for i in ids]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        qs, ks, vs = [], [], []
        for t, x in enumerate(xs):
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            qs.append(rotate(linear(h, w[p + "self_attn.q_proj.weight"]), heads, hd, t, theta))
            ks.append(rotate(linear(h, w[p + "self_attn.k_proj.weight"]), kv_heads, hd, t, theta))
            vs.append(linear(h, w[p + "self_attn.v_proj.weight"]))
        for t in range(len(xs)):
            y = [0.0] * c
            for head in range(heads):
                kvh = head // group
                q = qs[t][head * hd:(head + 1) * hd]
                scores = [sum(map(mul, q, ks[j][kvh * hd:(kvh + 1) * hd])) / math.sqrt(hd) for j in range(t + 1)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                total = sum(e)
                for j in range(t + 1):
                    a = e[j] / total
                    v = vs[j][kvh * hd:(kvh + 1) * hd]
                    for i in range(hd):
                        y[head * hd + i] += a * v[i]
            o = linear(y, w[p + "self_attn.o_proj.weight"])
            xs[t] = [a + b for a, b in zip(xs[t], o)]
        for t, x in enumerate(xs):
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            gate = linear(h, w[p + "mlp.gate_proj.weight"])
            up = linear(h, w[p + "mlp.up_proj.weight"])
            down = linear([silu(g) * u for g, u in zip(gate, up)], w[p + "mlp.down_proj.weight"])
            xs[t] = [a + b for a, b in zip(x, down)]
    head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
    return [linear(rms_norm(x, w["model.norm.weight"], eps), head) for x in xs]


def parse_ids(text):
    return [int(v) for v in text.split(",")]


def main():
    mode, model_dir, ids = sys.argv[1], sys.argv[2], parse_ids(sys.argv[3])
    config, weights = load(model_dir)
    assert config["model_type"] == "llama", config["model_type"]
    if mode == "logits":
        for row in forward(config, weights, ids):
            print(" ".join("%.17g" % v for v in row))
        return 0
    if mode == "greedy":
        count = int(sys.argv[4])
        context = list(ids)
        new, smallest_gap = [], float("inf")
        for _ in range(count):
            last = forward(config, weights, context)[-1]
            top2 = sorted(last)[-2:]
            smallest_gap = min(smallest_gap, top2[1] - top2[0])
            new.append(last.index(max(last)))  # the first largest, as hsdp-sample
            context.append(new[-1])
        print(",".join(str(v) for v in new))
        print("reference greedy decode: smallest gap between the two largest logits %.3g" % smallest_gap,
              file=sys.stderr)
        return 0
    if mode == "compare":
        hsdp_path, tolerance = sys.argv[4], float(sys.argv[5])
        reference = forward(config, weights, ids)
        with open(hsdp_path) as f:
            hsdp = [[float(v) for v in line.split()] for line in f if line.strip()]
        assert len(hsdp) == len(reference) and all(len(a) == len(b) for a, b in zip(hsdp, reference))
        diff = max(abs(a - b) for ra, rb in zip(hsdp, reference) for a, b in zip(ra, rb))
        scale = max(abs(b) for rb in reference for b in rb)
        relative = diff / scale
        print("logits of %d positions x %d tokens: max |hsdp - python| / max |python| = %.3g (tolerance %g)"
              % (len(reference), len(reference[0]), relative, tolerance))
        return 0 if relative <= tolerance else 1
    print("unknown mode %r" % mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
