"""The training run (:func:`train`): settings, batches, optimisation, export of the demo files."""

from __future__ import annotations

import copy
import json
import math
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wam_diff2_ros.core.engine.decoding import DecodeConfig
from wam_diff2_ros.core.image_preprocess import preprocess_image
from wam_diff2_ros.core.processor import WamDiff2Processor
from wam_diff2_ros.demo import expand as demo_files
from wam_diff2_ros.demo.train.config import (
    BLOCK_SIZE,
    DEMO_PREPROCESSOR_OVERRIDES,
    DRIVE_IMAGE_SIZES,
    DRIVE_SAMPLE_SEEDS,
    FULL_VOCAB_SIZE,
    HELD_OUT_DRIVE_SEEDS,
    HELD_OUT_SEED,
    TRAIN_DRIVE_SEEDS,
    TRAIN_SEED,
    ModelSizes,
    demo_config,
)
from wam_diff2_ros.demo.train.data import DrivingSample, ImagePool, make_samples, render_image_pool
from wam_diff2_ros.demo.train.drives import drive_samples
from wam_diff2_ros.demo.train.evaluate import behaviour_sweeps, evaluate
from wam_diff2_ros.demo.train.held_out import judge, load_engine, test_sets, validation_set
from wam_diff2_ros.demo.train.model import build_training_model, compact_weights, load_compact_into
from wam_diff2_ros.demo.train.objective import (
    TrainingBatch,
    TrainingExample,
    build_batch,
    diffusion_loss,
    digit_place_weights,
    noise_response,
)
from wam_diff2_ros.demo.train.tokens import demo_processor, prompt_token_ids, response_token_ids, vocabulary

# What a run measures when it ends (``--final-eval``): every held-out set and the sweeps, or the validation drives only.
FINAL_EVALS = ("full", "validation")


@dataclass
class TrainSettings:
    """What a training run does (everything else follows from the seeds)."""

    train_samples: int = 12000
    epochs: int = 3
    batch_size: int = 8
    noisy_copies: int = 2
    lr: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    eval_samples: int = 200
    frames_per_kind: int = 4
    train_drives: int = len(TRAIN_DRIVE_SEEDS)
    threads: int = 2
    init_seed: int = 0
    probe_every: int = 500  # steps between quick decoder probes (0: none)
    probe_samples: int = 16
    drive_frames: int = 0  # instants per drive taken as samples from the simulated drives (0: none)
    sample_drives: int = 20
    drive_sizes: str = "mixed"  # the drive instants' frame sizes: a key of DRIVE_IMAGE_SIZES
    init_from: str | None = None  # a folder of shipped demo files to continue training from
    speed_frames: int = 0  # instants at any speed and pose per drive (demo/train/speeds.py; 0: none)
    speed_drives: int = 60
    speed_blind_lateral: float = 0.0  # share of those instants asked with ~0 lateral acceleration (speeds.py)
    speed_clear_path: bool = False  # keep only those instants whose answer keeps clear of the traffic
    keep_best: bool = False  # export the probed weights (the start included) that do best on the validation drives
    # loss weights of an answer's digits before the decimal point, first and second after it (1, 1, 1: plain mean)
    digit_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    suffix_noise: float = 0.0  # share of noisy copies masked from a cut to the block's end (objective.noise_response)
    final_eval: str = "full"  # one of FINAL_EVALS: every held-out set and the sweeps after training, or validation only
    sizes: ModelSizes = field(default_factory=ModelSizes)


def log(message: str) -> None:
    print(message, flush=True)


def tokenise(
    samples: Sequence[DrivingSample],
    processor: WamDiff2Processor,
    pixels: Sequence[Any],
    digit_weights: Sequence[float] | None = None,
) -> list[TrainingExample]:
    """Training examples of `samples`; answers carry per-token loss weights when `digit_weights` are given and not
    all 1 (:func:`digit_place_weights`)."""
    weighted = digit_weights is not None and any(w != 1.0 for w in digit_weights)
    text_of: dict[int, str] = {}  # token id -> its text, decoded once
    examples = []
    for sample in samples:
        image = pixels[sample.image_index]
        response = response_token_ids(processor, sample.answer)
        weights = None
        if weighted:
            for token in set(response) - text_of.keys():
                text_of[token] = processor.tokenizer.decode([token])
            weights = digit_place_weights([text_of[t] for t in response], digit_weights)
        examples.append(
            TrainingExample(
                prompt_ids=prompt_token_ids(processor, sample.prompt, image.num_tokens),
                response_ids=response,
                pixel_values=image.patches,
                image_grid_thw=image.grid_thw,
                response_weights=weights,
            )
        )
    return examples


