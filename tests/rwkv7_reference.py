"""An independent float64 reference of RWKV-7 (x070), written from the equations.

Token by token, head by head, with the state as an explicit ``N x N`` matrix ``S[value, key]``:
no ``ops.wkv7``, no module of the package. ``p`` is a state dict (any dtype; used in float64)
with the x070 checkpoint names.
"""

from __future__ import annotations

import math

import torch

P = dict[str, torch.Tensor]


def randomise(m: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Move every parameter of the module under test off its init (several start at zero), so
    a swapped or unused one shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return m


def step_layout(m: torch.nn.Module) -> torch.nn.Module:
    """Store every widening ``nn.Linear`` weight (``out > in``) of ``m`` as the transpose of a
    row-major ``(in, out)`` tensor (same shape and values), the layout the recurrent form's
    one-token step reads (``nn/_recurrent.py``; 0.5.2 kept the parameters themselves so). The
    snapshot of such a weight is then a view of it, so the module path and the step read the
    same memory and round alike: what the tests comparing them bit for bit need. The default,
    contiguous layout is tested in tests/nn/test_layout.py."""
    for lin in m.modules():
        if type(lin) is torch.nn.Linear and lin.out_features > lin.in_features:
            w = lin.weight
            lin.weight = torch.nn.Parameter(
                w.detach().t().contiguous().t(), requires_grad=w.requires_grad
            )
    return m


def params64(m: torch.nn.Module) -> P:
    return {k: v.detach().double() for k, v in m.state_dict().items()}


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def time_mix(
    p: P, x: torch.Tensor, v_first: torch.Tensor | None, layer_id: int, head_size: int,
    shift: torch.Tensor | None = None, wkv: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``x`` ``(B, T, C)`` -> ``(out, v_first, last x, final S (B, H, N, N))``."""
    b, t, c = x.shape
    n = head_size
    h = c // n
    prev = torch.zeros(b, c, dtype=x.dtype) if shift is None else shift
    start = torch.zeros(b, h, n, n, dtype=x.dtype) if wkv is None else wkv
    s = [[start[bi, hi] for hi in range(h)] for bi in range(b)]  # lists: autograd-friendly
    outs, vs = [], []
    for i in range(t):
        xt = x[:, i]
        xx = prev - xt
        prev = xt

        def mixed(name: str, xt: torch.Tensor = xt, xx: torch.Tensor = xx) -> torch.Tensor:
            return xt + xx * p["x_" + name].reshape(c)

        r = mixed("r") @ p["receptance.weight"].T
        k = mixed("k") @ p["key.weight"].T
        v = mixed("v") @ p["value.weight"].T
        lora_w = torch.tanh(mixed("w") @ p["w1"]) @ p["w2"]
        decay = torch.exp(-math.exp(-0.5) / (1 + torch.exp(-(p["w0"].reshape(c) + lora_w))))
        iclr = torch.sigmoid(p["a0"].reshape(c) + (mixed("a") @ p["a1"]) @ p["a2"])
        gate = torch.sigmoid(mixed("g") @ p["g1"]) @ p["g2"]
        if layer_id == 0:
            vs.append(v)
        else:
            mix = torch.sigmoid(p["v0"].reshape(c) + (mixed("v") @ p["v1"]) @ p["v2"])
            v = v + (v_first[:, i] - v) * mix
            vs.append(v_first[:, i])
        kk = (k * p["k_k"].reshape(c)).view(b, h, n)
        kk = kk / kk.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        k = k * (1 + (iclr - 1) * p["k_a"].reshape(c))
        rh, kh, vh = r.view(b, h, n), k.view(b, h, n), v.view(b, h, n)
        ah, bh = -kk, kk * iclr.view(b, h, n)
        rows = []
        for bi in range(b):
            heads = []
            for hi in range(h):
                m = s[bi][hi]
                m = (
                    m @ torch.diag(decay.view(b, h, n)[bi, hi])
                    + torch.outer(m @ ah[bi, hi], bh[bi, hi])
                    + torch.outer(vh[bi, hi], kh[bi, hi])
                )
                s[bi][hi] = m
                heads.append(m @ rh[bi, hi])
            rows.append(torch.stack(heads))
        y = torch.stack(rows)
        mean = y.mean(-1, keepdim=True)
        var = ((y - mean) ** 2).mean(-1, keepdim=True)
        y = ((y - mean) / torch.sqrt(var + 64e-5)).reshape(b, c) * p["ln_x.weight"] + p["ln_x.bias"]
        bonus = (rh * kh * p["r_k"]).sum(-1, keepdim=True) * vh
        outs.append(((y + bonus.reshape(b, c)) * gate) @ p["output.weight"].T)
    empty = x.new_zeros(b, 0, c)
    out = torch.stack(outs, 1) if outs else empty
    final = torch.stack([torch.stack(row) for row in s])
    return out, (torch.stack(vs, 1) if vs else empty), prev, final


def channel_mix(p: P, x: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    prev = torch.zeros_like(x[:, 0]) if shift is None else shift
    xx = torch.cat([prev[:, None], x[:, :-1]], 1) - x
    k = torch.relu((x + xx * p["x_k"]) @ p["key.weight"].T) ** 2
    return k @ p["value.weight"].T


def sub(p: P, prefix: str) -> P:
    return {k[len(prefix) :]: v for k, v in p.items() if k.startswith(prefix)}


def block(
    p: P, x: torch.Tensor, v_first: torch.Tensor | None, layer_id: int, head_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    if layer_id == 0:
        x = layer_norm(x, p["ln0.weight"], p["ln0.bias"])
    a, v_first, _, _ = time_mix(
        sub(p, "att."), layer_norm(x, p["ln1.weight"], p["ln1.bias"]), v_first, layer_id,
        head_size,
    )  # fmt: skip
    x = x + a
    return x + channel_mix(sub(p, "ffn."), layer_norm(x, p["ln2.weight"], p["ln2.bias"])), v_first


def model(p: P, idx: torch.Tensor, n_layer: int, head_size: int) -> torch.Tensor:
    """Logits ``(B, T, V)`` of the x070 model in ``p`` for ``idx`` ``(B, T)``."""
    x = p["emb.weight"][idx]
    v_first = None
    for i in range(n_layer):
        x, v_first = block(sub(p, f"blocks.{i}."), x, v_first, i, head_size)
    return layer_norm(x, p["ln_out.weight"], p["ln_out.bias"]) @ p["head.weight"].T


def x070_keys(n: int, c: int, h: int, lora: dict[str, int], dim_ffn: int) -> dict[str, tuple]:
    """``blocks.n.*`` of an x070 checkpoint as RWKV-LM saves it: order and shapes."""
    pre = f"blocks.{n}."
    keys: dict[str, tuple] = {
        pre + "ln1.weight": (c,), pre + "ln1.bias": (c,),
        pre + "ln2.weight": (c,), pre + "ln2.bias": (c,),
    }  # fmt: skip
    if n == 0:
        keys |= {pre + "ln0.weight": (c,), pre + "ln0.bias": (c,)}
    att = pre + "att."
    keys |= {att + "x_" + m: (1, 1, c) for m in "rwkvag"}
    for m in "wavg":
        keys |= {att + m + "1": (c, lora[m]), att + m + "2": (lora[m], c)}
        if m != "g":
            keys[att + m + "0"] = (1, 1, c)
    keys |= {att + "k_k": (1, 1, c), att + "k_a": (1, 1, c), att + "r_k": (h, c // h)}
    keys |= {att + name + ".weight": (c, c) for name in ("receptance", "key", "value", "output")}
    keys |= {att + "ln_x.weight": (c,), att + "ln_x.bias": (c,)}
    return keys | {
        pre + "ffn.x_k": (1, 1, c),
        pre + "ffn.key.weight": (dim_ffn, c),
        pre + "ffn.value.weight": (c, dim_ffn),
    }
