#!/usr/bin/env python3
"""The semantic tier's benchmark peer: GPTCache with faiss and all-MiniLM-L6-v2.

Runs inside the virtual environment scripts/install-regional-peers.sh makes. For every labelled pair of
the input (JSON lines with "a", "b", "label"), it puts question "a" into a fresh GPTCache (sqlite +
faiss flat L2 index, SearchDistanceEvaluation) and asks question "b", timing each `get` including the
embedding. The embedding is all-MiniLM-L6-v2 as an int8 ONNX export run by onnxruntime (mean pooling over
the attention mask, L2-normalised, as sentence-transformers does), with the model's own tokenizer.json.

For unit vectors faiss's squared L2 distance is 2 - 2cos, and SearchDistanceEvaluation scores 4 - d2; a
hit needs score >= 4 * similarity_threshold, i.e. cos >= 2 * threshold - 1. So the cosine threshold the
mesh uses is passed as threshold (1 + cos) / 2, and both systems decide at the same similarity.

Prints one JSON object: latency samples of hits (ms), and the hit decision of every pair.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from gptcache import Cache, Config
from gptcache.adapter.api import get, init_similar_cache, put
from gptcache.manager import manager_factory
from gptcache.processor.pre import get_prompt
from gptcache.similarity_evaluation import SearchDistanceEvaluation


class MiniLM:
    """all-MiniLM-L6-v2 sentence embeddings from an ONNX export."""

    dimension = 384

    def __init__(self, onnx_path, tokenizer_path, threads):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(tokenizer_path)
        self.tokenizer.enable_truncation(256)

    def to_embeddings(self, text, **_):
        encoding = self.tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        types = np.zeros_like(ids)
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        vector = pooled[0]
        return (vector / np.linalg.norm(vector)).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--cosine", type=float, required=True, help="the cosine similarity a hit needs")
    parser.add_argument("--reps", type=int, default=5, help="timed gets per pair")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scratch", required=True, help="directory for the caches' files (left for the caller)")
    args = parser.parse_args()

    pairs = [json.loads(line) for line in open(args.pairs, encoding="utf-8") if line.strip()]
    model = MiniLM(args.onnx, args.tokenizer, args.threads)
    model.to_embeddings("warm up")
    threshold = (1.0 + args.cosine) / 2.0
    decisions, hit_ms = [], []
    for pair in pairs:
        # GPTCache flushes every cache's index at exit, so their directories must outlive this loop.
        data_dir = tempfile.mkdtemp(prefix="gptcache-", dir=args.scratch)
        cache = Cache()
        manager = manager_factory("sqlite,faiss", data_dir=data_dir, vector_params={"dimension": 384})
        init_similar_cache(
            cache_obj=cache,
            pre_func=get_prompt,
            embedding=model,
            data_manager=manager,
            evaluation=SearchDistanceEvaluation(),
            config=Config(similarity_threshold=threshold),
        )
        put(pair["a"], "cached answer", cache_obj=cache)
        hit = False
        for _ in range(args.reps):
            started = time.perf_counter()
            answer = get(pair["b"], cache_obj=cache)
            elapsed = (time.perf_counter() - started) * 1000.0
            hit = answer is not None
            if hit:
                hit_ms.append(elapsed)
        decisions.append({"id": pair.get("id"), "label": pair["label"], "hit": hit})
    json.dump({"hit_ms": hit_ms, "decisions": decisions, "threshold": threshold}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
