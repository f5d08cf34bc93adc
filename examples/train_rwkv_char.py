"""Train a small character-level RWKV-4 language model, then let it write in RNN mode.

The model is RWKV-4's: an embedding, a stack of ``tipad_transforms.RWKVBlock`` (layer 0 holds
``ln0``), ``ln_out`` and a linear head, with RWKV-4 checkpoint names (``emb``, ``blocks.N``,
``ln_out``, ``head``). It trains on random windows of English text that ships with Python (the
help topics of ``pydoc_data``, else the interpreter's LICENSE file), so nothing is downloaded.
Generation builds the state from a prompt in one parallel call, then feeds one character at a
time with the state carried: the RNN mode RWKV is known for. (``tipad_transforms.nn.RWKV4`` is
this model ready-made, with ``model.recurrent()`` for fast generation; the blocks are spelled
out here to show the layers' calls.)

    python examples/train_rwkv_char.py            # about 2-3 minutes on a 2-core CPU
    python examples/train_rwkv_char.py --quick    # a few seconds: the smoke test
    python examples/train_rwkv_char.py --steps 5000 --max-seconds 900 --n-embd 256 --n-layer 4

Runs on CUDA when there is one (``--device`` to choose). Prints a table of the training and
held-out losses (nats per character) and a sample.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tipad_transforms import RWKVBlock
from tipad_transforms.nn import BlockState


def load_text() -> str:
    """English text from the Python installation: pydoc's help topics, else the LICENSE."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions leave pydoc_data out
        return (Path(argparse.__file__).parent / "LICENSE.txt").read_text(encoding="utf-8")
    return "\n".join(topics[k] for k in sorted(topics))


class CharRWKV(nn.Module):
    """Embedding -> RWKVBlock x n_layer -> ln_out -> head: RWKV-4's model and state-dict names."""

    def __init__(self, vocab_size: int, n_embd: int, n_layer: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, n_embd)
        self.blocks = nn.ModuleList(
            RWKVBlock(n_embd, layer_id=i, n_layer=n_layer) for i in range(n_layer)
        )
        self.ln_out = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def init_state(self, batch_size: int) -> list[BlockState]:
        return [block.init_state(batch_size) for block in self.blocks]

    def forward(
        self, idx: torch.Tensor, state: list[BlockState] | None = None
    ) -> tuple[torch.Tensor, list[BlockState] | None]:
        """``idx`` ``(B, T)`` int64 -> logits ``(B, T, vocab_size)`` and the state after it."""
        x = self.emb(idx)
        if state is None:
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_out(x)), None
        new_state = []
        for block, s in zip(self.blocks, state, strict=True):
            x, s = block(x, s)
            new_state.append(s)
        return self.head(self.ln_out(x)), new_state


def windows(data: torch.Tensor, batch: int, ctx: int, g: torch.Generator) -> torch.Tensor:
    """``(batch, ctx + 1)`` random windows: inputs ``[:, :-1]``, targets ``[:, 1:]``."""
    start = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
    return torch.stack([data[s : s + ctx + 1] for s in start.tolist()])


@torch.no_grad()
def generate(
    model: CharRWKV, prompt: torch.Tensor, length: int, temperature: float, g: torch.Generator
) -> list[int]:
    """Sample ``length`` characters after ``prompt`` ``(T,)``, one at a time with the state."""
    logits, state = model(prompt[None], model.init_state(1))  # the prompt in one parallel call
    out = []
    for _ in range(length):
        probs = torch.softmax(logits[0, -1].float() / temperature, dim=-1)
        token = int(torch.multinomial(probs.cpu(), 1, generator=g))
        out.append(token)
        logits, state = model(prompt.new_tensor([[token]]), state)  # RNN mode: one token
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1200, help="optimizer steps (at most)")
    p.add_argument("--max-seconds", type=float, default=150.0, help="stop training after this")
    p.add_argument("--quick", action="store_true", help="a tiny run for tests (~5 s)")
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--ctx", type=int, default=64, help="training window (characters)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sample-length", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads; the model's ops are small, and on a busy 2-core machine one "
        "thread ran a step 9x faster than two (threads waiting on each other)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.steps, args.n_embd, args.ctx, args.batch, args.sample_length = 40, 48, 32, 16, 80

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    text = load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, held_out = data[:split], data[split:]
    val_batch = windows(held_out, 32, args.ctx, g).to(args.device)

    model = CharRWKV(len(chars), args.n_embd, args.n_layer).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.99))
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{len(text):,} characters ({len(chars)} distinct) from the Python installation; "
        f"{n_params:,} parameters ({args.n_layer} layers x {args.n_embd}) on {args.device}"
    )

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            logits, _ = model(val_batch[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), val_batch[:, 1:].flatten())
        model.train()
        return float(loss)

    every = max(args.steps // 12, 5)
    print(f"{'step':>6} {'train loss':>11} {'held-out':>9} {'chars/s':>9} {'elapsed':>8}")
    print(f"{0:>6} {'':>11} {evaluate():>9.3f} {'':>9} {0:>7.1f}s")
    start = last = time.perf_counter()
    running, seen, step = 0.0, 0, 0
    while step < args.steps and time.perf_counter() - start < args.max_seconds:
        # Cosine decay to a tenth of the learning rate over the planned steps.
        lr = args.lr * (0.55 + 0.45 * math.cos(math.pi * step / args.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        batch = windows(train, args.batch, args.ctx, g).to(args.device)
        logits, _ = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        running, seen = running + loss.item(), seen + 1
        now = time.perf_counter()
        # A row every `every` steps, or sooner where the time limit rules (a slow machine).
        if step % every == 0 or step == args.steps or now - last > args.max_seconds / 12:
            rate = seen * args.batch * args.ctx / (now - last)
            print(
                f"{step:>6} {running / seen:>11.3f} {evaluate():>9.3f} {rate:>9.0f} "
                f"{now - start:>7.1f}s"
            )
            running, seen, last = 0.0, 0, time.perf_counter()
    if step < args.steps:
        print(f"stopped at the time limit (--max-seconds {args.max_seconds:g})")

    prompt = "The "
    sample = generate(
        model,
        torch.tensor([stoi[c] for c in prompt], device=args.device),
        args.sample_length,
        temperature=0.8,
        g=g,
    )
    print(f"\nsample (RNN mode, one character at a time, temperature 0.8):\n{'-' * 60}")
    print(prompt + "".join(chars[i] for i in sample))
    print("-" * 60)


if __name__ == "__main__":
    main()
