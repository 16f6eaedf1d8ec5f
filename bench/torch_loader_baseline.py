"""PyTorch DataLoader baseline for bench/loader_bench.cpp: the same records, one small file each
(DIR/files/*.bin: int64 label + 3x32x32 uint8), read by a map-style Dataset that returns the
image as float in [0, 1] (what frugal's records source hands the trainer), through
torch.utils.data.DataLoader (batch 64, shuffled, 2 workers). After one untimed epoch (page
cache, worker start) it times --epochs epochs and prints
{"torch_dataloader_small_files_samples_per_s": [one figure per epoch], "torch_version": ...}.
Run with the project venv's Python (.venv/bin/python: torch and numpy).

  .venv/bin/python bench/torch_loader_baseline.py DIR [--epochs 1]"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class SmallFiles(Dataset):
    def __init__(self, folder):
        self.paths = sorted(os.path.join(folder, f) for f in os.listdir(folder))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            raw = np.frombuffer(f.read(), dtype=np.uint8)
        label = int(raw[:8].view(np.int64)[0])
        image = torch.from_numpy(raw[8:].copy()).view(3, 32, 32).float().div_(255)
        return image, label


def epoch(loader):
    start, n = time.perf_counter(), 0
    for images, _ in loader:
        n += images.shape[0]
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="the folder bench/loader_bench wrote (DIR/files/*.bin)")
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs")
    a = ap.parse_args()
    folder = os.path.join(a.dir, "files")
    if not os.path.isdir(folder):
        print(f"torch_loader_baseline: {folder} does not exist; run bench/loader_bench first", file=sys.stderr)
        return 2
    torch.manual_seed(7)
    loader = DataLoader(SmallFiles(folder), batch_size=64, shuffle=True, num_workers=2,
                        drop_last=True, persistent_workers=True)
    epoch(loader)  # warm the page cache and start the workers
    print(json.dumps({"torch_dataloader_small_files_samples_per_s": [epoch(loader) for _ in range(a.epochs)],
                      "torch_version": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
