"""PyTorch eager side of bench/train: the same GPT, weights and first batch as
Loom's, trained with AdamW on random tokens. Prints one JSON line with the
first-step loss, tokens/s over the timed steps and peak RSS (MiB)."""
import json
import resource
import sys
import time

import torch

sys.path.insert(0, sys.argv[1])  # tests/parity: the reference model
import gpt_torch  # noqa: E402
import tensor_dir  # noqa: E402


def main():
    cfg = json.load(open(sys.argv[2]))
    wdir, bdir, steps, warmup = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    torch.set_num_threads(cfg["threads"])
    W = tensor_dir.load(wdir)
    B = tensor_dir.load(bdir)
    P = {n: W[n].clone().requires_grad_(True) for n in gpt_torch.param_names(cfg)}
    opt = torch.optim.AdamW(list(P.values()), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    x, y = B["x0"], B["y0"]
    g = torch.Generator().manual_seed(1)
    first = None
    t0 = None
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.perf_counter()
        _, loss = gpt_torch.loss_fn(cfg, P, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        if first is None:
            first = loss.item()
        x = torch.randint(0, cfg["vocab"], x.shape, generator=g, dtype=torch.int32)
        y = torch.randint(0, cfg["vocab"], y.shape, generator=g, dtype=torch.int32)
    dt = time.perf_counter() - t0
    tokens = steps * x.numel()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"loss0": first, "tokens_per_s": tokens / dt, "peak_rss_mib": rss}))


if __name__ == "__main__":
    main()
