"""The peers kopt's perf suite measures itself against, each built the way its users build it,
with torch.optim.AdamW's defaults, and what each keeps per element (its layout), so a reader
comparing rates knows what bytes each one moves.

torch keeps its state in the param's dtype: its bf16 run has bf16 m and v and no fp32 master.
DeepSpeedCPUAdam's bf16 path keeps fp32 m and v (fp32_optimizer_states=True) and no master.
kopt's bf16_master rows keep an fp32 master, m and v beside the bf16 param: 28 B per element,
the same as fp32, against 22 B for DeepSpeed and 14 B for torch.
"""
import os

# torch.optim.AdamW's defaults, written out so every peer gets the same.
HYPER = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

IMPLS = ("torch_fused", "torch_foreach", "deepspeed")

# variant -> impl family -> (layout, bytes moved per element: reads + writes)
LAYOUTS = {
    "fp32": {
        "torch": ("fp32 param, grad, m, v", 28),
        "deepspeed": ("fp32 param, grad, m, v", 28),
    },
    "bf16": {
        "torch": ("bf16 param, grad, m, v; no fp32 master", 14),
        "deepspeed": ("bf16 param, grad; fp32 m, v; no fp32 master", 22),
    },
}

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def family(impl):
    return "deepspeed" if impl == "deepspeed" else "torch"


def layout(impl, variant):
    return LAYOUTS[variant][family(impl)]


def set_up_environment(threads):
    """Before torch is imported: OpenMP reads OMP_NUM_THREADS once, at start, and DeepSpeed's op
    runs on the OpenMP runtime torch loads (the same libgomp.so.1). DeepSpeed is told it runs
    on the CPU (no probing for accelerators) and compiles its op into the venv, not $HOME."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import sys

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))


def deepspeed_op():
    """Loads (compiling on first use) DeepSpeed's CPU Adam op; raises with the reason."""
    from deepspeed.ops.op_builder import CPUAdamBuilder

    builder = CPUAdamBuilder()
    builder.load()
    return " ".join(f for f in (builder.cpu_arch(), builder.simd_width()) if f)


def make_optimizer(impl, params):
    import torch

    if impl == "torch_fused":
        return torch.optim.AdamW(params, fused=True, **HYPER)
    if impl == "torch_foreach":
        return torch.optim.AdamW(params, foreach=True, **HYPER)
    if impl == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(params, adamw_mode=True, **HYPER)
    raise ValueError(f"unknown peer '{impl}'")


def probe(impl):
    """None when `impl` imports, builds and steps on a tiny tensor here, else why not."""
    try:
        import torch

        for dtype in (torch.float32, torch.bfloat16):
            # A first Adam step moves each param by about lr, against its grad's sign.
            p = torch.nn.Parameter(torch.full((64,), 2e-3, dtype=dtype))
            p.grad = torch.full_like(p, 0.5)
            opt = make_optimizer(impl, [p])
            opt.step()
            if not bool((abs(p.float() - 1e-3) < 2e-4).all()):
                return f"a step on {dtype} gave {p[0].item()}, not about 1e-3"
            del opt
        return None
    except Exception as e:  # any failure means absent, with its reason; never a crash
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


def versions():
    """Installed versions of the peers' packages, 'not installed' where absent."""
    import importlib.metadata as md

    found = {}
    for name in ("torch", "deepspeed"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "not installed"
    return found
