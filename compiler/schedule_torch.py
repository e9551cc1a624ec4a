"""Learning-rate sequences from PyTorch's schedulers, for compiler/schedule_test.

Usage: schedule_torch.py KIND LR MIN_LR WARMUP STEPS DECAY_STEPS [KIND ...]
(one group of six per schedule). For each schedule in turn, prints one line
per optimizer step 1..STEPS: "<chained> <lambda>", the lr
that step runs at (%.17g) under
  chained: PyTorch's own schedulers, LinearLR warmup then CosineAnnealingLR /
           LinearLR / ConstantLR + LinearLR, joined by SequentialLR;
  lambda:  LambdaLR with the schedule written as one function of the epoch.
Runs under Debian's /usr/bin/python3 (torch 1.13), in float64.
"""
import math
import sys
import warnings

import torch
from torch.optim.lr_scheduler import (ConstantLR, CosineAnnealingLR, LambdaLR, LinearLR,
                                      SequentialLR)


def optimizer(lr):
    return torch.optim.SGD([torch.zeros(1, dtype=torch.float64, requires_grad=True)], lr=lr)


def chained(kind, lr, min_lr, warmup, steps, decay_steps):
    opt = optimizer(lr)
    phases, milestones = [], []
    if warmup > 1:
        phases.append(LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup - 1))
        milestones.append(warmup)
    elif warmup == 1:
        phases.append(ConstantLR(opt, factor=1.0, total_iters=0))
        milestones.append(1)
    n = steps - warmup

    def decay(n, cosine):  # a one-step phase runs at its first epoch's lr, the base lr
        if n == 1:
            return ConstantLR(opt, factor=1.0, total_iters=0)
        if cosine:
            return CosineAnnealingLR(opt, T_max=n - 1, eta_min=min_lr)
        return LinearLR(opt, start_factor=1.0, end_factor=min_lr / lr, total_iters=n - 1)

    if kind in ("cosine", "linear"):
        phases.append(decay(n, kind == "cosine"))
    elif kind == "wsd":
        if steps - decay_steps > warmup:  # the stable phase
            phases.append(ConstantLR(opt, factor=1.0, total_iters=0))
            milestones.append(steps - decay_steps)
        phases.append(decay(decay_steps, False))
    else:
        phases.append(ConstantLR(opt, factor=1.0, total_iters=0))
    sched = phases[0] if len(phases) == 1 else SequentialLR(opt, phases, milestones=milestones)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def lambda_factor(kind, lr, min_lr, warmup, steps, decay):
    ratio = min_lr / lr

    def f(epoch):  # epoch e runs optimizer step e + 1
        step = epoch + 1
        if step <= warmup:
            return step / warmup
        if kind == "constant":
            return 1.0
        start, n = (steps - decay, decay) if kind == "wsd" else (warmup, steps - warmup)
        if step <= start:
            return 1.0
        p = 0.0 if n <= 1 else min(1.0, (step - start - 1) / (n - 1))
        if kind == "cosine":
            return ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * p))
        return 1 + (ratio - 1) * p
    return f


def with_lambda(kind, lr, min_lr, warmup, steps, decay):
    opt = optimizer(lr)
    sched = LambdaLR(opt, lambda_factor(kind, lr, min_lr, warmup, steps, decay))
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def main():
    # SequentialLR steps a scheduler with an explicit epoch at each milestone.
    warnings.simplefilter("ignore", UserWarning)
    args = sys.argv[1:]
    for i in range(0, len(args), 6):
        kind = args[i]
        lr, min_lr = float(args[i + 1]), float(args[i + 2])
        warmup, steps, decay = int(args[i + 3]), int(args[i + 4]), int(args[i + 5])
        a = chained(kind, lr, min_lr, warmup, steps, decay)
        b = with_lambda(kind, lr, min_lr, warmup, steps, decay)
        for x, y in zip(a, b):
            print("%.17g %.17g" % (x, y))

if __name__ == "__main__":
    main()
