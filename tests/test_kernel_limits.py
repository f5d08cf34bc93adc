"""The kernels at the edges of their index range: canvases near 2**31 elements, empty outputs
with huge paddings. Big tensors are uint8 (about 2 GB), one alive at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_EMPTY_OUTPUT = """
import resource, sys, torch
# 6 GB of address space: the index maps of a 2**30 reflect padding alone took 16 GB.
resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))
from tipad_transforms import _runtime, ops
none = torch.empty(0)
big = [0, 0, 2**30, 2**30]
for route, mode in [(r, m) for r in ("kernel", "torch") for m in ("reflect", "circular")]:
    if route == "torch":
        _runtime.refusal = lambda device: "refused by test_kernel_limits"
    x = torch.zeros(0, 3, 4, 4, requires_grad=True)
    index = torch.zeros(0, dtype=torch.int32)
    out = ops.pad(x, big, mode, none, none, torch.zeros(0, 2, dtype=torch.int32), index, 0)
    assert out.shape == (0, 3, 4 + 2**30, 4 + 2**30), out.shape
    out.sum().backward()
    assert x.grad.shape == x.shape
    sizes = torch.tensor([[4, 4, 0, 0]] * 0, dtype=torch.int64).reshape(0, 4)
    stacked = ops.pad_stack(none, sizes, [3, 2**30, 2**30], mode, none, none,
                            torch.zeros(0, 2, dtype=torch.int32), index, 0)
    assert stacked.shape == (0, 3, 2**30, 2**30)
    zero_channels = ops.pad(torch.zeros(1, 0, 4, 4), big, mode, none, none,
                            torch.zeros(1, 2, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), 0)
    assert zero_channels.shape == (1, 0, 4 + 2**30, 4 + 2**30)
print("ok")
"""


def test_empty_output_with_huge_padding_allocates_nothing() -> None:
    # Kernel and torch route, in a subprocess so the address-space limit spares the session.
    env = dict(os.environ, PYTHONPATH=_ROOT, PYTHONWARNINGS="ignore")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EMPTY_OUTPUT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
