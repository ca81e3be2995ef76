#!/usr/bin/env python3
"""hf_offline.py: the offline run of `cuda_bench offline` through HF transformers.

    python3 tests/gpu/hf_offline.py [REQUESTS [BATCH]]      (512, 64)

The same requests as bench/cuda_bench.c's offline_req (prompts of 128-1024
tokens, outputs of 128-512, the same token ids), on a Llama-3-8B-shaped
LlamaForCausalLM in bf16 with random weights: throughput does not depend on
the values, and generation ignores EOS (min_new_tokens) as cuda_bench does.
generate() takes BATCH requests at a time, sorted by prompt length (less
padding: the kindest order for it), greedy, each batch to its longest
requested output; only the requested tokens are counted. Prints output and
total tokens per second over the wall clock, as cuda_bench does.
"""
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
import transformers


def req(i):
    return 128 + (i * 7919 + 13) % 897, 128 + (i * 104729 + 7) % 385


def main():
    n_req = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    bsz = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    vocab = 128256
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}: model built in {time.time() - t0:.1f} s", flush=True)
    reqs = []
    for i in range(n_req):
        n_p, n_o = req(i)
        toks = [(i * 31 + j * 7919) % vocab for j in range(n_p)]
        reqs.append((n_p, n_o, toks))
    reqs.sort(key=lambda r: r[0])
    p_tok = sum(r[0] for r in reqs)
    o_tok = sum(r[1] for r in reqs)
    # warm-up: one short generate (CUDA kernels, allocator)
    with torch.no_grad():
        model.generate(torch.tensor([reqs[0][2][:16]], device="cuda"), max_new_tokens=4,
                       min_new_tokens=4, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    t0 = time.time()
    for b in range(0, n_req, bsz):
        part = reqs[b:b + bsz]
        width = max(r[0] for r in part)
        ids = torch.zeros((len(part), width), dtype=torch.long)
        mask = torch.zeros((len(part), width), dtype=torch.long)
        for k, (n_p, _, toks) in enumerate(part):  # left padding
            ids[k, width - n_p:] = torch.tensor(toks)
            mask[k, width - n_p:] = 1
        n_new = max(r[1] for r in part)
        with torch.no_grad():
            model.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=n_new,
                           min_new_tokens=n_new, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        print(f"  batch {b // bsz + 1}: {len(part)} requests, prompts up to {width}, "
              f"{n_new} new tokens, {time.time() - t0:.1f} s so far", flush=True)
    dt = time.time() - t0
    print(f"offline transformers bf16: {n_req} requests, {bsz} per generate() call, {dt:.2f} s")
    print(f"prompt tokens {p_tok}, output tokens {o_tok}: {o_tok / dt:.0f} output tokens/s, "
          f"{(p_tok + o_tok) / dt:.0f} tokens/s in all, {n_req / dt:.2f} requests/s")


if __name__ == "__main__":
    main()
