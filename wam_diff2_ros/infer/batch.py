"""Batch inference (`wam-diff2-infer`) over a reference-format eval.json, like the reference's `gpu.py`.

Reads a JSON list of samples (`id`, `datasource`, `image` (path or list of paths, relative paths resolved
against the JSON file's folder), `conversations` with `<image>` placeholders), builds the chat the way the
reference script does (first user turn, images interleaved at the placeholders), decodes with the
block-diffusion decoder and writes a JSON list with the reference's per-sample fields (`id, datasource,
image, question, prediction, ground_truth`, plus `error` when a sample failed) and `parsed`, `timing`,
`steps_per_block`, `token_ids`. The output is rewritten atomically every `--save_every` samples and at the
end; `--resume` keeps finished samples of an earlier run and only runs the rest. A sample that fails is
recorded with its error and the run goes on.

Under `torchrun` (RANK / WORLD_SIZE / LOCAL_RANK set) each rank decodes a contiguous shard on
`cuda:LOCAL_RANK` (or `npu:LOCAL_RANK` with `--device npu`), writes `<output>.rank<r>-of-<n>.json`, and rank 0
merges the shards in input order once all are written (file based, no NCCL needed).

With `--seed S` every decode call starts from seed S (as `torch.manual_seed(S)` right before the
reference `generate()`), so results do not depend on batching order, sharding or resuming.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wam_diff2_ros.infer.samples import LOG, UsageError, base_record, build_conversation, parse_prediction, task_of


@dataclass(frozen=True)
class BatchOptions:
    """How samples are batched, saved and shown (the CLI's --batch_size, --padding_side, --save_every,
    --no_progress)."""

    batch_size: int = 1
    padding_side: str = "left"
    save_every: int = 10
    no_progress: bool = False


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file, fsync it, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=4, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def record_key(record_id: Any) -> str:
    """A comparable key for sample ids (ints and strings)."""
    return json.dumps(record_id, sort_keys=True)


def load_finished(path: Path) -> dict[str, dict[str, Any]]:
    """Records of an earlier run that succeeded, by id (failed ones are run again)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--resume: cannot read the existing output {path}: {exc}") from None
    if not isinstance(data, list):
        raise UsageError(f"--resume: the existing output {path} is not a JSON list")
    return {record_key(r.get("id")): r for r in data if isinstance(r, dict) and "error" not in r}


@dataclass
class Shard:
    """The part of the input this process decodes."""

    rank: int
    world_size: int
    local_rank: int
    start: int
    end: int

    @classmethod
    def from_env(cls, total: int) -> Shard:
        """Contiguous split like the reference: the first `total % world` ranks take one extra sample."""
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        per_rank, extra = divmod(total, world)
        start = rank * per_rank + min(rank, extra)
        end = start + per_rank + (1 if rank < extra else 0)
        return cls(rank, world, local, start, end)

    def path_for(self, output: Path, rank: int | None = None) -> Path:
        """Per-rank output file."""
        r = self.rank if rank is None else rank
        return output.with_name(f"{output.name}.rank{r}-of-{self.world_size}.json")


def device_for(spec: str, shard: Shard) -> str:
    """Under torchrun, pin each rank to its local accelerator."""
    if shard.world_size <= 1:
        return spec
    kind = spec.split(":")[0]
    if kind in ("auto", "cuda"):
        import torch

        if torch.cuda.is_available():
            return f"cuda:{shard.local_rank}"
        return spec
    if kind == "npu":
        return f"npu:{shard.local_rank}"
    return spec


def run_samples(
    engine: Any,
    samples: list[tuple[int, dict[str, Any]]],
    base_dir: Path,
    decode: Any,
    options: BatchOptions,
    done: dict[str, dict[str, Any]],
    save: Any,
) -> list[dict[str, Any]]:
    """Decode samples (in batches), collecting one record per sample in input order."""
    from tqdm import tqdm

    records: dict[int, dict[str, Any]] = {}
    todo: list[tuple[int, dict[str, Any]]] = []
    for index, sample in samples:
        key = record_key(sample.get("id", index))
        if key in done:
            records[index] = done[key]
        else:
            todo.append((index, sample))
    bar = tqdm(total=len(todo), desc="wam-diff2-infer", unit="sample", disable=options.no_progress, file=sys.stderr)
    since_save = 0
    for offset in range(0, len(todo), max(1, options.batch_size)):
        chunk = todo[offset : offset + max(1, options.batch_size)]
        ready: list[tuple[int, dict[str, Any], list[dict[str, Any]], list[Any]]] = []
        for index, sample in chunk:
            try:
                messages, images = build_conversation(sample, base_dir)
                ready.append((index, sample, messages, images))
            except Exception as exc:
                records[index] = {**base_record(sample, index), "error": str(exc)}
                LOG.error("sample %s: %s", sample.get("id", index), exc)
        for index, record in decode_ready(engine, ready, decode, options).items():
            records[index] = record
        bar.update(len(chunk))
        since_save += len(chunk)
        if since_save >= options.save_every:
            since_save = 0
            save([records[i] for i in sorted(records)])
    bar.close()
    return [records[i] for i in sorted(records)]


def decode_ready(engine: Any, ready: list, decode: Any, options: BatchOptions) -> dict[int, dict[str, Any]]:
    """Decode a batch; if the batch fails, decode its samples one by one so only the bad one fails."""
    if not ready:
        return {}
    try:
        generations = engine.generate_conversations([r[2] for r in ready], decode, padding_side=options.padding_side)
    except Exception as exc:
        if len(ready) == 1:
            index, sample, _, _ = ready[0]
            LOG.error("sample %s: %s", sample.get("id", index), exc)
            return {index: {**base_record(sample, index), "error": f"{type(exc).__name__}: {exc}"}}
        results: dict[int, dict[str, Any]] = {}
        for item in ready:
            results.update(decode_ready(engine, [item], decode, options))
        return results
    results = {}
    for (index, sample, _, images), generation in zip(ready, generations, strict=True):
        record = base_record(sample, index)
        task = task_of(record["question"])
        record["prediction"] = generation.text
        record["parsed"] = parse_prediction(task, generation.text, images, generation)
        record["timing"] = {k: round(v, 6) for k, v in generation.timing.seconds().items()}
        record["steps_per_block"] = generation.steps_per_block
        record["token_ids"] = generation.token_ids
        record["token_confidence"] = [round(float(p), 6) for p in generation.token_confidence]
        record["finished"] = generation.finished
        results[index] = record
    return results


def merge_shards(output: Path, shard: Shard, total: int, timeout_s: float = 24 * 3600) -> list[dict[str, Any]]:
    """Rank 0: wait for every rank's file, then merge the records in input order."""
    deadline = time.monotonic() + timeout_s
    merged: list[dict[str, Any]] = []
    for rank in range(shard.world_size):
        path = shard.path_for(output, rank)
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank {rank} never wrote {path}")
            time.sleep(1.0)
        merged.extend(json.loads(path.read_text(encoding="utf-8")))
    if len(merged) != total:
        LOG.warning("merged %d records, expected %d", len(merged), total)
    return merged
