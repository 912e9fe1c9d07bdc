"""The model of torchgpt (after nanoGPT's model.py): a GPT with pre-LayerNorm blocks, causal self-attention and
tied embeddings. `GPT(args)(idx, targets)` returns the mean token cross-entropy.

It is the module a tuning campaign may change (the contract's `editable`): kernels, fusions and layouts go here;
train.py (the data, the loop, the loss it prints and the timing) stays protected.
"""

import math

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


class CausalSelfAttention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_head = a.n_head
        self.c_attn = nn.Linear(a.n_embd, 3 * a.n_embd)
        self.c_proj = nn.Linear(a.n_embd, a.n_embd)
        self.attn_dropout = nn.Dropout(a.dropout)
        self.resid_dropout = nn.Dropout(a.dropout)
        self.register_buffer("mask", torch.tril(torch.ones(a.block_size, a.block_size))
                             .view(1, 1, a.block_size, a.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.c_fc = nn.Linear(a.n_embd, 4 * a.n_embd)
        self.c_proj = nn.Linear(4 * a.n_embd, a.n_embd)
        self.dropout = nn.Dropout(a.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.ln_1 = nn.LayerNorm(a.n_embd)
        self.attn = CausalSelfAttention(a)
        self.ln_2 = nn.LayerNorm(a.n_embd)
        self.mlp = MLP(a)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.block_size = a.block_size
        self.checkpointing = a.activation_checkpointing == "full"
        self.wte = nn.Embedding(a.vocab_size, a.n_embd)
        self.wpe = nn.Embedding(a.block_size, a.n_embd)
        self.drop = nn.Dropout(a.dropout)
        self.h = nn.ModuleList([Block(a) for _ in range(a.n_layer)])
        self.ln_f = nn.LayerNorm(a.n_embd)
        self.lm_head = nn.Linear(a.n_embd, a.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * a.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            if self.checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
