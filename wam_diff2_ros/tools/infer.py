"""`wam-diff2-infer`: batch inference over a reference-format eval.json, like the reference's `gpu.py`.

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

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG = logging.getLogger("wam-diff2-infer")
EXIT_USAGE = 2
EXIT_FAILURE = 1


class UsageError(Exception):
    """Bad command line or input file: exit code 2, one message."""


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (the reference's, plus device/dtype/seed/resume/batching)."""
    parser = argparse.ArgumentParser(
        prog="wam-diff2-infer",
        description="Block-diffusion inference of a WAM-Diff2 checkpoint over a reference-format eval.json.",
    )
    parser.add_argument("--model_id", required=True, help="checkpoint directory (config.json, *.safetensors, ...)")
    parser.add_argument("--input_file", required=True, help="eval.json: a list of samples with conversations")
    parser.add_argument("--output_file", required=True, help="where to write the predictions JSON")
    parser.add_argument("--max_new_tokens", type=int, default=128)
    parser.add_argument("--block_size", type=int, default=32, help="response block length")
    parser.add_argument("--denoising_steps", type=int, default=32, help="maximum denoising steps per block")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top_k", type=int, default=0)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument(
        "--remasking_strategy",
        default="low_confidence_dynamic",
        choices=["low_confidence_dynamic", "low_confidence_static", "sequential"],
    )
    parser.add_argument("--confidence_threshold", type=float, default=0.9)
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "exact", "fast"],
        help="decoding engine: exact (the reference's execution), fast (static cache, no host syncs inside a "
        "block), auto = fast where proven identical (CPU float32), else exact",
    )
    parser.add_argument("--no_cuda_graphs", action="store_true", help="fast engine on CUDA without CUDA graphs")
    parser.add_argument("--min_pixels", type=int, default=12544)
    parser.add_argument("--max_pixels", type=int, default=2073600)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] | npu[:N] (default: auto)")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 | float16 | float32 (default: bfloat16)")
    parser.add_argument("--seed", type=int, default=None, help="seed every decode call (sampling reproducible)")
    parser.add_argument("--resume", action="store_true", help="keep finished samples of an existing output file")
    parser.add_argument("--batch_size", type=int, default=1, help="samples decoded together (default 1)")
    parser.add_argument("--padding_side", default="left", choices=["left", "right"], help="batch padding side")
    parser.add_argument("--save_every", type=int, default=10, help="rewrite the output every N samples")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    return parser


# ---------------------------------------------------------------------------------------------- input


def load_samples(path: Path) -> list[dict[str, Any]]:
    """The eval.json sample list; `UsageError` with one clear message when missing or malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"input file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"input file is a directory: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read input file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"input file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, list):
        raise UsageError(f"input file {path} must hold a JSON list of samples, got {type(data).__name__}")
    for index, sample in enumerate(data):
        if not isinstance(sample, dict):
            raise UsageError(f"input file {path}: sample {index} is a {type(sample).__name__}, not an object")
    return data


def image_paths(sample: dict[str, Any]) -> list[str]:
    """The sample's image entries as a list (a single string is one image)."""
    images = sample.get("image", [])
    if isinstance(images, str):
        return [images]
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise ValueError("'image' must be a path or a list of paths")
    return images


def open_image(path: str, base_dir: Path) -> Any:
    """An RGB PIL image; relative paths are resolved against the eval.json folder."""
    from PIL import Image, UnidentifiedImageError

    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        resolved = base_dir / resolved
    try:
        with Image.open(resolved) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise ValueError(f"image not found: {resolved}") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"cannot read image {resolved}: {exc}") from None


