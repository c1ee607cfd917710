"""SmolLM2 (a GGUF "llama" file) as a PyTorch module, its weights read by razorkv.GgufFile.

The forward is Llama's: RMSNorm, grouped-query attention with RoPE, a SwiGLU MLP, the output
head tied to the embeddings when the file has no output.weight. GGUF stores Llama's Q and K
weights with their rows permuted so that RoPE rotates adjacent pairs (2i, 2i + 1); this module
rotates those pairs too, so the attention is the Hugging Face model's. Causal attention runs in
blocks of query rows so that a full 8K context never forms an 8K x 8K matrix per head.
"""
import math

import torch

import razorkv


class Attention(torch.nn.Module):
    def __init__(self, wq, wk, wv, wo, num_q_heads, num_kv_heads, theta):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = wq, wk, wv, wo
        self.num_q_heads, self.num_kv_heads = num_q_heads, num_kv_heads
        self.head_dim = wq.shape[0] // num_q_heads
        self.theta = theta

    def rope(self, x, positions):
        """x: [tokens, heads, head_dim]; rotates pairs (2i, 2i + 1) by position * theta^(-2i/d)."""
        half = self.head_dim // 2
        inv = 1.0 / self.theta ** (torch.arange(half, dtype=torch.float64) / half)
        angles = positions.to(torch.float64)[:, None] * inv[None, :]
        cos, sin = angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out

    def queries_keys(self, h):
        """Post-RoPE queries [tokens, q heads, dim] and keys [tokens, kv heads, dim] of h."""
        tokens = h.shape[0]
        positions = torch.arange(tokens)
        q = (h @ self.wq.T).view(tokens, self.num_q_heads, self.head_dim)
        k = (h @ self.wk.T).view(tokens, self.num_kv_heads, self.head_dim)
        return self.rope(q, positions), self.rope(k, positions)

    def forward(self, h):
        tokens = h.shape[0]
        q, k = self.queries_keys(h)
        v = (h @ self.wv.T).view(tokens, self.num_kv_heads, self.head_dim)
        group = self.num_q_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [q heads, tokens, dim]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        q = q.transpose(0, 1) / math.sqrt(self.head_dim)
        out = torch.empty_like(q)
        block = 1024
        for first in range(0, tokens, block):
            last = min(first + block, tokens)
            scores = q[:, first:last] @ k[:, :last].transpose(1, 2)
            rows = torch.arange(first, last)[:, None]
            scores.masked_fill_(torch.arange(last)[None, :] > rows, float("-inf"))
            out[:, first:last] = torch.softmax(scores, dim=-1) @ v[:, :last]
        return out.transpose(0, 1).reshape(tokens, -1) @ self.wo.T


class SmolLM2(torch.nn.Module):
    def __init__(self, path):
        super().__init__()
        f = razorkv.GgufFile(path)
        if f["general.architecture"] != "llama":
            raise razorkv.Error(f"{path}: general.architecture is {f['general.architecture']!r}")
        t = lambda name: torch.from_numpy(f.tensor(name))  # noqa: E731
        self.eps = f["llama.attention.layer_norm_rms_epsilon"]
        self.embed = t("token_embd.weight")
        self.head = t("output.weight") if "output.weight" in f.tensor_names else self.embed
        self.norm = t("output_norm.weight")
        q_heads, kv_heads = f["llama.attention.head_count"], f["llama.attention.head_count_kv"]
        theta = f["llama.rope.freq_base"]
        self.layers = []
        for layer in range(f["llama.block_count"]):
            p = f"blk.{layer}."
            attention = Attention(t(p + "attn_q.weight"), t(p + "attn_k.weight"),
                                  t(p + "attn_v.weight"), t(p + "attn_output.weight"),
                                  q_heads, kv_heads, theta)
            self.layers.append((t(p + "attn_norm.weight"), attention, t(p + "ffn_norm.weight"),
                                t(p + "ffn_gate.weight"), t(p + "ffn_up.weight"),
                                t(p + "ffn_down.weight")))
        self.attention = torch.nn.ModuleList(a for _, a, *_ in self.layers)

    def rms_norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def forward(self, tokens):
        """tokens: int64 [1, L] -> the last position's logits."""
        x = self.embed[tokens[0]]
        for attn_norm, attention, ffn_norm, gate, up, down in self.layers:
            x = x + attention(self.rms_norm(x, attn_norm))
            h = self.rms_norm(x, ffn_norm)
            x = x + (torch.nn.functional.silu(h @ gate.T) * (h @ up.T)) @ down.T
        return self.rms_norm(x[-1:], self.norm) @ self.head.T


def post_rope_qk(attention, inputs, output):
    """razorkv.torch's qk: the post-RoPE queries and keys an Attention module computed."""
    return attention.queries_keys(inputs[0])
