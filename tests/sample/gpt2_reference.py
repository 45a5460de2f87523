#!/usr/bin/env python3
"""An independent GPT-2 forward pass in numpy (float64) over a Hugging Face GPT-2 directory.

    gpt2_reference.py logits DIR IDS                  the logits of every position, one line each
    gpt2_reference.py greedy DIR IDS N                the N greedy tokens after IDS, as "5,17,3", and on stderr
                                                      the smallest gap between the two largest logits on the way
    gpt2_reference.py compare DIR IDS HSDP_LOGITS TOL max |hsdp - reference| / max |reference| over every logit
                                                      of every position; exit 1 if above TOL

DIR holds config.json and model.safetensors as transformers' GPT2LMHeadModel reads them (hsdp-ckpt export --format
hf). The reader follows the formats' definitions, not hsdp's code: safetensors is an 8-byte little-endian header
length, a JSON header, then the data; GPT-2's Conv1D computes x @ W + b with W stored [in, out]; the LM head is
tied to wte; the GELU is config.json's activation_function (gelu_new: the tanh approximation); LayerNorm uses
config.json's layer_norm_epsilon. IDS is "1,2,3". Exit 77 (skipped) when numpy is missing.
"""
import json
import os
import struct
import sys


def load(model_dir, np):
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
        key = name[len("transformer."):] if name.startswith("transformer.") else name
        tensors[key] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return config, tensors


def gelu(x, np, activation):
    assert activation in ("gelu_new", "gelu_pytorch_tanh"), activation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, weight, bias, eps, np):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def forward(config, w, ids, np):
    """logits [len(ids), vocab_size]"""
    t = len(ids)
    c = config["n_embd"]
    heads = config["n_head"]
    hs = c // heads
    eps = config.get("layer_norm_epsilon", 1e-5)
    activation = config.get("activation_function", "gelu_new")
    assert t <= config["n_positions"]
    x = w["wte.weight"][ids] + w["wpe.weight"][:t]
    mask = np.tril(np.ones((t, t), dtype=bool))
    for layer in range(config["n_layer"]):
        p = "h.%d." % layer
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps, np)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = (qkv[:, i * c:(i + 1) * c].reshape(t, heads, hs).transpose(1, 0, 2) for i in range(3))
        scores = (q @ k.transpose(0, 2, 1)) / np.sqrt(hs)
        scores = np.where(mask, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        att = scores / scores.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(t, c)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps, np)
        h = gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], np, activation)
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps, np)
    head = w.get("lm_head.weight", w["wte.weight"])  # tied
    return x @ head.T


def parse_ids(text):
    return [int(v) for v in text.split(",")]


def main():
    try:
        import numpy as np
    except ImportError as e:
        print("SKIP: numpy is not available to this python (%s): %s" % (sys.executable, e))
        return 77
    mode, model_dir, ids = sys.argv[1], sys.argv[2], parse_ids(sys.argv[3])
    config, weights = load(model_dir, np)
    if mode == "logits":
        for row in forward(config, weights, ids, np):
            print(" ".join("%.17g" % v for v in row))
        return 0
    if mode == "greedy":
        count = int(sys.argv[4])
        context = list(ids)
        new, smallest_gap = [], float("inf")
        for _ in range(count):
            last = forward(config, weights, context, np)[-1]
            top2 = np.sort(last)[-2:]
            smallest_gap = min(smallest_gap, top2[1] - top2[0])
            new.append(int(np.argmax(last)))  # the first largest, as hsdp-sample
            context.append(new[-1])
        print(",".join(str(v) for v in new))
        print("reference greedy decode: smallest gap between the two largest logits %.3g" % smallest_gap,
              file=sys.stderr)
        return 0
    if mode == "compare":
        hsdp_path, tolerance = sys.argv[4], float(sys.argv[5])
        reference = forward(config, weights, ids, np)
        hsdp = np.loadtxt(hsdp_path, dtype=np.float64, ndmin=2)
        assert hsdp.shape == reference.shape, (hsdp.shape, reference.shape)
        relative = np.abs(hsdp - reference).max() / np.abs(reference).max()
        print("logits of %d positions x %d tokens: max |hsdp - numpy| / max |numpy| = %.3g (tolerance %g)"
              % (reference.shape[0], reference.shape[1], relative, tolerance))
        return 0 if relative <= tolerance else 1
    print("unknown mode %r" % mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
