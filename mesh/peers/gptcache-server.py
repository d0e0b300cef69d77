#!/usr/bin/env python3
"""GPTCache in front of llama-server as one OpenAI-compatible HTTP server: the semantic-cache stack a user
would assemble instead of the mesh. Runs in the venv scripts/install-regional-peers.sh makes:

  venv/bin/python mesh/peers/gptcache-server.py --listen 127.0.0.1:PORT --upstream http://127.0.0.1:LLAMA_PORT \
      --onnx-dir DIR --tokenizer PATH/tokenizer.json --data-dir SCRATCH [--threshold T]

POST /v1/chat/completions: a hit answers the cached content (as SSE, one content chunk and a finish chunk,
when "stream" is true); a miss forwards the raw body to the upstream (streams proxied event by event) and
caches the content of a 200 answer, if non-empty, before the answer's end reaches the client. Responses
carry `x-cache: HIT|MISS`. A bad request gets 400, an unreachable or garbled upstream 502 (OpenAI-shaped
errors); the upstream's own non-200 answers pass through. GET /healthz: "ok"; stdout gets `ready` once bound.

The cache is the one GPTCache 0.1.44's own OpenAI proxy builds (gptcache_server/server.py:194-198):
`init_similar_cache(pre_func=last_content)`, with each request body as the adapter's kwargs (server.py:124,
137). Paths below are under the installed gptcache/:
- key: `last_content` (processor/pre.py:20), the content of the last message;
- storage: `manager_factory("sqlite,faiss")` (adapter/api.py:177): sqlite, faiss "IDMap,Flat" L2
  (manager/vector_data/faiss.py:28) searched for the top 1 (vector_data/manager.py:3), LRU at 1000 entries
  (manager/factory.py:13), flushed every 20 saves and at exit;
- evaluation: `SearchDistanceEvaluation()` (api.py:182; similarity_evaluation/distance.py:34): score =
  4 - squared L2 distance;
- threshold: `Config().similarity_threshold`, 0.8 (config.py:40; read from the package): a hit needs
  score >= 4 * 0.8 (adapter/adapter.py:100,173), for unit vectors cosine >= 2 * 0.8 - 1 = 0.6;
- sampling (adapter.py:26-52,91): a temperature T in (0, 2) skips the lookup with probability
  1 / (1 + e^(1/T)) and searches the top 5, T >= 2 always skips, a `top_k` sets the search's top k.
  --ignore-sampling-params hides temperature and top_k from the cache (the upstream still gets them).
One deliberate change: the embedding is mesh/peers/gptcache-peer.py's int8 ONNX all-MiniLM-L6-v2 (384-d, mean
pooled, L2-normalised), not init_similar_cache's default Onnx() (GPTCache/paraphrase-albert-onnx from the
Hugging Face Hub), so both semantic peers embed alike; unlike the peer it does not pad every input to the
tokenizer.json's fixed 128 tokens (same vectors, several times faster).

Concurrency: ThreadingHTTPServer; every GPTCache get and put (embedding included) holds one lock, as
sqlite+faiss are not safe for concurrent use (GPTCache's server serialises them on its event loop); the
upstream call runs outside it. A miss embeds twice (get, then put), as GPTCache's get/put API does. Each
run makes a fresh directory under --data-dir (left for the caller); SIGTERM exits at once, flushing. GPTCache
commits sqlite on every lookup that finds a neighbour (and logs each hit in a report table), so the
filesystem of --data-dir shows in the hit latency (an fsync'ing disk vs tmpfs).
"""

import argparse
import http.client
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from gptcache import Cache, Config
from gptcache.adapter.adapter import adapt
from gptcache.adapter.api import init_similar_cache
from gptcache.manager import manager_factory
from gptcache.manager.scalar_data.base import Answer, DataType
from gptcache.processor.pre import last_content
from gptcache.similarity_evaluation import SearchDistanceEvaluation

CACHE = Cache()
LOCK = threading.Lock()
CLOSING = threading.Event()  # set at exit: handlers waiting for LOCK then leave GPTCache alone
ARGS = None


class MiniLM:
    """all-MiniLM-L6-v2 sentence embeddings from an ONNX export (as mesh/peers/gptcache-peer.py)."""

    dimension = 384

    def __init__(self, onnx_path, tokenizer_path, threads):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(tokenizer_path)
        self.tokenizer.enable_truncation(256)
        self.tokenizer.no_padding()

    def to_embeddings(self, text, **_):
        encoding = self.tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, feed)[0]
        weights = mask[..., None].astype(np.float32)
        vector = ((hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None))[0]
        return (vector / np.linalg.norm(vector)).astype(np.float32)


def cache_params(body):
    """The adapter's kwargs: the request body, as GPTCache's server passes it."""
    hidden = {"cache_obj", "search_only", "cache_skip"}
    hidden |= {"temperature", "top_k"} if ARGS.ignore_sampling_params else set()
    return {key: value for key, value in body.items() if key not in hidden}


def cache_get(params):
    with LOCK:
        if CLOSING.is_set():
            return None
        return adapt(lambda *_, **__: None, lambda answer: answer, lambda *_, **__: None,
                     **params, cache_obj=CACHE, search_only=True)


def cache_put(params, content):
    def save(_data, update_cache_func, *_, **__):
        update_cache_func(Answer(content, DataType.STR))

    with LOCK:
        if not CLOSING.is_set():
            adapt(lambda *_, **__: content, lambda answer: answer, save, **params, cache_obj=CACHE, cache_skip=True)


