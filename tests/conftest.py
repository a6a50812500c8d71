"""Test-session settings: offline Hugging Face, one torch thread per test worker (pytest -n 2 on 2 cores)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
