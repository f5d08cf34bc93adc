"""Train a small character-level RWKV-7 ("Goose", x070), let it write, then state-tune it.

Three parts, on English text that ships with Python (the help topics of ``pydoc_data``, else
the interpreter's LICENSE file), so nothing is downloaded:

1. **Training**: ``tipad_transforms.nn.RWKV7`` (RWKV-LM's x070 names and init; the WKV-7
   recurrence is ``tipad_transforms.ops.wkv7``) on random windows; a table of the training and
   held-out losses (nats per character).
2. **Generation** with ``tipad_transforms.nn.generate`` on the trained model's recurrent form
   (``model.recurrent()``, a snapshot of its weights laid out for one-token steps): the prompt
   in one parallel call, then one character at a time with the state carried (RNN mode),
   reproducible with a seeded ``torch.Generator``.
3. **State tuning**: the model frozen, only its initial state is trained (one ``(H, N, N)``
   WKV matrix per layer, RWKV-LM's ``time_state``), here to make it write in CAPITALS. The
   gradient reaches the initial state through ``ops.wkv7``'s state gradient. The held-out loss
   on capitalised text before and after, and a sample from the tuned state.

    python examples/train_rwkv7_char.py            # each part stops after 120 s (--max-seconds)
    python examples/train_rwkv7_char.py --quick    # a few seconds: the smoke test
    python examples/train_rwkv7_char.py --bf16 --grad-cp   # as RWKV-LM trains: bfloat16
                                                           # autocast, activation checkpointing

Runs on CUDA when there is one (``--device`` to choose).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tipad_transforms.nn import RWKV7, RWKV7BlockState, generate


def load_text() -> str:
    """English text from the Python installation: pydoc's help topics, else the LICENSE."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions leave pydoc_data out
        return (Path(argparse.__file__).parent / "LICENSE.txt").read_text(encoding="utf-8")
    return "\n".join(topics[k] for k in sorted(topics))


def windows(data: torch.Tensor, batch: int, ctx: int, g: torch.Generator) -> torch.Tensor:
    """``(batch, ctx + 1)`` random windows: inputs ``[:, :-1]``, targets ``[:, 1:]``."""
    start = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
    return torch.stack([data[s : s + ctx + 1] for s in start.tolist()])


# --bf16: the forward passes run under bfloat16 autocast (the weights stay float32; the WKV-7
# recurrence and its state too), as RWKV-LM trains.
AUTOCAST = {"enabled": False}


def loss_of(model: RWKV7, batch: torch.Tensor, state: list[RWKV7BlockState] | None = None):
    with torch.autocast(batch.device.type, dtype=torch.bfloat16, **AUTOCAST):
        if state is None:
            logits = model(batch[:, :-1])
        else:
            logits, _ = model(batch[:, :-1], state)
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())


class TunedState(nn.Module):
    """A trainable initial state: one WKV-7 matrix ``(H, N, N)`` per layer, zeros at first
    (the model's own start); the token-shift states stay zero."""

    def __init__(self, model: RWKV7) -> None:
        super().__init__()
        start = model.init_state(1)
        self.wkv = nn.ParameterList(nn.Parameter(s.att.wkv[0].clone()) for s in start)
        self.model = [model]  # a list: not a submodule, so its weights are not ours

    def forward(self, batch_size: int) -> list[RWKV7BlockState]:
        """The state for ``batch_size`` sequences, every one starting from the tuned matrices."""
        start = self.model[0].init_state(batch_size)
        return [
            s._replace(att=s.att._replace(wkv=w.expand(batch_size, *w.shape)))
            for s, w in zip(start, self.wkv, strict=True)
        ]


def train(
    params: list[nn.Parameter],
    step_loss: Callable[[], torch.Tensor],
    evaluate: Callable[[], float],
    *,
    steps: int,
    lr: float,
    max_seconds: float,
    tokens_per_step: int,
) -> None:
    """Adam with a cosine decay to a tenth of ``lr``; prints a row about 12 times."""
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.99))
    every = max(steps // 12, 5)
    print(f"{'step':>6} {'train loss':>11} {'held-out':>9} {'chars/s':>9} {'elapsed':>8}")
    print(f"{0:>6} {'':>11} {evaluate():>9.3f} {'':>9} {0:>7.1f}s")
    start = last = time.perf_counter()
    running, seen, step = 0.0, 0, 0
    while step < steps and time.perf_counter() - start < max_seconds:
        for group in opt.param_groups:
            group["lr"] = lr * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        loss = step_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        running, seen = running + loss.item(), seen + 1
        now = time.perf_counter()
        if step % every == 0 or step == steps or now - last > max_seconds / 12:
            rate = seen * tokens_per_step / (now - last)
            print(
                f"{step:>6} {running / seen:>11.3f} {evaluate():>9.3f} {rate:>9.0f} "
                f"{now - start:>7.1f}s"
            )
            running, seen, last = 0.0, 0, time.perf_counter()
    if step < steps:
        print(f"stopped at the time limit (--max-seconds {max_seconds:g})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=800, help="training steps (at most)")
    p.add_argument("--tune-steps", type=int, default=150, help="state-tuning steps (at most)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="time limit of each part")
    p.add_argument("--quick", action="store_true", help="a tiny run for tests (a few seconds)")
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--head-size", type=int, default=32)
    p.add_argument("--ctx", type=int, default=64, help="training window (characters)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--tune-lr", type=float, default=0.1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sample-length", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (small ops: 1)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forwards")
    p.add_argument(
        "--grad-cp", action="store_true", help="activation checkpointing (RWKV-LM's --grad_cp 1)"
    )
    args = p.parse_args(argv)
    AUTOCAST["enabled"] = args.bf16
    torch.set_num_threads(args.threads)
    if args.quick:
        args.steps, args.tune_steps, args.sample_length = 30, 10, 80
        args.n_embd, args.head_size, args.ctx, args.batch = 32, 16, 32, 12

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    text = load_text()
    chars = sorted(set(text) | set(text.upper()))
    stoi = {c: i for i, c in enumerate(chars)}

    def encode(s: str) -> torch.Tensor:
        return torch.tensor([stoi[c] for c in s], dtype=torch.long)

    data = encode(text)
    split = int(0.9 * len(data))
    train_data, held_out = data[:split], data[split:]
    val_batch = windows(held_out, 32, args.ctx, g).to(args.device)

    model = RWKV7(len(chars), args.n_embd, args.n_layer, head_size=args.head_size)
    model = model.to(args.device)
    model.grad_checkpointing = args.grad_cp
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{len(text):,} characters ({len(chars)} distinct) from the Python installation; "
        f"RWKV-7, {n_params:,} parameters ({args.n_layer} layers x {args.n_embd}, heads of "
        f"{args.head_size}) on {args.device}"
        + (", bfloat16 autocast" if args.bf16 else "")
        + (", activation checkpointing" if args.grad_cp else "")
        + "\n\n1. training"
    )

    def evaluate() -> float:
        with torch.no_grad():
            return float(loss_of(model, val_batch))

    train(
        list(model.parameters()),
        lambda: loss_of(model, windows(train_data, args.batch, args.ctx, g).to(args.device)),
        evaluate,
        steps=args.steps,
        lr=args.lr,
        max_seconds=args.max_seconds,
        tokens_per_step=args.batch * args.ctx,
    )

    prompt = encode("The ")[None].to(args.device)
    # The weights do not change from here on (state tuning trains the initial state only):
    # one snapshot serves both samples.
    rec = model.recurrent()
    sample = generate(
        rec, prompt, args.sample_length, temperature=0.8, top_p=0.95,
        generator=torch.Generator(device=args.device).manual_seed(args.seed),
    )  # fmt: skip
    print(f"\n2. sample (RNN mode, temperature 0.8, top-p 0.95):\n{'-' * 60}")
    print("The " + "".join(chars[i] for i in sample[0].tolist()))
    print("-" * 60)

    # 3. State tuning: the same frozen model, only the initial state learns, on capitals.
    model.requires_grad_(False)
    upper = encode(text.upper())
    tune_train, tune_held_out = upper[:split], upper[split:]
    tune_val = windows(tune_held_out, 32, args.ctx, g).to(args.device)
    tuned = TunedState(model).to(args.device)
    n_state = sum(p.numel() for p in tuned.parameters())
    print(f"\n3. state tuning on CAPITALISED text: {n_state:,} numbers trained, the model frozen")

    def evaluate_tuned() -> float:
        with torch.no_grad():
            return float(loss_of(model, tune_val, tuned(tune_val.shape[0])))

    def tune_loss() -> torch.Tensor:
        batch = windows(tune_train, args.batch, args.ctx, g).to(args.device)
        return loss_of(model, batch, tuned(batch.shape[0]))

    train(
        list(tuned.parameters()),
        tune_loss,
        evaluate_tuned,
        steps=args.tune_steps,
        lr=args.tune_lr,
        max_seconds=args.max_seconds,
        tokens_per_step=args.batch * args.ctx,
    )
    sample = generate(
        rec, prompt, args.sample_length, temperature=0.8, top_p=0.95,
        generator=torch.Generator(device=args.device).manual_seed(args.seed), state=tuned(1),
    )  # fmt: skip
    print(f"\nsample from the tuned state (same prompt, same seed):\n{'-' * 60}")
    print("The " + "".join(chars[i] for i in sample[0].tolist()))
    print("-" * 60)


if __name__ == "__main__":
    main()
