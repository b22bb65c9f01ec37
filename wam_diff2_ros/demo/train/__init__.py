"""Training the embedded demo model (``wam-diff2-train-demo``): a tiny WAM-Diff2 with masked block diffusion.

Data: synthetic NAVSIM-style planning samples. Ego speed 0-20 m/s with a small lateral velocity, a constant
longitudinal acceleration, a navigation command (left / straight / right / unknown) and a front image of the
synthetic sample drive (:mod:`wam_diff2_ros.sim`) that fits the command (a frame before or in
its left turn for ``left``, the same frame mirrored for ``right``, a straight stretch for ``straight``),
rendered at one of several sizes and aspect ratios (`IMAGE_SIZES`) so that other cameras work too. The
ground truth is 8 waypoints at 0.5 .. 4.0 s from a kinematic model: the path's curvature follows the command
(``left``: ramps up to a turn whose radius is limited by a lateral-acceleration budget at the vehicle's speed
and a minimum radius, then ramps out after 60-90°, ``right`` mirrored, ``straight`` / ``unknown``: the current
curvature relaxes towards ~0), the distance along it follows the constant acceleration (stopping at 0 m/s).
The prompt is :func:`~wam_diff2_ros.core.prompts.build_planning_prompt` (``navsim`` template); the answer is
the 16 numbers with two decimals, exactly like the training data of the real model. Training and held-out
samples come from different seeds and different drives (images).

Drive samples (``--drive-frames``, :mod:`~wam_diff2_ros.demo.train.drives`): instants of simulated drives (seeds 1-60,
never the sample bag's seed 0 nor a validation or test drive), asked exactly as a replay of their bag asks (speed,
measured longitudinal and lateral acceleration, the command in force, the frame at that instant) with the drive's true
future as the answer, each also mirrored (``left`` ↔ ``right``). ``--init-from`` continues training shipped demo
files; the shipped model is a base trained on the kinematic samples, continued on both (``scripts/train_demo.sh``).

Objective: masked block diffusion, matching the decoder (:mod:`wam_diff2_ros.core.engine.decoding`) exactly. The
response (answer tokens, then ``<|im_end|>`` filling the rest of the last block) is cut into blocks of 32.
One sequence ``[prompt | clean response | noisy response copies]`` carries everything: prompt rows are
block-causal (blocks of 32 from the prompt start), clean-response rows see the prompt and the clean blocks up
to their own (what the commit pass writes into the KV cache), and each noisy copy's block sees the prompt, the
clean blocks before it and itself (what a denoising step sees). Each noisy block draws its noise level
t ~ U(0, 1] and masks each token with probability t (mask id 151671); the loss is the cross-entropy on the
masked positions. Noisy tokens take the rope positions of their clean counterparts. The softmax runs over the
tokens that ever occur plus one constant "background" logit log(N_rest) that stands for all other tokens of
the real vocabulary: their embedding rows are exactly zero (logit 0), so this *is* the full-vocabulary
softmax, and they never get a gradient. At inference the full vocabulary is used unchanged.

Output (default: the package's ``demo/weights/`` folder): compact float16 weights (all tensors except the
embedding, plus the non-zero embedding rows and their token ids), ``manifest.json`` (config, sizes, sha256
of the expanded float32 weights, the training command) and ``metrics.json`` (quality measured on held-out
samples through the real :class:`~wam_diff2_ros.core.engine.Engine` with the default decoding settings).
Everything follows from the seeds; with the same thread count the run is repeatable.

Instants at any speed and pose (``--speed-frames``, :mod:`~wam_diff2_ros.demo.train.speeds`) on the same drives'
roads; validation drives 3000-3005 choose the exported weights (``--keep-best``), test drives 4000-4009 are only
reported (:mod:`~wam_diff2_ros.demo.train.held_out`, ``--judge``).

Modules: ``config``, ``data``, ``drives``, ``speeds``, ``held_out``, ``tokens``, ``model``, ``objective``,
``evaluate``, ``loop``; the command line is :mod:`wam_diff2_ros.cli.train_demo`.
"""

