"""One-token generation with RWKV-7 on the CPU: tipad's ``RWKV7`` against BlinkDL's ``rwkv``.

    python benchmarks/rwkv7_generate.py [--quick] [--threads 1] [--repeats 7] [--out out/bench]

The model of the released 0.1B x070 (vocabulary 65536, 12 layers, 768 wide, heads of 64; LoRA
widths 64/64/32/128) with random weights rounded to bfloat16 as released files are, run one
token at a time from a state built by a few tokens: its recurrent form
(``model.recurrent()(idx (1, 1), state)``, what ``generate`` runs) against the package's
``RWKV(..., strategy="cpu fp32").forward([token], state)`` (``RWKV_V7_ON=1``, its TorchScript
path), and the module path ``model(idx, state)`` beside them. Before timing, each runs the
same tokens and their logits are compared. Each timed call starts from the same state (the
package's list is copied, its tensors are not written in place), so every call is the same
work. Target (issue 10): tipad's recurrent form no slower per token.
Writes ``<out>/rwkv7_generate.json``. Without the package installed, only tipad is timed.
``--quick``: a 2-layer, 128-wide model (a smoke run, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from _common import Peer, format_ms, format_table, machine_info, measure, write_json

from tipad_transforms.nn import RWKV7


def random_model(vocab: int, n_embd: int, n_layer: int, seed: int) -> RWKV7:
    """The architecture with small random weights, rounded to bfloat16 (built on the meta
    device first: the init of a 0.19B model would cost more than the run)."""
    with torch.device("meta"):
        model = RWKV7(vocab, n_embd, n_layer)
    model = model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((0.02 * torch.randn(p.shape, generator=g)).bfloat16().float())
    return model.eval()


def load_package(model: RWKV7, tmp: Path) -> Any | None:
    """The ``rwkv`` package's RWKV-7 on the same weights, or None when it is not installed."""
    os.environ["RWKV_V7_ON"] = "1"
    os.environ["RWKV_CUDA_ON"] = "0"
    try:
        from rwkv.model import RWKV
    except ImportError:
        return None
    torch.save(model.state_dict(), tmp / "model.pth")
    return RWKV(str(tmp / "model"), strategy="cpu fp32")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    vocab, n_embd, n_layer = (1000, 128, 2) if args.quick else (65536, 768, 12)
    model = random_model(vocab, n_embd, n_layer, seed=0)
    prompt = torch.randint(0, vocab, (8,), generator=torch.Generator().manual_seed(1)).tolist()

    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        theirs = load_package(model, Path(tmp))
        rec = model.recurrent()
        ours_state, module_state = rec.init_state(1), model.init_state(1)
        ours_logits = []
        for token in prompt:
            logits, ours_state = rec(torch.tensor([[token]]), ours_state)
            module_logits, module_state = model(torch.tensor([[token]]), module_state)
            gap = float((module_logits - logits).abs().max() / logits.abs().max())
            if gap > 1e-5:
                sys.exit(f"the recurrent form's logits differ from the model's: {gap:.2e}")
            ours_logits.append(logits[0, 0])
        check = "rwkv package not installed: tipad timed alone"
        peers = [
            Peer("tipad", "tipad RWKV7 recurrent",
                 lambda: rec(torch.tensor([[5]]), ours_state)[0], "tipad"),
            Peer("tipad-module", "tipad RWKV7 model(idx, state)",
                 lambda: model(torch.tensor([[5]]), module_state)[0], "tipad-module"),
        ]  # fmt: skip
        if theirs is not None:
            their_state = None
            worst = 0.0
            for token, mine in zip(prompt, ours_logits, strict=True):
                logits, their_state = theirs.forward([token], their_state)
                worst = max(worst, float((logits - mine).abs().max() / mine.abs().max()))
            if worst > 1e-4:
                sys.exit(f"logits differ from the rwkv package's: {worst:.2e} relative")
            check = f"logits of {len(prompt)} tokens equal to the package's within {worst:.1e}"
            state0 = list(their_state)
            label = "rwkv package cpu fp32"
            peers.append(Peer("rwkv", label, lambda: theirs.forward([5], list(state0))[0], "rwkv"))
        print(f"RWKV-7 {n_layer} x {n_embd}, vocab {vocab}, {args.threads} thread(s): {check}")
        results = measure(peers, repeats=args.repeats, warmup=2, min_sample_s=0.2)

    rows = [[m.peer.label, format_ms(m.stats.median_s), format_ms(m.stats.min_s)] for m in results]
    print(format_table(["per token", "median", "min"], rows, right="12"))
    ratio = None
    if len(results) == 3:
        ratio = results[2].stats.median_s / results[0].stats.median_s
        verdict = "MET" if ratio >= 1 else "MISSED"
        print(f"target: tipad no slower than the package per token: {ratio:.2f}x -> {verdict}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(
        args.out / "rwkv7_generate.json",
        {
            "model": {"vocab": vocab, "n_embd": n_embd, "n_layer": n_layer},
            "threads": args.threads,
            "check": check,
            "speedup_vs_package": ratio,
            "peers": [m.to_json() for m in results],
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()
