"""Training with DP-Adam (paper §3.2), for every model family (BERT masked LM, causal decoders): config,
step, loop."""

from dpscaling.train.config import TrainConfig, learning_rate_schedule
from dpscaling.train.loop import RunSummary, run_training

__all__ = ["RunSummary", "TrainConfig", "learning_rate_schedule", "run_training"]