from wam_diff2_ros.demo.train.config import (
    BLOCK_SIZE,
    COMMAND_PROBABILITIES,
    COMMANDS,
    DEMO_PREPROCESSOR_OVERRIDES,
    DRIVE_IMAGE_SIZES,
    DRIVE_SECONDS,
    EOS_ID,
    FULL_VOCAB_SIZE,
    HELD_OUT_DRIVE_SEEDS,
    HELD_OUT_SEED,
    IMAGE_SIZE,
    IMAGE_SIZES,
    MASK_ID,
    MAX_SPEED,
    NUM_WAYPOINTS,
    SPECIAL_IDS,
    SPEED_BANDS,
    SPEED_CAP,
    TEST_DRIVE_SEEDS,
    TRAIN_DRIVE_SEEDS,
    TRAIN_SEED,
    VALIDATION_DRIVE_SEEDS,
    WAYPOINT_DT,
    ModelSizes,
    demo_config,
)
from wam_diff2_ros.demo.train.data import (
    DrivingSample,
    ImagePool,
    format_answer,
    make_samples,
    path_points,
    render_image_pool,
    sample_driving_sample,
    travelled_distance,
    turn_knots,
)
from wam_diff2_ros.demo.train.evaluate import SWEEP_SPEEDS, behaviour_sweeps, evaluate, path_length
from wam_diff2_ros.demo.train.held_out import load_engine
from wam_diff2_ros.demo.train.loop import TrainSettings, export_demo, log, make_batch, tokenise, train
from wam_diff2_ros.demo.train.model import build_training_model, compact_weights, restrict_vocabulary, training_config
from wam_diff2_ros.demo.train.objective import (
    TrainingBatch,
    TrainingExample,
    build_batch,
    diffusion_loss,
    digit_place_weights,
    noise_response,
    noisy_logits,
    sequence_mask,
    with_background,
)
from wam_diff2_ros.demo.train.tokens import demo_processor, prompt_token_ids, response_token_ids, vocabulary

__all__ = [
    "BLOCK_SIZE",
    "COMMANDS",
    "COMMAND_PROBABILITIES",
    "DEMO_PREPROCESSOR_OVERRIDES",
    "DRIVE_IMAGE_SIZES",
    "DRIVE_SECONDS",
    "EOS_ID",
    "FULL_VOCAB_SIZE",
    "HELD_OUT_DRIVE_SEEDS",
    "HELD_OUT_SEED",
    "IMAGE_SIZE",
    "IMAGE_SIZES",
    "MASK_ID",
    "MAX_SPEED",
    "NUM_WAYPOINTS",
    "SPECIAL_IDS",
    "SPEED_BANDS",
    "SPEED_CAP",
    "SWEEP_SPEEDS",
    "TEST_DRIVE_SEEDS",
    "TRAIN_DRIVE_SEEDS",
    "TRAIN_SEED",
    "VALIDATION_DRIVE_SEEDS",
    "WAYPOINT_DT",
    "DrivingSample",
    "ImagePool",
    "ModelSizes",
    "TrainSettings",
    "TrainingBatch",
    "TrainingExample",
    "behaviour_sweeps",
    "build_batch",
    "build_training_model",
    "compact_weights",
    "demo_config",
    "demo_processor",
    "diffusion_loss",
    "digit_place_weights",
    "evaluate",
    "export_demo",
    "format_answer",
    "load_engine",
    "log",
    "make_batch",
    "make_samples",
    "noise_response",
    "noisy_logits",
    "path_length",
    "path_points",
    "prompt_token_ids",
    "render_image_pool",
    "response_token_ids",
    "restrict_vocabulary",
    "sample_driving_sample",
    "sequence_mask",
    "tokenise",
    "train",
    "training_config",
    "travelled_distance",
    "turn_knots",
    "vocabulary",
    "with_background",
]
