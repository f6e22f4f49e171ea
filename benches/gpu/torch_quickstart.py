"""The PyTorch peer of kiln's quickstart example: the same data, model, loss, optimizer and
metrics, written the way a careful PyTorch user would, to compare training speed and accuracy.

It reads the Parquet files that `cargo run --release --example quickstart -- --dir DIR` wrote
under DIR/train and DIR/valid and mirrors examples/quickstart:

- preprocessing: `agent_frame()` of dataset.rs in numpy f32 (origin at the last observed point,
  x along the last observed step, identity rotation when that step is under 1e-4 m);
- model (model.rs): Linear(20, W) ReLU Linear(W, W) ReLU, then a trajectory head
  Linear(W, 6 * 30 * 2) and a score head Linear(W, 6). PyTorch's nn.Linear default init is
  Burn's LinearConfig default: weight and bias uniform in +-1/sqrt(fan_in);
- loss: winner-takes-all, the mode with the smallest mean squared displacement (detached argmin)
  regresses, plus 0.5 * cross-entropy of the scores against that mode, in f32;
- training: Adam with Burn's defaults (betas 0.9/0.999, eps 1e-5, no weight decay), global-norm
  clipping at --max-norm (kiln's GradientClipping::Norm is clip_grad_norm_), Burn's cosine
  schedule from --lr to lr * 0.01 over all steps, one scheduler step per optimizer step, only
  whole batches per epoch (RemainderPolicy::Drop);
- precision: f32, or bf16/f16 through torch.autocast (f16 with torch.amp.GradScaler, whose
  defaults equal kiln's loss scaler's), the loss and metrics on f32 outputs as kiln's Autocast;
- metrics: Argoverse 2's minADE@6, minFDE@6 and miss rate@6 on every validation player after
  every epoch: modes ranked by probability (stable), the min-FDE mode gives minFDE *and* minADE,
  a miss when that FDE > 2.0 m (kiln-ml-metrics' `MetricsConfig::argoverse2()`).

Not mirrored: the order. kiln trains in its file-aware block shuffle, PyTorch in DataLoader's
uniform shuffle, so a small minADE difference may come from the order as well as the numerics.

Variants: `dataloader` (a Dataset over the preprocessed samples, DataLoader with shuffle,
drop_last, --workers persistent workers, pinned memory on cuda) and `resident` (every tensor on
the device once, a permutation per epoch, batches sliced on the device). PyTorch's defaults
(TF32 included) are left as users get them and recorded in the JSON.

Run by benches/gpu/run.sh; by hand, in a venv with numpy, pyarrow and torch:
    python benches/gpu/torch_quickstart.py --dir DIR --variant resident --json out.json
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

HISTORY, FUTURE, MODES = 10, 30, 6
MISS_THRESHOLD_M = 2.0


def read_split(directory: Path):
    """(history [N, 20], future [N, 60]) float32 of every players-*.parquet file, in name order."""
    histories, futures = [], []
    for path in sorted(directory.glob("*.parquet")):
        table = pq.read_table(path, columns=["history", "future"])
        for name, width, out in (("history", 2 * HISTORY, histories), ("future", 2 * FUTURE, futures)):
            values = table.column(name).combine_chunks().flatten().to_numpy()
            out.append(values.astype(np.float32, copy=False).reshape(-1, width))
    if not histories:
        raise SystemExit(f"no Parquet files in {directory}")
    return np.concatenate(histories), np.concatenate(futures)


def agent_frame(history: np.ndarray, future: np.ndarray):
    """dataset.rs `agent_frame()` in f32, element for element."""
    last = HISTORY - 1
    ox, oy = history[:, 2 * last], history[:, 2 * last + 1]
    dx, dy = ox - history[:, 2 * last - 2], oy - history[:, 2 * last - 1]
    norm = np.sqrt(dx * dx + dy * dy)
    moving = norm > np.float32(1e-4)
    safe = np.where(moving, norm, np.float32(1.0))
    cos = np.where(moving, dx / safe, np.float32(1.0))[:, None]
    sin = np.where(moving, dy / safe, np.float32(0.0))[:, None]

    def to_frame(points):
        x, y = points[:, 0::2] - ox[:, None], points[:, 1::2] - oy[:, None]
        out = np.empty_like(points)
        out[:, 0::2] = x * cos + y * sin
        out[:, 1::2] = -x * sin + y * cos
        return out

    return to_frame(history), to_frame(future).reshape(-1, FUTURE, 2)


class Forecaster(nn.Module):
    """model.rs: history [N, 20] -> (trajectories [N, K, 30, 2], logits [N, K])."""

    def __init__(self, width: int):
        super().__init__()
        self.encoder = nn.Linear(2 * HISTORY, width)
        self.hidden = nn.Linear(width, width)
        self.trajectories = nn.Linear(width, MODES * FUTURE * 2)
        self.scores = nn.Linear(width, MODES)

    def forward(self, history):
        features = F.relu(self.hidden(F.relu(self.encoder(history))))
        return self.trajectories(features).view(-1, MODES, FUTURE, 2), self.scores(features)


def wta_loss(trajectories, logits, future):
    errors = (trajectories - future.unsqueeze(1)).pow(2).sum(3).mean(2)  # [N, K]
    best = errors.detach().argmin(1)
    regression = errors.gather(1, best.unsqueeze(1)).mean()
    return regression + 0.5 * F.cross_entropy(logits, best)


def argoverse2_sums(trajectories, logits, future):
    """Sums of minADE@6, minFDE@6, misses and ADE@1 over a batch, as a float64 device tensor."""
    probabilities = logits.softmax(1)
    distances = (trajectories - future.unsqueeze(1)).norm(dim=3)  # [N, K, T]
    ade, fde = distances.mean(2), distances[:, :, -1]
    order = probabilities.argsort(dim=1, descending=True, stable=True)  # ties: lower index first
    best = order.gather(1, fde.gather(1, order).argmin(1, keepdim=True))  # first min in rank
    min_ade, min_fde = ade.gather(1, best), fde.gather(1, best)
    ade_top1 = ade.gather(1, order[:, :1])
    columns = [min_ade, min_fde, (min_fde > MISS_THRESHOLD_M).float(), ade_top1]
    return torch.cat(columns, 1).double().sum(0)


class Players(Dataset):
    """The preprocessed samples, indexed per player (what DataLoader's sampler draws)."""

    def __init__(self, history: np.ndarray, future: np.ndarray):
        self.history, self.future = torch.from_numpy(history), torch.from_numpy(future)

    def __len__(self):
        return len(self.history)

    def __getitem__(self, index):
        return self.history[index], self.future[index]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="the quickstart's --dir (train/ and valid/)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--valid-batch", type=int, default=1024, help="players per validation batch (the quickstart's default)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-norm", type=float, default=10.0, help="global-norm gradient clipping")
    parser.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
    parser.add_argument("--variant", choices=["dataloader", "resident"], default="dataloader")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (dataloader variant)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--json", type=Path, help="write the figures as one JSON object here")
    return parser.parse_args()


