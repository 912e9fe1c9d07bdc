"""torchgpt: a small GPT trainer in plain PyTorch, in the style of nanoGPT's train.py.

Two files (this one and the model, model.py), settings as command-line arguments, one process per rank under torchrun (gloo on CPU, NCCL on
GPU), a framework-style log:

    iter 3: loss 3.9512, time 412.31ms
    step 12: train loss 3.2101, val loss 3.2215

It knows nothing about any tuner. The data is synthetic (a seeded Markov chain over a small vocabulary), so
it needs no download and the loss falls from ln(vocab) towards the chain's entropy.

Every optimizer step trains on the same global batch of sequences, whatever the split into ranks,
micro-batches and accumulation steps: the sequences of step N are drawn from the seed and N alone, and the
printed loss is the mean over the whole global batch. So two runs with the same settings print the same
losses, and runs that only split the batch differently print the same losses up to float rounding.

    python train.py --max_iters=12                                 # one process
    torchrun --nproc_per_node=2 train.py --batch_size=8            # two ranks (DDP)
    python train.py --help                                         # every setting
"""

import argparse
import inspect
import math
import os
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from model import GPT  # the model: model.py, beside this file (the module a tuning campaign may change)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="train a small GPT on synthetic data (nanoGPT-style)")
    # the run
    p.add_argument("--max_iters", type=int, default=20, help="optimizer steps")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--log_interval", type=int, default=1, help="print an 'iter' line every N steps")
    p.add_argument("--eval_sequences", type=int, default=32, help="sequences per split in the final evaluation")
    p.add_argument("--device", default="auto", help="auto (cuda when present), cpu or cuda")
    p.add_argument("--gpu_memory_limit_mb", type=int, default=0,
                   help="cap this process's CUDA allocations (torch.cuda.set_per_process_memory_fraction): a "
                        "run that needs more fails with PyTorch's CUDA out-of-memory error; 0: the whole GPU")
    # the batch: global batch = batch_size * gradient_accumulation_steps * ranks
    p.add_argument("--batch_size", type=int, default=8, help="micro-batch per rank (sequences)")
    p.add_argument("--gradient_accumulation_steps", type=int, default=2, help="micro-steps per step")
    p.add_argument("--global_batch_size", type=int, default=0,
                   help="if set, the run checks batch_size * accumulation * ranks equals it")
    # the model
    p.add_argument("--block_size", type=int, default=128, help="sequence length")
    p.add_argument("--vocab_size", type=int, default=96)
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=16)
    p.add_argument("--n_embd", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    # the optimizer
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--grad_clip", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--optimizer_impl", choices=["loop", "foreach", "fused"], default="loop",
                   help="AdamW's implementation: per-parameter loop, multi-tensor foreach, or fused (CUDA, "
                        "where this PyTorch has it)")
    # performance settings
    p.add_argument("--activation_checkpointing", choices=["none", "full"], default="none",
                   help="full: recompute each block's activations in the backward pass")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="autocast dtype (float16 on CUDA only)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads per rank (0: PyTorch's default)")
    p.add_argument("--ddp_bucket_cap_mb", type=int, default=25, help="DDP gradient bucket size")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------------------
# the data: a seeded Markov chain. Sequence i of a split is generated from (seed, split, i) alone.

class MarkovData:
    def __init__(self, vocab, block_size, seed):
        g = torch.Generator().manual_seed(seed)
        # A sparse-ish transition table: each token has a few likely successors.
        logits = torch.randn(vocab, vocab, generator=g) * 2.5
        self.probs = F.softmax(logits, dim=-1)
        self.block_size = block_size
        self.seed = seed

    def sequences(self, ids, split):
        """Token sequences (len(ids), block_size + 1) for the given sequence ids of a split."""
        n = len(ids)
        out = torch.empty(n, self.block_size + 1, dtype=torch.long)
        if n == 0:
            return out
        first = torch.empty(n, dtype=torch.long)
        draws = torch.empty(n, self.probs.size(0), self.block_size + 1, dtype=torch.long)
        for row, i in enumerate(ids):
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + split * 7_919 + int(i))
            first[row] = int(torch.randint(self.probs.size(0), (1,), generator=g))
            draws[row] = torch.multinomial(self.probs, self.block_size + 1, replacement=True, generator=g)
        # Follow the chains, all rows at once: the next token is the current token's next pre-drawn successor.
        rows = torch.arange(n)
        tok = first
        for t in range(self.block_size + 1):
            out[:, t] = tok
            tok = draws[rows, tok, t]
        return out


def step_sequence_ids(seed, step, global_batch, pool=1 << 20):
    """The sequence ids of optimizer step `step`: a function of the seed, the step and the global batch."""
    g = torch.Generator().manual_seed(seed * 7_777 + step)
    return torch.randint(pool, (global_batch,), generator=g).tolist()


