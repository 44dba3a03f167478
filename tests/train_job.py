"""Run one training job in its own process (for the kill/resume and multi-device tests).

Usage: python tests/train_job.py CONFIG_JSON DATA_DIR OUTPUT CHECKPOINT_DIR
"""

import json
import sys
from pathlib import Path

from dpscaling.train import TrainConfig, run_training

if __name__ == "__main__":
    config_json, data_dir, output, checkpoint_dir = sys.argv[1:5]
    config = TrainConfig.from_dict(json.loads(config_json))
    summary = run_training(config, Path(data_dir), Path(output), Path(checkpoint_dir))
    print(json.dumps({"status": summary.status, "resumed_from_step": summary.resumed_from_step}))