def main():
    args = parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    print(f"device    {device_name} (torch {torch.__version__})")
    print(f"precision {args.precision}, variant {args.variant}")

    started = time.perf_counter()
    train_np = agent_frame(*read_split(args.dir / "train"))
    valid_np = agent_frame(*read_split(args.dir / "valid"))
    players, valid_players = len(train_np[0]), len(valid_np[0])
    if players < args.batch:
        raise SystemExit(f"--batch ({args.batch}) exceeds the {players} training players")
    if args.variant == "resident":
        train_t = [torch.from_numpy(a).to(device) for a in train_np]
        valid_t = [torch.from_numpy(a).to(device) for a in valid_np]
        sync()
    load_seconds = time.perf_counter() - started
    print(f"data      {players} + {valid_players} players read and preprocessed ({load_seconds:.2f} s)")

    torch.manual_seed(args.seed)
    model = Forecaster(args.width).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-5)
    steps_per_epoch = players // args.batch  # drop the remainder
    total_steps = steps_per_epoch * args.epochs
    min_lr = args.lr * 0.01

    # Burn's CosineAnnealingLrScheduler: step t (from 0) uses min + (max - min)(1 + cos(pi t/T))/2.
    def cosine(step):
        return (min_lr + 0.5 * (args.lr - min_lr) * (1 + math.cos(math.pi * step / total_steps))) / args.lr

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.precision]
    autocast = lambda: torch.autocast(device.type, dtype=dtype, enabled=args.precision != "f32")
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "f16")

    if args.variant == "dataloader":
        loader_options = dict(
            batch_size=args.batch,
            num_workers=args.workers,
            pin_memory=cuda,
            persistent_workers=args.workers > 0,
        )
        train_loader = DataLoader(
            Players(*train_np),
            shuffle=True,
            drop_last=True,
            generator=torch.Generator().manual_seed(args.seed),
            **loader_options,
        )
        valid_loader = DataLoader(
            Players(*valid_np), shuffle=False, drop_last=False, **{**loader_options, "batch_size": args.valid_batch}
        )

        def to_device(loader):
            for history, future in loader:
                yield history.to(device, non_blocking=True), future.to(device, non_blocking=True)

        train_batches = lambda epoch: to_device(train_loader)
        valid_batches = lambda: to_device(valid_loader)

    else:

        def train_batches(epoch):
            order = torch.randperm(players, device=device)
            for step in range(steps_per_epoch):
                index = order[step * args.batch : (step + 1) * args.batch]
                yield train_t[0][index], train_t[1][index]

        def valid_batches():
            for start in range(0, valid_players, args.valid_batch):
                end = start + args.valid_batch
                yield valid_t[0][start:end], valid_t[1][start:end]

    def validate():
        model.eval()
        sums = torch.zeros(4, dtype=torch.float64, device=device)
        with torch.no_grad():
            for history, future in valid_batches():
                with autocast():
                    trajectories, logits = model(history)
                sums += argoverse2_sums(trajectories.float(), logits.float(), future)
        model.train()
        return [value / valid_players for value in sums.tolist()]

    print("epoch  train loss  minADE@6  minFDE@6  MR@6    ADE@1   samples/s")
    epochs_run, train_seconds, first_step_s, steps = [], 0.0, None, 0
    sync()
    training_started = time.perf_counter()
    for epoch in range(args.epochs):
        epoch_started = time.perf_counter()
        loss = None
        for history, future in train_batches(epoch):
            with autocast():
                trajectories, logits = model(history)
            loss = wta_loss(trajectories.float(), logits.float(), future)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # clip the true gradients (a no-op outside f16)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            scaler.step(optimizer)
            scale = scaler.get_scale()  # f16 only: a host read, as kiln's f16 steps also make
            scaler.update()
            if scaler.get_scale() >= scale:  # a step GradScaler skipped does not advance the
                scheduler.step()  # schedule (as in kiln's trainer)
            steps += 1
            if first_step_s is None:
                sync()
                first_step_s = time.perf_counter() - training_started
        sync()
        epoch_seconds = time.perf_counter() - epoch_started
        train_seconds += epoch_seconds
        train_loss = loss.item() if loss is not None else float("nan")  # the last step's, as kiln
        valid_started = time.perf_counter()
        min_ade, min_fde, miss_rate, ade_top1 = validate()
        row = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "min_ade": min_ade,
            "min_fde": min_fde,
            "miss_rate": miss_rate,
            "ade_top1": ade_top1,
            "seconds": epoch_seconds,
            "valid_seconds": time.perf_counter() - valid_started,
            "samples_per_s": steps_per_epoch * args.batch / epoch_seconds,
        }
        epochs_run.append(row)
        print(
            f"{row['epoch']:>5}  {train_loss:>10.4f}  {min_ade:>8.3f}  {min_fde:>8.3f}  "
            f"{100 * miss_rate:>5.1f}%  {ade_top1:>6.3f}  {row['samples_per_s']:>9.0f}"
        )
    seconds = time.perf_counter() - training_started
    step_ms = 1000 * train_seconds / steps if steps else float("nan")
    # As kiln's quickstart reports its steps: the epochs after the first (which warms cuBLAS,
    # the allocator and the workers), training time only.
    later = epochs_run[1:]
    later_steps = steps_per_epoch * len(later)
    steady_step_ms = (1000 * sum(row["seconds"] for row in later) / later_steps
                      if later_steps else None)
    print(f"done in {seconds:.1f} s: {steps} steps, {step_ms:.2f} ms per step, first step after {first_step_s or 0:.2f} s")

    if args.json:
        last = epochs_run[-1] if epochs_run else {}
        figures = {
            "device": device_name,
            "torch_version": torch.__version__,
            "variant": args.variant,
            "precision": args.precision,
            "epochs": args.epochs,
            "batch": args.batch,
            "width": args.width,
            "lr": args.lr,
            "seed": args.seed,
            "workers": args.workers if args.variant == "dataloader" else 0,
            "players": players,
            "valid_players": valid_players,
            "steps": steps,
            "steps_per_epoch": steps_per_epoch,
            "load_seconds": load_seconds,
            "seconds": seconds,
            "time_to_first_step_s": first_step_s,
            "step_ms": step_ms,
            "steady_step_ms": steady_step_ms,
            "min_ade": last.get("min_ade"),
            "min_fde": last.get("min_fde"),
            "miss_rate": last.get("miss_rate"),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "epochs_run": epochs_run,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        # Strict JSON: a figure that is not a number (no step ran) is null, not NaN.
        figures = {
            key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in figures.items()
        }
        args.json.write_text(json.dumps(figures, indent=2, allow_nan=False) + "\n")
        print(f"json      {args.json}")


if __name__ == "__main__":
    main()