def sse(head, delta, finish):
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {**head, "object": "chat.completion.chunk", "choices": [choice]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *_):
        pass

    def send(self, status, body, cache="MISS", ctype="application/json"):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self.head(status, {"Content-Type": ctype, "Content-Length": str(len(body)), "x-cache": cache})
        self.wfile.write(body)

    def head(self, status, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def error(self, status, message, kind="invalid_request_error"):
        self.send(status, {"error": {"message": message, "type": kind}})

    def do_GET(self):
        if self.path == "/healthz":
            self.send(200, b"ok", ctype="text/plain")
        else:
            self.error(404, f"no route GET {self.path}")

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/chat/completions":
            return self.error(404, f"no route POST {self.path}")
        try:
            body = json.loads(raw)
        except ValueError as e:
            return self.error(400, f"malformed JSON: {e}")
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            return self.error(400, "'messages' must be a non-empty list of messages")
        if not isinstance(messages[-1].get("content"), str):
            return self.error(400, "the last message's 'content' must be a string (GPTCache's cache key)")
        params, stream = cache_params(body), body.get("stream") is True
        try:
            answer = cache_get(params)
        except Exception as e:  # pylint: disable=broad-except
            return self.error(500, f"cache lookup failed: {e!r}", "server_error")
        if answer is not None:
            head = {"id": "chatcmpl-" + uuid.uuid4().hex, "created": int(time.time()), "model": body.get("model", "")}
            if stream:
                events = sse(head, {"role": "assistant", "content": answer}, None) + sse(head, {}, "stop")
                return self.send(200, events + b"data: [DONE]\n\n", "HIT", "text/event-stream")
            choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            return self.send(200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage}, "HIT")
        upstream = urlsplit(ARGS.upstream)
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port or 80, timeout=ARGS.upstream_timeout)
        try:
            headers = {"Content-Type": "application/json"}
            if self.headers.get("Authorization"):
                headers["Authorization"] = self.headers["Authorization"]
            conn.request("POST", upstream.path.rstrip("/") + "/v1/chat/completions", raw, headers)
            response = conn.getresponse()
            streaming = response.getheader("Content-Type", "").startswith("text/event-stream")
            if response.status != 200 or not (stream and streaming):
                return self.relay(response, params)
            self.close_connection = True
            self.head(200, {"Content-Type": "text/event-stream", "Connection": "close", "x-cache": "MISS"})
            self.proxy_stream(response, params)
        except (OSError, http.client.HTTPException) as e:
            if not self.wfile.closed and not self.close_connection:
                self.error(502, f"upstream {ARGS.upstream}: {e!r}", "upstream_error")
        finally:
            conn.close()

    def relay(self, response, params):
        """A whole upstream answer: cached when 200 with a content, passed through either way."""
        data = response.read()
        if response.status == 200:
            try:
                content = json.loads(data)["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                return self.error(502, "upstream answered 200 without a chat completion", "upstream_error")
            if isinstance(content, str) and content:
                cache_put(params, content)
        self.send(response.status, data, ctype=response.getheader("Content-Type", "application/json"))

    def proxy_stream(self, response, params):
        """Forwards SSE events as they arrive; caches the content once [DONE] comes, before forwarding it."""
        parts, event = [], b""
        for line in response:
            event += line
            if line.strip():
                continue
            for field in event.splitlines():
                payload = field[5:].strip() if field.startswith(b"data:") else None
                if payload == b"[DONE]":
                    if "".join(parts):
                        cache_put(params, "".join(parts))
                elif payload:
                    try:
                        delta = json.loads(payload)["choices"][0]["delta"].get("content")
                    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                        delta = None
                    if isinstance(delta, str):
                        parts.append(delta)
            self.wfile.write(event)
            event = b""
        self.wfile.write(event)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--upstream", required=True, help="llama-server base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--onnx-dir", required=True, help="directory holding model.onnx")
    parser.add_argument("--tokenizer", required=True, help="all-MiniLM-L6-v2's tokenizer.json")
    parser.add_argument("--data-dir", required=True, help="a fresh cache directory is made under it")
    parser.add_argument("--threshold", type=float, default=Config().similarity_threshold,
                        help="GPTCache similarity_threshold (default: Config()'s, %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--ignore-sampling-params", action="store_true",
                        help="hide temperature and top_k from the cache (still sent upstream)")
    parser.add_argument("--upstream-timeout", type=float, default=600.0)
    ARGS = parser.parse_args()

    model = MiniLM(os.path.join(ARGS.onnx_dir, "model.onnx"), ARGS.tokenizer, ARGS.threads)
    model.to_embeddings("warm up")
    os.makedirs(ARGS.data_dir, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix="gptcache-", dir=ARGS.data_dir)
    manager = manager_factory("sqlite,faiss", data_dir=data_dir, vector_params={"dimension": model.dimension})
    init_similar_cache(cache_obj=CACHE, pre_func=last_content, embedding=model, data_manager=manager,
                       evaluation=SearchDistanceEvaluation(), config=Config(similarity_threshold=ARGS.threshold))
    host, port = ARGS.listen.rsplit(":", 1)
    ThreadingHTTPServer.request_queue_size = 256  # a burst of clients must not overflow the accept backlog
    server = ThreadingHTTPServer((host, int(port)), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"gptcache-server: {ARGS.listen} -> {ARGS.upstream}, threshold {ARGS.threshold} "
          f"(cosine >= {2 * ARGS.threshold - 1:.3f}), data in {data_dir}", file=sys.stderr)
    print("ready", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        # Keeps handler threads out of GPTCache while its atexit hook flushes sqlite and faiss.
        CLOSING.set()
        LOCK.acquire(timeout=10)
        server.server_close()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
