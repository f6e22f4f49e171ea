"""The Python readers kiln is compared with, on the Parquet files of the `block_shuffle` example.

Each reader is what a careful PyTorch user writes for data that lives in many Parquet files:

- `pyarrow_scan`: every file read whole in turn (`ParquetFile.read`), one thread, no batching
  (the decoding floor of the Python side); `pyarrow_scan_threaded`: the same with pyarrow's own
  thread pool (`use_threads=True`, one thread per core), the resources kiln's workers get. The
  files are opened and their footers read before the clock starts, as kiln's loader reads its
  footers before an epoch; each is the median of three passes;
- `torch_random`: a map-style `Dataset` (global index -> file and row; each worker keeps an LRU
  of decoded row groups) under `DataLoader(shuffle=True)`, i.e. a `RandomSampler`;
- `torch_sequential`: the same dataset in order;
- `torch_shuffle_buffer`: an `IterableDataset` that shuffles the file list per epoch, splits it
  across workers and streams each file's record batches through a shuffle buffer of 16,384
  samples (the WebDataset / `datasets` streaming recipe).

All torch readers yield (features float32[16], label int64, file index) per sample and are
batched by `DataLoader` (`batch_size`, `num_workers`, the default collate). Each runs for one
epoch or `--seconds`, whichever ends first, after one warm-up batch; the rate is samples
delivered over that time. Distinct files per batch is the mean number of different source files
in a batch (the ideal for a uniform shuffle is printed by the caller).

`--only-scans` times the two pyarrow scans alone: `run.sh` alternates that with kiln's
sequential epochs, so their ratio is taken from rounds a few seconds apart.
"""

import argparse
import bisect
import json
import random
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

FEATURES = [f"f{i}" for i in range(16)]
COLUMNS = FEATURES + ["label"]


def list_files(directory: Path):
    return sorted(str(path) for path in directory.glob("part-*.parquet"))


class ParquetRows(Dataset):
    """Map-style: sample i is row i of the concatenated files. A worker keeps the `cache_size`
    most recently decoded row groups (an LRU), so neighbouring indices decode once."""

    def __init__(self, files, cache_size=64):
        self.files = files
        self.cache_size = cache_size
        # (file, row group) boundaries from the footers, read once in the parent.
        self.group_starts = []
        self.groups = []
        start = 0
        for file_index, path in enumerate(files):
            metadata = pq.ParquetFile(path).metadata
            for group in range(metadata.num_row_groups):
                self.group_starts.append(start)
                self.groups.append((file_index, group))
                start += metadata.row_group(group).num_rows
        self.rows = start
        self.handles = {}
        self.cache = OrderedDict()

    def __len__(self):
        return self.rows

    def _group(self, position):
        cached = self.cache.get(position)
        if cached is not None:
            self.cache.move_to_end(position)
            return cached
        file_index, group = self.groups[position]
        handle = self.handles.get(file_index)
        if handle is None:
            handle = pq.ParquetFile(self.files[file_index])
            self.handles[file_index] = handle
        table = handle.read_row_group(group, columns=COLUMNS)
        decoded = (
            np.stack([table.column(name).to_numpy() for name in FEATURES], axis=1),
            table.column("label").to_numpy(),
        )
        self.cache[position] = decoded
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return decoded

    def __getitem__(self, index):
        position = bisect.bisect_right(self.group_starts, index) - 1
        features, labels = self._group(position)
        row = index - self.group_starts[position]
        file_index = self.groups[position][0]
        return torch.from_numpy(features[row]), int(labels[row]), file_index


class ShuffleBufferStream(IterableDataset):
    """Files shuffled per epoch and split across workers, rows streamed through a buffer."""

    def __init__(self, files, buffer_size=16384, seed=42):
        self.files = files
        self.buffer_size = buffer_size
        self.seed = seed

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        rng = random.Random(self.seed * 1000 + worker)
        order = list(range(len(self.files)))
        random.Random(self.seed).shuffle(order)
        mine = order[worker::workers]
        buffer = []
        for file_index in mine:
            for batch in pq.ParquetFile(self.files[file_index]).iter_batches(columns=COLUMNS):
                features = np.stack([batch.column(name).to_numpy() for name in FEATURES], axis=1)
                labels = batch.column("label").to_numpy()
                for row in range(batch.num_rows):
                    sample = (torch.from_numpy(features[row]), int(labels[row]), file_index)
                    if len(buffer) < self.buffer_size:
                        buffer.append(sample)
                        continue
                    slot = rng.randrange(self.buffer_size)
                    yield buffer[slot]
                    buffer[slot] = sample
        rng.shuffle(buffer)
        yield from buffer