def make_batch(
    examples: Sequence[TrainingExample],
    copies: int,
    rng: np.random.Generator,
    row_of: np.ndarray,
    suffix_noise: float = 0.0,
) -> TrainingBatch:
    """A training batch of `examples`, each with `copies` noisy copies (a share `suffix_noise` of them masked from a
    cut on; at 0 no extra random draw, so the noise is that of a run without the option)."""
    noisy, levels = [], []
    for example in examples:
        drawn = [
            noise_response(example.response_ids, rng, suffix=suffix_noise > 0 and float(rng.random()) < suffix_noise)
            for _ in range(copies)
        ]
        noisy.append([tokens for tokens, _ in drawn])
        levels.append([t for _, t in drawn])
    return build_batch(examples, noisy, row_of, levels)


def export_demo(
    model: Any, vocab_ids: Sequence[int], config: dict[str, Any], out_dir: Path, training: dict[str, Any]
) -> dict[str, Any]:
    """Write the shipped files (compact weights + manifest) of a training model into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    compact_path = out_dir / demo_files.COMPACT_WEIGHTS
    demo_files.write_safetensors(compact_weights(model, vocab_ids), compact_path)
    with tempfile.TemporaryDirectory(prefix="wam_diff2_expand_") as tmp:
        expanded = Path(tmp) / "model.safetensors"
        state = demo_files.expand_state(demo_files.read_safetensors(compact_path), FULL_VOCAB_SIZE)
        demo_files.write_safetensors(state, expanded)
        expanded_sha, expanded_bytes = demo_files.sha256_file(expanded), expanded.stat().st_size
    trained = sum(p.numel() for p in model.parameters())
    hidden = config["text_config"]["hidden_size"]
    manifest = {
        "format": demo_files.FORMAT_VERSION,
        "description": "tiny WAM-Diff2 trained with masked block diffusion on synthetic NAVSIM-style samples",
        "config": config,
        "preprocessor_overrides": DEMO_PREPROCESSOR_OVERRIDES,
        "vocab_size": FULL_VOCAB_SIZE,
        "stored_vocab_rows": len(vocab_ids),
        "stored_dtype": "float16",
        "parameters": trained + (FULL_VOCAB_SIZE - len(vocab_ids)) * hidden,
        "trained_parameters": trained,
        "compact_sha256": demo_files.sha256_file(compact_path),
        "compact_bytes": compact_path.stat().st_size,
        "model_safetensors_sha256": expanded_sha,
        "model_safetensors_bytes": expanded_bytes,
        "training": training,
    }
    (out_dir / demo_files.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def initial_weights(folder: Path) -> dict[str, Any]:
    """The compact weights of shipped demo files in `folder` to continue from, and what the manifest says about
    them (their sha256 and the run that made them), for the new manifest."""
    compact_path = folder / demo_files.COMPACT_WEIGHTS
    manifest = json.loads((folder / demo_files.MANIFEST).read_text(encoding="utf-8"))
    digest = demo_files.sha256_file(compact_path)
    if digest != manifest.get("compact_sha256"):
        raise demo_files.DemoModelError(f"{compact_path}: sha256 {digest} does not match its manifest")
    return {
        "compact": demo_files.read_safetensors(compact_path),
        "compact_sha256": digest,
        "training": manifest.get("training"),
    }


def train(settings: TrainSettings, out_dir: Path, command_line: str) -> dict[str, Any]:
    """Train, write the shipped files into `out_dir`, evaluate them through the engine; returns the metrics."""
    if settings.final_eval not in FINAL_EVALS:  # refused before hours of training, not after
        raise ValueError(f"final_eval must be one of {FINAL_EVALS}, got {settings.final_eval!r}")
    torch.set_num_threads(settings.threads)
    torch.set_flush_denormal(True)
    started = time.perf_counter()
    config = demo_config(settings.sizes)
    with tempfile.TemporaryDirectory(prefix="wam_diff2_demo_") as tmp:
        work = Path(tmp)
        processor = demo_processor(work / "processor")
        log(f"rendering training images ({settings.train_drives} drives) and held-out images ...")
        train_pool = render_image_pool(
            TRAIN_DRIVE_SEEDS[: settings.train_drives], settings.frames_per_kind, seed=TRAIN_SEED
        )
        held_pool = render_image_pool(HELD_OUT_DRIVE_SEEDS, settings.frames_per_kind, seed=HELD_OUT_SEED)
        drive_pool, drive_train = ImagePool([], {}), []
        if settings.drive_frames:
            log(f"rendering {settings.drive_frames} instants of each of {settings.sample_drives} drives ...")
            drive_pool, drive_train = drive_samples(
                DRIVE_SAMPLE_SEEDS[: settings.sample_drives],
                settings.drive_frames,
                seed=TRAIN_SEED,
                sizes=DRIVE_IMAGE_SIZES[settings.drive_sizes],
            )
            drive_train = [replace(s, image_index=s.image_index + len(train_pool.images)) for s in drive_train]
        speed_pool, speed_train = ImagePool([], {}), []
        if settings.speed_frames:
            from wam_diff2_ros.demo.train.speeds import speed_samples

            log(f"rendering {settings.speed_frames} instants at any speed on each of {settings.speed_drives} roads ...")
            speed_pool, speed_train = speed_samples(
                DRIVE_SAMPLE_SEEDS[: settings.speed_drives],
                settings.speed_frames,
                seed=TRAIN_SEED,
                sizes=DRIVE_IMAGE_SIZES[settings.drive_sizes],
                blind_lateral=settings.speed_blind_lateral,
                clear_path=settings.speed_clear_path,
            )
            offset = len(train_pool.images) + len(drive_pool.images)
            speed_train = [replace(s, image_index=s.image_index + offset) for s in speed_train]
        validation_pool, validation = validation_set()
        tests = test_sets()
        held_drive_pool, held_drive = tests["held_out_drives"]
        train_pixels = [
            preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels)
            for img in [*train_pool.images, *drive_pool.images, *speed_pool.images]
        ]
        held_pixels = [
            preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels)
            for img in held_pool.images
        ]
        train_samples = [
            *make_samples(settings.train_samples, TRAIN_SEED, train_pool.by_command),
            *drive_train,
            *speed_train,
        ]
        held_samples = make_samples(max(settings.eval_samples, 64), HELD_OUT_SEED, held_pool.by_command)
        train_examples = tokenise(train_samples, processor, train_pixels, settings.digit_weights)
        held_examples = tokenise(held_samples[:64], processor, held_pixels)  # plain loss: comparable across runs
        vocab_ids = vocabulary([e.prompt_ids + e.response_ids for e in train_examples + held_examples], processor)
        row_of = np.full(FULL_VOCAB_SIZE, -1, dtype=np.int64)
        row_of[np.asarray(vocab_ids)] = np.arange(len(vocab_ids))
        response_blocks = [len(e.response_ids) // BLOCK_SIZE for e in train_examples]
        prompt_lengths = [len(e.prompt_ids) for e in train_examples]
        log(
            f"{len(train_examples)} training ({len(drive_train)} from drives, {len(speed_train)} at any speed) / "
            f"{len(validation)} validation / {len(held_samples)} + {len(held_drive)} + "
            f"{len(tests['test_speeds'][1])} held-out samples, "
            f"{len(train_pixels)} + {len(held_pool.images)} images, "
            f"vocabulary {len(vocab_ids)} tokens, prompt "
            f"{min(prompt_lengths)}-{max(prompt_lengths)} tokens, response blocks "
            f"{min(response_blocks)}-{max(response_blocks)} ({time.perf_counter() - started:.0f} s)"
        )

        model = build_training_model(config, vocab_ids, settings.init_seed)
        init = None
        if settings.init_from:
            init = initial_weights(Path(settings.init_from))
            load_compact_into(model, init.pop("compact"), vocab_ids)
            log(f"continuing from {settings.init_from} (compact sha256 {init['compact_sha256'][:12]})")
        model.train()
        parameters = sum(p.numel() for p in model.parameters())
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
        no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=settings.lr,
            betas=(0.9, 0.98),
        )
        steps_per_epoch = len(train_examples) // settings.batch_size
        total_steps = steps_per_epoch * settings.epochs

        def lr_at(step: int) -> float:
            if step < settings.warmup_steps:
                return settings.lr * (step + 1) / settings.warmup_steps
            progress = (step - settings.warmup_steps) / max(1, total_steps - settings.warmup_steps)
            return settings.lr * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress)))

        def probe(label: str) -> dict[str, Any]:
            """Validity and ADE of the current weights on a few held-out prompts, through the real engine."""
            probe_dir = work / f"probe-{label}"
            export_demo(model, vocab_ids, config, probe_dir, {"probe": label})
            engine = load_engine(probe_dir, work / "probe-cache")
            if settings.keep_best:  # the validation drives, at any speed: what the weights are chosen on
                result = evaluate(engine, validation, validation_pool.images)
            elif settings.drive_frames:  # what the replay measures: instants of unseen drives
                result = evaluate(engine, held_drive[: settings.probe_samples], held_drive_pool.images)
            else:
                result = evaluate(engine, held_samples[: settings.probe_samples], held_pool.images)
            engine.close()
            shutil.rmtree(work / "probe-cache", ignore_errors=True)
            shutil.rmtree(probe_dir, ignore_errors=True)
            ade = "-" if result["ade_m"] is None else f"{result['ade_m']:.2f} m"
            log(
                f"  probe {label}: valid {result['valid_rate']:.2f}, plausible {result['plausible_rate']:.2f}, "
                f"ADE {ade}, steps/block {result['mean_steps_per_block']:.1f} on {result['samples']} held-out prompts"
            )
            entry = {
                "at": label,
                "on": "validation drives" if settings.keep_best else "held-out samples",
                "valid_rate": result["valid_rate"],
                "plausible_rate": result["plausible_rate"],
                "ade_m": result["ade_m"],
            }
            if settings.keep_best:
                score = (result["plausible_rate"], -(result["plausible_ade_m"] or math.inf))
                if best["score"] is None or score > best["score"]:
                    best.update(score=score, at=label, state=copy.deepcopy(model.state_dict()))
            return entry

        best: dict[str, Any] = {"score": None, "at": None, "state": None}

        held_rng = np.random.default_rng(HELD_OUT_SEED + 100)
        held_batches = [
            make_batch(held_examples[i : i + settings.batch_size], settings.noisy_copies, held_rng, row_of)
            for i in range(0, len(held_examples), settings.batch_size)
        ]
        rng = np.random.default_rng(TRAIN_SEED + 100)
        epochs_log, probes = [], []
        step = 0
        train_started = time.perf_counter()
        probe_seconds = 0.0
        log(f"model: {parameters / 1e6:.2f} M trainable parameters; {total_steps} steps")
        if settings.keep_best:
            model.eval()
            probes.append(probe("step 0"))
            probe_seconds += time.perf_counter() - train_started
        for epoch in range(settings.epochs):
            order = rng.permutation(len(train_examples))
            losses = []
            for index in range(steps_per_epoch):
                model.train()
                chosen = [
                    train_examples[k] for k in order[index * settings.batch_size : (index + 1) * settings.batch_size]
                ]
                batch = make_batch(chosen, settings.noisy_copies, rng, row_of, settings.suffix_noise)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step)
                loss = diffusion_loss(model, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                losses.append(loss.item())
                step += 1
                if step % 50 == 0:
                    elapsed = time.perf_counter() - train_started - probe_seconds
                    log(f"  step {step}/{total_steps} loss {statistics.fmean(losses[-50:]):.4f} ({elapsed:.0f} s)")
                if (settings.probe_every and step % settings.probe_every == 0 and step < total_steps) or (
                    settings.keep_best and step == total_steps
                ):
                    probe_started = time.perf_counter()
                    model.eval()
                    probes.append(probe(f"step {step}"))
                    probe_seconds += time.perf_counter() - probe_started
            model.eval()
            with torch.no_grad():
                held_loss = statistics.fmean(diffusion_loss(model, b).item() for b in held_batches)
            entry = {
                "epoch": epoch + 1,
                "train_loss": statistics.fmean(losses),
                "held_out_loss": held_loss,
                "elapsed_s": round(time.perf_counter() - train_started - probe_seconds, 1),
            }
            epochs_log.append(entry)
            log(
                f"epoch {epoch + 1}: train loss {entry['train_loss']:.4f}, held-out loss {held_loss:.4f} "
                f"({entry['elapsed_s']:.0f} s)"
            )
        train_seconds = time.perf_counter() - train_started - probe_seconds
        if settings.keep_best:
            model.load_state_dict(best["state"])
            log(f"keeping the weights at {best['at']} (best on the validation drives)")

        training = {
            "command": command_line,
            "settings": asdict(settings),
            "wall_s": round(train_seconds, 1),
            "steps": total_steps,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu_threads": settings.threads,
            "init_from": init,
            "chosen": best["at"] if settings.keep_best else f"step {total_steps}",
            "probe_s": round(probe_seconds, 1),
        }
        manifest = export_demo(model, vocab_ids, config, out_dir, training)
        engine = load_engine(out_dir, work / "cache")
        if settings.final_eval == "validation":
            log("evaluating the validation drives through the engine ...")
            quality, sweeps = None, None
            judged = judge(engine, (validation_pool, validation), {})
        else:
            log(f"evaluating {settings.eval_samples} held-out samples through the engine ...")
            quality = evaluate(engine, held_samples[: settings.eval_samples], held_pool.images)
            sweeps = behaviour_sweeps(engine, held_pool)
            log("evaluating the validation and test drives through the engine ...")
            judged = judge(engine, (validation_pool, validation), tests)
        engine.close()
    metrics = {
        "held_out": quality,
        **judged,
        "sweeps": sweeps,
        "epochs": epochs_log,
        "probes": probes,
        "training_wall_s": round(train_seconds, 1),
        "total_wall_s": round(time.perf_counter() - started, 1),
        "model": {
            "parameters": manifest["parameters"],
            "trained_parameters": parameters,
            "sizes": asdict(settings.sizes),
            "shipped_bytes": manifest["compact_bytes"],
            "expanded_bytes": manifest["model_safetensors_bytes"],
        },
        "decode": asdict(DecodeConfig()),
        "device": "cpu float32",
        "cpu_threads": settings.threads,
    }
    (out_dir / demo_files.METRICS).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics
