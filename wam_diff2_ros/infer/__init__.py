"""Batch inference over a reference-format eval.json (`wam-diff2-infer`): `samples` reads the input and
builds each sample's chat and record; `batch` decodes in batches, writes, resumes and merges torchrun shards."""