def measure_loader(loader, seconds, total_rows):
    """Samples per second and mean distinct files per batch over at most `seconds`."""
    iterator = iter(loader)
    next(iterator)  # start-up: worker processes, first files
    started = time.perf_counter()
    rows, batches, distinct = 0, 0, 0
    for _features, _labels, files in iterator:
        rows += len(files)
        batches += 1
        distinct += len(set(files.tolist()))
        if time.perf_counter() - started > seconds:
            break
    elapsed = time.perf_counter() - started
    return {
        "rows_per_s": rows / elapsed,
        "rows": rows,
        "seconds": elapsed,
        "distinct_files_per_batch": distinct / max(batches, 1),
        "whole_epoch": rows >= total_rows - loader.batch_size,
    }


def pyarrow_scan(handles, seconds, use_threads, passes=3):
    """The median rate of `passes` passes over the opened files, each cut at `seconds`."""
    rates = []
    for _ in range(passes):
        started = time.perf_counter()
        rows = 0
        for handle in handles:
            rows += handle.read(columns=COLUMNS, use_threads=use_threads).num_rows
            if time.perf_counter() - started > seconds:
                break
        elapsed = time.perf_counter() - started
        rates.append((rows / elapsed, rows, elapsed))
    rate, rows, elapsed = sorted(rates)[len(rates) // 2]
    return {"rows_per_s": rate, "rows": rows, "seconds": elapsed, "passes": passes,
            "threads": "pyarrow's pool" if use_threads else 1}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the block_shuffle example's --dir")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0, help="time limit per reader")
    parser.add_argument("--buffer", type=int, default=16384, help="shuffle-buffer samples")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--only-scans", action="store_true",
                        help="time only the two pyarrow scans (for rounds interleaved with kiln's)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    files = list_files(args.dir)
    if not files:
        raise SystemExit(f"no part-*.parquet files in {args.dir}")
    dataset = ParquetRows(files)
    total = len(dataset)
    common = dict(batch_size=args.batch_size, num_workers=args.workers, persistent_workers=False)
    generator = torch.Generator().manual_seed(args.seed)
    results = {"files": len(files), "rows": total, "batch_size": args.batch_size, "workers": args.workers}

    print(f"{len(files)} files, {total} rows; batch {args.batch_size}, {args.workers} workers, "
          f"at most {args.seconds:.0f} s per reader", flush=True)
    # Footers read before the clock, as kiln's loader reads its footers before the epoch.
    handles = [pq.ParquetFile(path) for path in files]
    results["pyarrow_scan"] = pyarrow_scan(handles, args.seconds, use_threads=False)
    print(f"  pyarrow scan           {results['pyarrow_scan']['rows_per_s']:12.0f} rows/s", flush=True)
    results["pyarrow_scan_threaded"] = pyarrow_scan(handles, args.seconds, use_threads=True)
    print(f"  pyarrow scan, threads  {results['pyarrow_scan_threaded']['rows_per_s']:12.0f} rows/s",
          flush=True)
    del handles
    if args.only_scans:
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return
    readers = {
        "torch_sequential": DataLoader(dataset, shuffle=False, **common),
        "torch_random": DataLoader(dataset, shuffle=True, generator=generator, **common),
        "torch_shuffle_buffer": DataLoader(
            ShuffleBufferStream(files, args.buffer, args.seed), **common
        ),
    }
    for name, loader in readers.items():
        results[name] = measure_loader(loader, args.seconds, total)
        figures = results[name]
        print(f"  {name:<22} {figures['rows_per_s']:12.0f} rows/s, "
              f"{figures['distinct_files_per_batch']:.1f} files per batch", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
