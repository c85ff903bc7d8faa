#!/usr/bin/env python3
"""The step-time model's tables in docs/scaling.md, printed as markdown from `--plan --time --json`.

  scripts/scaling_tables.py [TRAINER]      (default ./train_gpt_cpu; arithmetic only, a few seconds)
"""
import json, subprocess, sys

TRAINER = sys.argv[1] if len(sys.argv) > 1 else "./train_gpt_cpu"
SHAPES = {"GPT-2 124M (d12)": ["--model", "d12"], "GPT-2 1.5B (d48)": ["--model", "d48"],
          "6.7B (L=32, C=4096)": ["--layers", "32", "--channels", "4096", "--heads", "32", "--max-seq-len", "1024"]}

def t(*args):
    r = subprocess.run([TRAINER, "--plan", "--time", "--json", *args], capture_output=True, text=True)
    if r.returncode: sys.exit(f"{' '.join(args)}: {r.stderr.strip()}")
    return json.loads(r.stdout)

def overlap(p):
    return f"{100 * (1 - p['exposed_comm_ms'] / p['comm_ms']):.0f}%" if p["comm_ms"] > 0 else "-"

def zero3_table(hw, shape, batch):
    print(f"\n{shape} on {hw}, bf16, B={batch} x T=1024 per GPU, 8 GPUs per node:\n")
    print("| GPUs, network | ZeRO-1 step | ZeRO-3 step | ZeRO-3 / ZeRO-1 | ZeRO-3 collectives (work) | exposed | overlap |")
    print("|---|---|---|---|---|---|---|")
    for world, net in [(8, "ib-400"), (64, "ib-400"), (64, "eth-100"), (1024, "ib-400"), (1024, "eth-100")]:
        args = ["--hardware", hw, *SHAPES[shape], "--precision", "bf16", "--world", str(world), "--batch", str(batch),
                "--seq-len", "1024", "--network", net]
        z1, z3 = t(*args, "--zero-stage", "1"), t(*args, "--zero-stage", "3")
        where = "NVLink" if world == 8 else {"ib-400": "InfiniBand 400 Gb/s per GPU", "eth-100": "Ethernet 100 Gb/s per node"}[net]
        print(f"| {world}, {where} | {z1['step_ms']:.0f} ms | {z3['step_ms']:.0f} ms | {z3['step_ms'] / z1['step_ms']:.2f} | "
              f"{z3['comm_work_ms']:.0f} ms | {z3['exposed_comm_ms']:.0f} ms | {overlap(z3)} |")

def offload_table(hw, shape, world, batch):
    print(f"\n{shape} on {world} x {hw}, bf16, ZeRO-2, B={batch} x T=1024 per GPU:\n")
    print("| optimizer state on | step | optimizer (incl. transfers) | of which PCIe + host update / NVMe | MFU |")
    print("|---|---|---|---|---|")
    args = ["--hardware", hw, *SHAPES[shape], "--precision", "bf16", "--world", str(world), "--batch", str(batch),
            "--seq-len", "1024", "--zero-stage", "2"]
    for name, extra in [("the GPU", []), ("the host (ZeRO-Offload)", ["--offload-optimizer", "cpu"]),
                        ("NVMe (ZeRO-Infinity)", ["--offload-optimizer", "nvme"])]:
        p = t(*args, *extra)
        print(f"| {name} | {p['step_ms']:.0f} ms | {p['optim_ms']:.0f} ms | {p['offload_ms']:.0f} ms / "
              f"{p['nvme_ms']:.0f} ms | {100 * p['mfu']:.0f}% |")

def llmc():
    p = t("--hardware", "a100-80gb-sxm", "--model", "d12", "--precision", "bf16", "--zero-stage", "1", "--world", "8",
          "--batch", "64", "--seq-len", "1024")
    print("\nllm.c's GPT-2 124M on 8 x A100 80GB SXM (ZeRO-1, bf16, B=64, T=1024, 524,288 tokens per step):\n")
    print("| | step | forward | backward | optimizer | matmuls | memory-bound | collectives (exposed) | MFU |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| model | {p['step_ms']:.0f} ms | {p['fwd_ms']:.0f} ms | {p['bwd_ms']:.0f} ms | {p['optim_ms']:.1f} ms | "
          f"{p['matmul_ms']:.0f} ms | {p['memory_ms']:.0f} ms | {p['comm_work_ms']:.1f} ms ({p['exposed_comm_ms']:.1f} ms) | "
          f"{100 * p['mfu']:.0f}% |")
    print("| llm.c (its run script's comment) | about 300 ms | | | | | | | |")
    fit = p["matmul_ms"] * 0.75 / (300 - (p["step_ms"] - p["matmul_ms"]))
    print(f"\nThe matmul efficiency that would give 300 ms exactly: {fit:.3f} (the description says 0.75).")

if __name__ == "__main__":
    llmc()
    for hw in ("h100-80gb-sxm", "a100-80gb-sxm"):
        zero3_table(hw, "GPT-2 1.5B (d48)", 8)
    zero3_table("h100-80gb-sxm", "GPT-2 124M (d12)", 8)
    zero3_table("h100-80gb-sxm", "6.7B (L=32, C=4096)", 4)
    offload_table("a100-80gb-sxm", "6.7B (L=32, C=4096)", 8, 4)
    offload_table("h100-80gb-sxm", "GPT-2 1.5B (d48)", 8, 8)