# ----------------------------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device_type = "cuda" if (a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())) else "cpu"
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        if a.gpu_memory_limit_mb > 0:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, a.gpu_memory_limit_mb * 2**20 / total), device)
    else:
        device = torch.device("cpu")
    if ddp:
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    master = rank == 0

    def log(msg):
        if master:
            print(msg, flush=True)

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    global_batch = a.batch_size * a.gradient_accumulation_steps * world
    if a.global_batch_size and a.global_batch_size != global_batch:
        sys.exit(f"train.py: batch_size {a.batch_size} x gradient_accumulation_steps "
                 f"{a.gradient_accumulation_steps} x {world} ranks = {global_batch}, "
                 f"not the global batch {a.global_batch_size}")
    if a.dtype == "float16" and device_type == "cpu":
        sys.exit("train.py: --dtype=float16 needs CUDA (autocast on CPU takes bfloat16)")
    if a.n_embd % a.n_head:
        sys.exit(f"train.py: n_embd {a.n_embd} is not a multiple of n_head {a.n_head}")

    torch.manual_seed(a.seed)
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = GPT(a).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"number of parameters: {n_params / 1e6:.2f}M")
    log(f"tokens per iteration will be: {global_batch * a.block_size:,} "
        f"({world} ranks x {a.gradient_accumulation_steps} micro-steps x {a.batch_size} x {a.block_size})")
    raw_model = model
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None,
                    bucket_cap_mb=a.ddp_bucket_cap_mb)

    decay = [p for n, p in raw_model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in raw_model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {}
    if a.optimizer_impl == "fused":
        if "fused" not in inspect.signature(torch.optim.AdamW).parameters or device_type != "cuda":
            sys.exit(f"train.py: fused AdamW is not available here (PyTorch {torch.__version__}, {device_type})")
        extra["fused"] = True
    else:
        extra["foreach"] = a.optimizer_impl == "foreach"
    optimizer = torch.optim.AdamW(groups, lr=a.learning_rate, betas=(0.9, 0.95), **extra)
    log(f"optimizer: AdamW ({a.optimizer_impl}); autocast {a.dtype} on {device_type}; "
        f"activation checkpointing {a.activation_checkpointing}")
    amp_dtype = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    ctx = nullcontext() if amp_dtype is None else torch.autocast(device_type=device_type, dtype=amp_dtype)
    scaler = torch.cuda.amp.GradScaler(enabled=(a.dtype == "float16"))
    data = MarkovData(a.vocab_size, a.block_size, a.seed)
    per_rank = a.batch_size * a.gradient_accumulation_steps

    def lr_at(it):  # linear warm-up over the first 10% of steps, then cosine decay to 10%
        warm = max(1, a.max_iters // 10)
        if it < warm:
            return a.learning_rate * (it + 1) / warm
        frac = (it - warm) / max(1, a.max_iters - warm)
        return a.learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))

    model.train()
    for it in range(a.max_iters):
        t0 = time.perf_counter()
        for g in optimizer.param_groups:
            g["lr"] = lr_at(it)
        ids = step_sequence_ids(a.seed, it, global_batch)[rank * per_rank:(rank + 1) * per_rank]
        seqs = data.sequences(ids, split=0)
        loss_sum = torch.zeros((), device=device)
        for micro in range(a.gradient_accumulation_steps):
            chunk = seqs[micro * a.batch_size:(micro + 1) * a.batch_size].to(device)
            x, y = chunk[:, :-1], chunk[:, 1:]
            last = micro == a.gradient_accumulation_steps - 1
            sync = model.no_sync() if (ddp and not last) else nullcontext()
            with sync:
                with ctx:
                    loss = model(x, y)
                # The mean over the global batch: every micro-batch is the same size.
                scaler.scale(loss / a.gradient_accumulation_steps).backward()
            loss_sum += loss.detach()
        if a.grad_clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if ddp:
            dist.all_reduce(loss_sum)
        lossf = loss_sum.item() / (a.gradient_accumulation_steps * world)
        dt = time.perf_counter() - t0
        if it % a.log_interval == 0 or it == a.max_iters - 1:
            if device_type == "cuda":  # the caching allocator's peak so far, as torchtitan prints it
                log(f"iter {it}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, "
                    f"memory {torch.cuda.max_memory_allocated(device) / 2**30:.3f}GiB")
            else:
                log(f"iter {it}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")

    # The final evaluation, after the last timed step (nanoGPT's "step N: train loss, val loss"): the same
    # eval_sequences sequences of each split whatever the batch split, shared among the ranks.
    model.eval()
    losses = {}
    with torch.no_grad():
        for split, name in ((1, "train"), (2, "val")):
            total = torch.zeros((), device=device)
            mine = list(range(rank, a.eval_sequences, world))
            for k in range(0, len(mine), a.batch_size):
                chunk = data.sequences(mine[k:k + a.batch_size], split=split).to(device)
                with ctx:
                    total += raw_model(chunk[:, :-1], chunk[:, 1:]).float() * chunk.size(0)
            if ddp:
                dist.all_reduce(total)
            losses[name] = total.item() / a.eval_sequences
    log(f"step {a.max_iters}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if ddp:
        # PyTorch 1.13's gloo process group can deadlock in its destructor: the main thread holds the GIL while
        # it joins gloo's worker thread, which waits for the GIL to free a tensor (seen here at exit with two
        # ranks: the job printed every line, then hung until its time limit). Every rank has finished its
        # collectives; leave without destroying the group.
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
