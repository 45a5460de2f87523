#!/usr/bin/env python3
"""PyTorch's GPT-2 training step, timed, for hsdp's GPU speed comparison (issue 39; tests/gpu/device_check.sh).

    pytorch_gpt2.py [--batch 8] [--seq-len 1024] [--steps 10] [--warmup 3] [--no-compile] [--n-layer 12]
                    [--n-embd 768] [--n-head 12] [--vocab 50304]

One JSON line on stdout: {"bench":"pytorch_gpt2", "batch", "seq_len", "ms_per_step", "tokens_per_s", "mfu",
"flops_per_step", "peak_memory_bytes", "compiled", "torch", "device"}. The model is GPT-2 as nanoGPT defines it
(pre-LayerNorm blocks, tanh GELU, tied head, no dropout), written here; attention is
torch.nn.functional.scaled_dot_product_attention with is_causal=True (PyTorch picks its flash kernel), weights in
fp32 under torch.autocast(bfloat16), AdamW fused, torch.compile unless --no-compile: the configuration PyTorch users
run. The FLOPs are hsdp's count (hsdp-bench-train-gpu --help): tokens * (6 P_matmul + 6 L T C), P_matmul =
12 L C^2 + V C, over the card's dense bf16 peak as hsdp takes it (H100 SXM 989, PCIe 756, H200 989 TFLOP/s;
--peak-tflops otherwise).
Exit 77 when torch or a CUDA device is missing.
"""
import argparse
import json
import math
import sys
import time

def dense_bf16_peak_tflops(name):
    """hsdp's table (src/model/flops.cpp, dense_bf16_peak_tflops), so that the two MFUs side by side divide by the
    same peak: H200 and H100 SXM 989, H100 PCIe 756, H100 NVL none, A100 312 TFLOP/s; 0 when not known."""
    if "H200" in name:
        return 989.0
    if "H100" in name and "PCIe" in name:
        return 756.0
    if "H100" in name and "NVL" not in name:
        return 989.0
    if "A100" in name:
        return 312.0
    return 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--peak-tflops", type=float, default=0.0)
    p.add_argument("--no-compile", action="store_true")
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(f"SKIP: no torch ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device", file=sys.stderr)
        return 77

    class Block(nn.Module):
        def __init__(self, c, heads):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(c)
            self.c_attn = nn.Linear(c, 3 * c)
            self.c_proj = nn.Linear(c, c)
            self.ln_2 = nn.LayerNorm(c)
            self.c_fc = nn.Linear(c, 4 * c)
            self.mlp_proj = nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.n_embd)
            self.wpe = nn.Embedding(a.seq_len, a.n_embd)
            self.blocks = nn.ModuleList(Block(a.n_embd, a.n_head) for _ in range(a.n_layer))
            self.ln_f = nn.LayerNorm(a.n_embd)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # the tied head
            return F.cross_entropy(logits.float().view(-1, a.vocab), targets.view(-1))

    torch.manual_seed(1337)
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Gpt().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq_len), device=device)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq_len), device=device)

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1e3 / a.steps
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops or dense_bf16_peak_tflops(name)
    c, layers, t, tokens = a.n_embd, a.n_layer, a.seq_len, a.batch * a.seq_len
    flops = tokens * (6 * (12 * layers * c * c + a.vocab * c) + 6 * layers * t * c)
    print(json.dumps({
        "bench": "pytorch_gpt2", "batch": a.batch, "seq_len": t, "n_layer": layers, "n_embd": c,
        "ms_per_step": ms, "tokens_per_s": tokens / (ms * 1e-3), "flops_per_step": flops,
        "mfu": flops / (ms * 1e-3) / (peak * 1e12) if peak else None,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(), "compiled": not a.no_compile,
        "torch": torch.__version__, "device": name}))
    return 0 if math.isfinite(ms) else 1


if __name__ == "__main__":
    sys.exit(main())
