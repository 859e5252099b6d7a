"""Short Python programs for a saved ``.pt`` design, offered beside the download: one that loads
it (with the designer, or with torch and numpy alone) and runs it as a module, and the one-line
module use on its own."""

from __future__ import annotations

import textwrap

#: Longest file name the snippet will embed.
MAX_FILENAME_CHARS = 255
#: Tokens per side the snippet runs on a machine without a GPU (``impl="reference"``).
CPU_TOKENS = 1024


def check_filename(filename: object) -> str:
    """``filename`` if it is 1 to ``MAX_FILENAME_CHARS`` printable characters (code embeds it)."""
    if not isinstance(filename, str):
        raise TypeError(f"filename must be a str, got {type(filename).__name__}")
    if not filename or len(filename) > MAX_FILENAME_CHARS or not filename.isprintable():
        raise ValueError(
            f"filename must be 1 to {MAX_FILENAME_CHARS} printable characters, got {filename!r:.80}"
        )
    return filename


def module_snippet(filename: str) -> str:
    """The design file ``filename`` as ``gpu.BlockSparseAttention``, our CUDA kernels in a
    ``torch.nn.Module`` (forward and backward), in one line, and its call.

    >>> print(module_snippet("sliding.pt").splitlines()[1])
    attn = gpu.BlockSparseAttention.from_design('sliding.pt', device="cuda")
    """
    name = repr(check_filename(filename))
    return textwrap.dedent(
        f"""\
        import gpu
        attn = gpu.BlockSparseAttention.from_design({name}, device="cuda")
        out = attn(q, k, v)  # [batch, heads, seq, head_dim], or layout="bshd"
        """
    )


def python_snippet(filename: str) -> str:
    """Python code loading ``filename`` with ``designer.formats.load_design`` and with plain torch,
    then training through it as ``gpu.BlockSparseAttention``: our kernels on a CUDA GPU, else
    ``impl="reference"`` on its first ``CPU_TOKENS`` tokens.

    The name is embedded as a Python string literal (``repr``), so any name stays data.

    >>> print(python_snippet("sliding.pt").splitlines()[2])
    design = load_design('sliding.pt')
    """
    name = repr(check_filename(filename))
    loads = textwrap.dedent(
        f"""\
        # With the designer installed:
        from designer.formats import load_design
        design = load_design({name})
        layout = design.layout  # Layout: .blocks is a bool [heads, q_blocks, k_blocks] tensor
        print(design.name, layout.shape, "block", layout.block_size, "density", layout.density)

        # With torch and numpy alone (weights_only: the file holds only tensors and plain values):
        import numpy as np
        import torch
        saved = torch.load({name}, weights_only=True)
        bits, shape = saved["layout"]["bits"], saved["layout"]["shape"]  # bit-packed, MSB first
        blocks = np.unpackbits(bits.numpy(), count=int(np.prod(shape))).reshape(shape)
        print(saved["name"], blocks.shape, "block", saved["block_size"])

        # In a model: our CUDA kernels as a torch.nn.Module, forward and backward.
        if torch.cuda.is_available():
            q, k, v = (
                torch.randn(1, layout.n_heads, n, 64, device="cuda", dtype=torch.bfloat16,
                            requires_grad=True)
                for n in (layout.seq_len_q, layout.seq_len_k, layout.seq_len_k)
            )
        """
    )
    trains = textwrap.dedent(
        f"""\
            out.sum().backward()
            print(attn, out.shape, q.grad.shape)
        else:  # the same attention by our dense torch reference, on the first tokens of each
            # side: it computes every score, which at full length would take the CPU minutes
            import gpu
            n_q, n_k = (min(n, max(1, {CPU_TOKENS} // layout.block_size))
                        for n in (layout.n_q_blocks, layout.n_k_blocks))
            attn = gpu.BlockSparseAttention(layout.blocks[:, :n_q, :n_k], layout.block_size,
                                            causal=design.causal, name=design.name,
                                            impl="reference")
            q, k, v = (torch.randn(1, layout.n_heads, n * layout.block_size, 64,
                                   requires_grad=True) for n in (n_q, n_k, n_k))
            out = attn(q, k, v)
            out.sum().backward()
            print(attn, out.shape, q.grad.shape)
        """
    )
    return loads + textwrap.indent(module_snippet(filename), "    ") + trains
