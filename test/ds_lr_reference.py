#!/usr/bin/env python3
"""DeepSpeed's learning-rate schedulers, written again from deepspeed/runtime/lr_schedules.py and
driven the way DeepSpeed's engine drives them, to check the trainer's per-step "lr" (its JSON log).

  ds_lr_reference.py check LOG TYPE key=value...   compare LOG's lr at every step with the reference
  ds_lr_reference.py print TYPE steps=N key=value... print the reference lrs

TYPE is WarmupLR, WarmupDecayLR or WarmupCosineLR; keys are the scheduler's params
(warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, total_num_steps, warmup_min_ratio,
cos_min_ratio) and lr (the optimizer's, which WarmupCosineLR scales). The trainer keeps these as
float32, so they are rounded to float32 first; the comparison allows 1e-6 relative.

The engine: the scheduler is built (last_batch_iteration = -1), which sets the optimizer's lr;
each optimizer step runs with the optimizer's current lr, then scheduler.step() (not after an
fp16 overflow, which these fp32 runs never have).
"""
import json, math, struct, sys


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


class WarmupLR:
    def __init__(self, lr, warmup_min_lr=0.0, warmup_max_lr=0.001, warmup_num_steps=1000, warmup_type="log"):
        self.min_lr, self.max_lr = warmup_min_lr, warmup_max_lr
        self.delta = self.max_lr - self.min_lr
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.warmup_type = warmup_type
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.last_batch_iteration = -1
        self.lr = self.get_lr()  # the constructor sets the optimizer's lr

    def get_lr(self):
        if self.last_batch_iteration < 0:
            return self.min_lr
        return self.min_lr + self.delta * self._get_gamma()

    def _warmup_gamma(self):
        if self.warmup_type == "log":
            return self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
        return self.last_batch_iteration / self.warmup_num_steps

    def _get_gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_gamma()
        return 1.0

    def step(self):
        self.last_batch_iteration += 1
        self.lr = self.get_lr()


class WarmupDecayLR(WarmupLR):
    def __init__(self, lr, total_num_steps, **kw):
        self.total_num_steps = total_num_steps
        super().__init__(lr, **kw)

    def _get_gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_gamma()
        return max(0.0, float(self.total_num_steps - self.last_batch_iteration) /
                   float(max(1.0, self.total_num_steps - self.warmup_num_steps)))


class WarmupCosineLR:
    def __init__(self, lr, total_num_steps, warmup_min_ratio=0.0, warmup_num_steps=1000, cos_min_ratio=0.0001,
                 warmup_type="log"):
        self.total_num_steps = total_num_steps
        self.last_batch_iteration = -1
        self.cos_min_ratio = cos_min_ratio
        self.warmup_type = warmup_type
        self.warmup_min_ratio = warmup_min_ratio
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.org_lr = lr  # read before the constructor overwrites the optimizer's lr
        self.lr = self.get_lr()

    def get_lr_ratio(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            if self.warmup_type == "log":
                ratio = self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
            else:
                ratio = self.last_batch_iteration / self.warmup_num_steps
            return self.warmup_min_ratio + ratio * (1.0 - self.warmup_min_ratio)
        real_last_step = self.last_batch_iteration - self.warmup_num_steps + 1
        real_total_steps = self.total_num_steps - self.warmup_num_steps
        ratio = (1 + math.cos(math.pi * real_last_step / real_total_steps)) / 2
        return max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)

    def get_lr(self):
        if self.last_batch_iteration < 0:
            return 0.0
        return self.org_lr * self.get_lr_ratio()

    def step(self):
        self.last_batch_iteration += 1
        self.lr = self.get_lr()


def reference(kind, steps, params):
    p = dict(params)
    lr = f32(p.pop("lr", 0.001))
    for k in ("warmup_min_lr", "warmup_max_lr", "warmup_min_ratio", "cos_min_ratio"):
        if k in p:
            p[k] = f32(p[k])
    for k in ("warmup_num_steps", "total_num_steps"):
        if k in p:
            p[k] = int(p[k])
    sched = {"WarmupLR": WarmupLR, "WarmupDecayLR": WarmupDecayLR, "WarmupCosineLR": WarmupCosineLR}[kind](lr, **p)
    out = []
    for _ in range(steps):
        out.append(sched.lr)  # this optimizer step's lr
        sched.step()
    return out


def parse_params(args):
    params = {}
    for a in args:
        k, v = a.split("=", 1)
        params[k] = v if k == "warmup_type" else float(v)
    return params


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        log, kind, params = sys.argv[2], sys.argv[3], parse_params(sys.argv[4:])
        got = {}
        for line in open(log):
            o = json.loads(line)
            if "lr" in o and "loss" in o:
                got[o["step"]] = o["lr"]
        steps = max(got)
        if sorted(got) != list(range(1, steps + 1)):
            sys.exit(f"{log}: steps {sorted(got)} are not 1..{steps}")
        want = reference(kind, steps, params)
        worst = 0.0
        bad = []
        for s in range(1, steps + 1):
            w, g = want[s - 1], got[s]
            err = abs(g - w) / max(abs(w), 1e-30) if w != 0.0 else abs(g)
            worst = max(worst, err)
            if err > 1e-6:
                bad.append(f"step {s}: trainer {g!r}, DeepSpeed {w!r}")
        print(f"{kind} {' '.join(sys.argv[4:])}: {steps} steps, worst relative difference {worst:.2e}")
        if bad:
            print("\n".join(bad[:10]))
            sys.exit(1)
    elif len(sys.argv) >= 3 and sys.argv[1] == "print":
        kind = sys.argv[2]
        params = parse_params(sys.argv[3:])
        steps = int(params.pop("steps"))
        for s, lr in enumerate(reference(kind, steps, params), 1):
            print(s, repr(lr))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
