# The trained model of the razorkv evaluation: a small Llama-family decoder (RMSNorm, RoPE,
# grouped-query attention, SwiGLU) over bytes, in PyTorch; examples/engine runs it in C++.
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab_size=256, d_model=256, num_layers=4, num_q_heads=8, num_kv_heads=4,
                 ffn_hidden=512, rope_theta=10000.0, norm_eps=1e-5, max_context=2048):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.num_layers = num_layers
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.ffn_hidden = ffn_hidden
        self.rope_theta = rope_theta
        self.norm_eps = norm_eps
        self.max_context = max_context

    @property
    def head_dim(self):
        return self.d_model // self.num_q_heads

    def to_dict(self):
        return dict(self.__dict__)

    @staticmethod
    def from_dict(d):
        return Config(**d)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, length, device=None):
    """cos/sin of shape [length, head_dim/2]; pairs (i, i + head_dim/2) rotate together."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x: [B, H, T, D]; rotate-half convention of Llama."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.num_q_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.num_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.num_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.num_q_heads * hd, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, capture=None):
        B, T, _ = x.shape
        cfg = self.cfg
        hd = cfg.head_dim
        q = self.wq(x).view(B, T, cfg.num_q_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, cfg.num_kv_heads, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, cfg.num_kv_heads, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        group = cfg.num_q_heads // cfg.num_kv_heads
        k_rep = k.repeat_interleave(group, dim=1)
        v_rep = v.repeat_interleave(group, dim=1)
        scores = (q @ k_rep.transpose(-1, -2)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = F.softmax(scores, dim=-1)
        if capture is not None:
            capture.append({"q": q.detach(), "k": k.detach(), "v": v.detach(), "probs": probs.detach()})
        out = (probs @ v_rep).transpose(1, 2).reshape(B, T, cfg.num_q_heads * hd)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w_gate = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.w_up = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.w_down = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, capture=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, capture)
        return x + self.ffn(self.ffn_norm(x))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens, capture=None):
        T = tokens.shape[1]
        cos, sin = rope_tables(self.cfg, T, tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin, capture)
        return self.lm_head(self.norm(x))


def tensor_names(cfg):
    """The tensors of the safetensors file, in order, with the module attribute they come from."""
    names = [("embed.weight", "embed.weight")]
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        b = f"blocks.{i}."
        names += [(p + "attn_norm.weight", b + "attn_norm.weight"),
                  (p + "attn.wq.weight", b + "attn.wq.weight"),
                  (p + "attn.wk.weight", b + "attn.wk.weight"),
                  (p + "attn.wv.weight", b + "attn.wv.weight"),
                  (p + "attn.wo.weight", b + "attn.wo.weight"),
                  (p + "ffn_norm.weight", b + "ffn_norm.weight"),
                  (p + "ffn.w_gate.weight", b + "ffn.w_gate.weight"),
                  (p + "ffn.w_up.weight", b + "ffn.w_up.weight"),
                  (p + "ffn.w_down.weight", b + "ffn.w_down.weight")]
    names += [("norm.weight", "norm.weight"), ("lm_head.weight", "lm_head.weight")]
    return names


def save_safetensors(model, path, dtype=torch.float16):
    """Writes the weights as a safetensors file (8-byte little-endian header size, JSON header,
    raw little-endian tensors) with the config in __metadata__; returns the rounded state."""
    state = dict(model.state_dict())
    code = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}[dtype]
    header = {"__metadata__": {"config": json.dumps(model.cfg.to_dict(), sort_keys=True),
                               "format": "razorkv-tiny-llama"}}
    blobs = []
    offset = 0
    rounded = {}
    for name, attr in tensor_names(model.cfg):
        t = state[attr].detach().to(dtype).contiguous()
        rounded[attr] = t.float()
        data = t.view(torch.int16 if dtype != torch.float32 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)
    return rounded


def load_safetensors(path):
    """Reads a file written by save_safetensors back into a Model (float32)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    cfg = Config.from_dict(json.loads(header["__metadata__"]["config"]))
    model = Model(cfg)
    dtypes = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}
    state = {}
    for name, attr in tensor_names(cfg):
        info = header[name]
        begin, end = info["data_offsets"]
        dt = dtypes[info["dtype"]]
        raw = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.int16 if dt != torch.float32 else torch.int32)
        state[attr] = raw.view(dt).float().reshape(info["shape"])
    model.load_state_dict(state)
    return model
