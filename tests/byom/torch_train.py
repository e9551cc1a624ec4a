"""PyTorch's training of a tests/byom model: the reference of the parity test.

  torch_train.py --factory tests/byom/models.py:gpt --weights DIR --batches DIR
                 --config cfg.json --out DIR [--dtype f32|f64]

The model comes from its FACTORY (the same code tools/loom_export.py
exported); its parameters are then set to the values in --weights (Loom's
initial parameters, by the names the exporter gave them: named_parameters()).
Batches DIR holds x{i}, y{i} for i < steps, as Loom's data path drew them.
cfg.json: steps, lr, beta1, beta2, eps, weight_decay (on parameters of rank
>= 2, as Loom), grad_clip, warmup_steps (Loom's linear warmup), ignore_index,
threads.

Writes to --out (tensor_dir format): loss (step 0, at the initial weights),
grad.<name> (step 0), losses (f64 [steps]) and final.<name> after the last
step. --dtype f64 runs model, batches and AdamW in double precision.
"""
import argparse
import importlib.util
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import tensor_dir  # noqa: E402


def load_factory(spec):
    path, name = spec.rsplit(":", 1)
    mod_spec = importlib.util.spec_from_file_location("byom_models", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factory", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="f32", choices=["f32", "f64"])
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    torch.set_num_threads(int(cfg.get("threads", 1)))
    dt = torch.float32 if a.dtype == "f32" else torch.float64
    model, _ = load_factory(a.factory)()
    model.train()
    W = tensor_dir.load(a.weights)
    params = dict(model.named_parameters())
    if set(params) != set(W):
        raise SystemExit(f"parameters differ: torch only {sorted(set(params) - set(W))}, "
                         f"Loom only {sorted(set(W) - set(params))}")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(W[n])
    model.to(dt)
    B = tensor_dir.load(a.batches)

    def loss_of(s):
        x = B[f"x{s}"]
        x = x.to(dt) if x.is_floating_point() else x.long()
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), B[f"y{s}"].long().reshape(-1),
                               ignore_index=cfg["ignore_index"])

    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    warm = cfg["warmup_steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    out, losses = {}, []
    for s in range(cfg["steps"]):
        loss = loss_of(s)
        opt.zero_grad()
        loss.backward()
        if s == 0:
            out["loss"] = loss.detach().reshape(1).double()
            for n, p in params.items():
                out["grad." + n] = p.grad.detach().clone()
        if cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["grad_clip"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    for n, p in params.items():
        out["final." + n] = p.detach()
    tensor_dir.save(a.out, out)


if __name__ == "__main__":
    main()