def build_conversation(sample: dict[str, Any], base_dir: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Chat messages for a sample exactly as the reference builds them, and the opened images."""
    from wam_diff2_ros.core.prompts import split_prompt_with_images

    paths = image_paths(sample)
    conversations = sample.get("conversations") or []
    if not isinstance(conversations, list):
        raise ValueError("'conversations' must be a list")
    roles = {"system": "system", "human": "user", "gpt": "assistant"}
    messages: list[dict[str, Any]] = []
    images: list[Any] = []
    for turn in conversations:
        if not isinstance(turn, dict):
            raise ValueError("every conversation turn must be an object")
        role = roles.get(turn.get("from", ""))
        text = turn.get("value", "")
        if role is None:
            LOG.warning("sample %s: unknown role %r skipped", sample.get("id"), turn.get("from"))
            continue
        if not isinstance(text, str):
            raise ValueError(f"conversation value of role {turn.get('from')!r} is not a string")
        if role == "user" and paths:
            images = [open_image(p, base_dir) for p in paths]
            content = split_prompt_with_images(text, images)
        else:
            content = [{"type": "text", "text": text}]
        messages.append({"role": role, "content": content})
        if role == "user":
            break
    if not any(m["role"] == "user" for m in messages):
        raise ValueError("sample has no human turn")
    return messages, images


def question_of(sample: dict[str, Any]) -> str:
    """The reference's `question` field: the first conversation value."""
    conversations = sample.get("conversations") or []
    if conversations and isinstance(conversations[0], dict):
        return str(conversations[0].get("value", ""))
    return ""


def ground_truth_of(sample: dict[str, Any]) -> str:
    """The first `gpt` turn, or ""."""
    for turn in sample.get("conversations") or []:
        if isinstance(turn, dict) and turn.get("from") == "gpt":
            return str(turn.get("value", ""))
    return ""


def task_of(question: str) -> str:
    """`planning`, `detection` or `vqa`, judged from the prompt text."""
    lowered = question.lower()
    if "waypoint" in lowered:
        return "planning"
    if "bbox" in lowered or "locate every instance" in lowered:
        return "detection"
    return "vqa"


def parse_prediction(task: str, text: str, images: Sequence[Any]) -> dict[str, Any]:
    """Structured reading of a prediction (waypoints, detections or a clean answer)."""
    from wam_diff2_ros.core.parsing import clean_answer, parse_detections, parse_waypoints

    if task == "planning":
        plan = parse_waypoints(text)
        return {
            "task": task,
            "valid": plan.valid,
            "reason": plan.reason,
            "waypoints": [[w.x, w.y] for w in plan.waypoints],
            "yaw": [w.yaw for w in plan.waypoints],
        }
    if task == "detection" and images:
        width, height = images[0].size
        found = parse_detections(text, width, height)
        return {
            "task": task,
            "detections": [
                {"label": d.label, "bbox": [d.x_min, d.y_min, d.x_max, d.y_max], "score": d.score}
                for d in found.detections
            ],
            "skipped": found.skipped,
            "repaired": found.repaired,
            "reason": found.reason,
        }
    return {"task": "vqa" if task != "detection" else task, "answer": clean_answer(text)}


def base_record(sample: dict[str, Any], index: int) -> dict[str, Any]:
    """The reference's fields for a sample before its prediction is known."""
    return {
        "id": sample.get("id", index),
        "datasource": sample.get("datasource", "navsim"),
        "image": sample.get("image", []),
        "question": question_of(sample),
        "prediction": "",
        "ground_truth": ground_truth_of(sample),
    }


# --------------------------------------------------------------------------------------------- output


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


# ---------------------------------------------------------------------------------------------- run


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
    args: argparse.Namespace,
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
    bar = tqdm(total=len(todo), desc="wam-diff2-infer", unit="sample", disable=args.no_progress, file=sys.stderr)
    since_save = 0
    for offset in range(0, len(todo), max(1, args.batch_size)):
        chunk = todo[offset : offset + max(1, args.batch_size)]
        ready: list[tuple[int, dict[str, Any], list[dict[str, Any]], list[Any]]] = []
        for index, sample in chunk:
            try:
                messages, images = build_conversation(sample, base_dir)
                ready.append((index, sample, messages, images))
            except Exception as exc:
                records[index] = {**base_record(sample, index), "error": str(exc)}
                LOG.error("sample %s: %s", sample.get("id", index), exc)
        for index, record in decode_ready(engine, ready, decode, args).items():
            records[index] = record
        bar.update(len(chunk))
        since_save += len(chunk)
        if since_save >= args.save_every:
            since_save = 0
            save([records[i] for i in sorted(records)])
    bar.close()
    return [records[i] for i in sorted(records)]


def decode_ready(engine: Any, ready: list, decode: Any, args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """Decode a batch; if the batch fails, decode its samples one by one so only the bad one fails."""
    if not ready:
        return {}
    try:
        generations = engine.generate_conversations([r[2] for r in ready], decode, padding_side=args.padding_side)
    except Exception as exc:
        if len(ready) == 1:
            index, sample, _, _ = ready[0]
            LOG.error("sample %s: %s", sample.get("id", index), exc)
            return {index: {**base_record(sample, index), "error": f"{type(exc).__name__}: {exc}"}}
        results: dict[int, dict[str, Any]] = {}
        for item in ready:
            results.update(decode_ready(engine, [item], decode, args))
        return results
    results = {}
    for (index, sample, _, images), generation in zip(ready, generations, strict=True):
        record = base_record(sample, index)
        task = task_of(record["question"])
        record["prediction"] = generation.text
        record["parsed"] = parse_prediction(task, generation.text, images)
        record["timing"] = {k: round(v, 6) for k, v in generation.timing.as_dict().items()}
        record["steps_per_block"] = generation.steps_per_block
        record["token_ids"] = generation.token_ids
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `wam-diff2-infer`; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    input_path = Path(args.input_file).expanduser().absolute()
    output_path = Path(args.output_file).expanduser()
    try:
        samples = load_samples(input_path)
        if args.batch_size < 1 or args.save_every < 1:
            raise UsageError("--batch_size and --save_every must be >= 1")
        from wam_diff2_ros.core.decoding import DecodeConfig, DecodeConfigError

        try:
            decode = DecodeConfig(
                max_new_tokens=args.max_new_tokens,
                block_size=args.block_size,
                denoising_steps=args.denoising_steps,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                remasking_strategy=args.remasking_strategy,
                confidence_threshold=args.confidence_threshold,
                seed=args.seed,
                engine=args.engine,
                cuda_graphs=not args.no_cuda_graphs,
            )
        except DecodeConfigError as exc:
            raise UsageError(str(exc)) from None
        shard = Shard.from_env(len(samples))
        final = shard.world_size <= 1
        target = output_path if final else shard.path_for(output_path)
        done = load_finished(output_path) if args.resume else {}
    except UsageError as exc:
        print(f"wam-diff2-infer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from wam_diff2_ros.core.checkpoint import CheckpointError
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import resolve_model

    try:
        engine = Engine.load(
            resolve_model(args.model_id),
            device=device_for(args.device, shard),
            dtype=args.dtype,
            min_pixels=args.min_pixels,
            max_pixels=args.max_pixels,
        )
    except (CheckpointError, RuntimeError, ValueError) as exc:
        print(f"wam-diff2-infer: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    LOG.info(
        "rank %d/%d: %s on %s (%s), samples %d..%d",
        shard.rank,
        shard.world_size,
        engine.name,
        engine.device,
        str(engine.dtype).removeprefix("torch."),
        shard.start,
        shard.end - 1,
    )
    mine = list(enumerate(samples))[shard.start : shard.end]
    records = run_samples(
        engine, mine, input_path.parent, decode, args, done, lambda rows: write_json_atomic(target, rows)
    )
    write_json_atomic(target, records)
    if not final:
        if shard.rank != 0:
            return 0
        records = merge_shards(output_path, shard, len(samples))
        write_json_atomic(output_path, records)
    failed = sum(1 for r in records if "error" in r)
    LOG.info("wrote %s: %d predicted, %d failed", output_path, len(records) - failed, failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
