"""Command-line tools: batch inference, tiny checkpoints, bag replay, benchmarks."""
