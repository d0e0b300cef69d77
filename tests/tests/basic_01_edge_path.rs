//! The first path through every tier, driven through the edge under `wrangler dev` (real workerd):
//! bad input is refused at the edge, a request is generated once and then answered from cache, and
//! streaming works end to end; `n` and `logprobs` work; a paraphrase the regional tier matched is then
//! answered at the edge.

use std::time::Duration;

use mesh_harness::client::ChatClient;
use mesh_harness::poll::poll_every;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 32,
           "messages": [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": question}]})
}

fn assert_openai_error(reply: &mesh_harness::client::Reply, status: u16) {
    assert_eq!(reply.status, status, "body: {}", reply.body);
    let error = &reply.json()["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "not an OpenAI error: {}", reply.body);
    assert!(error["type"].is_string(), "not an OpenAI error: {}", reply.body);
    let fields = error.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    for field in ["message", "type", "param", "code"] {
        assert!(fields.iter().any(|f| f == field), "error lacks `{field}`: {}", reply.body);
    }
}

#[test]
fn edge_path_miss_then_hit_streaming_and_bad_input() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-edge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { regional_nodes: 1, ..MeshSpec::local(&dir) })?;
    let edge_url = mesh.edge_url().expect("edge runs");
    let client = mesh.client();

    // Bad input and bad keys are answered at the edge, in OpenAI's error shape.
    assert_openai_error(&ChatClient::new(&edge_url, None).chat(&request("hi"))?, 401);
    assert_openai_error(&ChatClient::new(&edge_url, Some("sk-wrong")).chat(&request("hi"))?, 401);
    assert_openai_error(&client.chat_raw("{\"model\": \"smollm2-135m-instruct\", \"messages\": [")?, 400);
    assert_openai_error(&client.chat_raw(r#"{"model":"smollm2-135m-instruct","messages":"hello"}"#)?, 400);
    assert_openai_error(
        &client
            .chat_raw(r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":null}]}"#)?,
        400,
    );
    // A chunked body declares no length: it is cut off at the limit, not read whole.
    let mut oversized =
        br#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":""#.to_vec();
    oversized.extend(std::iter::repeat_n(b'x', shared::MAX_REQUEST_BYTES + 1024));
    oversized.extend_from_slice(br#""}]}"#);
    assert_openai_error(&client.chat_chunked(oversized)?, 413);
    let as_text =
        client.chat_with_headers(&request("What is a JSON body?"), &[("content-type", "text/plain")])?;
    assert_openai_error(&as_text, 400);
    assert_openai_error(&client.chat_raw(r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}"#)?, 400);
    assert_openai_error(
        &client.chat(&json!({"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}))?,
        404,
    );

    // The OpenAI SDKs' `models.list()` works through the edge: the core's registry, as a list.
    let models = client.get("/v1/models")?;
    assert_eq!(models.status, 200, "{}", models.body);
    let ids: Vec<String> = models.json()["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    assert!(ids.iter().any(|id| id == "smollm2-135m-instruct"), "{}", models.body);
    // ... and `models.retrieve(id)`: the model, or an OpenAI-shaped 404.
    let model = client.get("/v1/models/smollm2-135m-instruct")?;
    assert_eq!(
        (model.status, model.json()["id"].as_str()),
        (200, Some("smollm2-135m-instruct")),
        "{}",
        model.body
    );
    assert_openai_error(&client.get("/v1/models/no-such-model")?, 404);

    // The same request twice: generated once, then a hit with identical content.
    let question = request("What is the capital of France?");
    let miss = client.chat(&question)?;
    assert_eq!(miss.status, 200, "{}", miss.body);
    assert_eq!(miss.header("x-cache"), Some("MISS"));
    let content = miss.content().expect("content");
    assert!(!content.trim().is_empty(), "empty answer");
    assert!(!content.contains("<|im_") && !content.contains("<|endoftext|>"), "ChatML marker in {content:?}");
    let timing = miss.header("server-timing").unwrap_or_default();
    for tier in ["edge", "regional", "core", "pod-decode"] {
        assert!(timing.contains(tier), "Server-Timing lacks {tier}: {timing}");
    }
    let hit = client.chat(&question)?;
    assert_eq!(hit.status, 200, "{}", hit.body);
    assert_eq!(hit.header("x-cache"), Some("HIT-EDGE"), "second request: {:?}", hit.headers);
    assert_eq!(hit.content().as_deref(), Some(content.as_str()));
    assert_eq!(hit.json()["id"], miss.json()["id"]);
    assert!(hit.header("server-timing").unwrap_or_default().contains("edge"));
    println!("through the edge: MISS {:?}, HIT-EDGE {:?}", miss.elapsed, hit.elapsed);

    // Penalties are honoured (generated again: they change the answer, so they change the key), and a
    // penalty out of range is refused in OpenAI's shape.
    let mut penalized = question.clone();
    penalized["frequency_penalty"] = serde_json::json!(0.8);
    penalized["presence_penalty"] = serde_json::json!(0.4);
    penalized["repetition_penalty"] = serde_json::json!(1.3);
    let answered = client.chat(&penalized)?;
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.header("x-cache"), Some("MISS"), "{:?}", answered.headers);
    assert_ne!(answered.header("x-cache-key"), miss.header("x-cache-key"));
    assert!(answered.content().is_some_and(|c| !c.trim().is_empty()));
    penalized["frequency_penalty"] = serde_json::json!(3);
    let refused = client.chat(&penalized)?;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.json()["error"]["param"], "frequency_penalty", "{}", refused.body);

    choices_and_log_probabilities(&client, &question, &hit)?;

    // Streaming: chunks arrive while the answer is generated, and they add up to the non-streamed answer.
    let story = request("Write two sentences about the sea.");
    let mut story_with_usage = story.clone();
    story_with_usage["stream_options"] = serde_json::json!({"include_usage": true});
    let stream = client.chat_stream(&story_with_usage)?;
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("x-cache"), Some("MISS"));
    assert!(stream.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")));
    assert!(stream.finished(), "stream did not end with [DONE]: {:?}", stream.events.last());
    let arrivals = stream.content_arrivals();
    assert!(arrivals.len() >= 3, "expected several content chunks, got {}", arrivals.len());
    // Generation takes tens of milliseconds per token, so a stream that was not buffered spreads its chunks
    // out; a buffered one delivers them in the same instant.
    let spread = arrivals[arrivals.len() - 1] - arrivals[0];
    assert!(spread >= Duration::from_millis(20), "chunks arrived together ({spread:?}): {arrivals:?}");
    let streamed = stream.content();
    assert!(!streamed.trim().is_empty() && !streamed.contains("<|im_"));
    let whole = client.chat(&story)?;
    assert!(whole.header("x-cache").is_some_and(|x| x.starts_with("HIT")), "{:?}", whole.headers);
    assert_eq!(whole.content().as_deref(), Some(streamed.as_str()));
    // `stream_options.include_usage`: one last chunk, without choices, carries the same counts as the
    // whole answer's `usage`.
    assert_eq!(stream.usages(), vec![whole.json()["usage"].clone()], "usage of the streamed miss");
    assert!(whole.json()["usage"]["completion_tokens"].as_u64().is_some_and(|n| n > 0));

    // A streamed hit is a proper event stream with the same text.
    let replay = client.chat_stream(&story)?;
    assert!(replay.header("x-cache").is_some_and(|x| x.starts_with("HIT")));
    assert!(replay.finished());
    assert_eq!(replay.content(), streamed);
    assert!(replay.usages().is_empty(), "usage nobody asked for: {:?}", replay.usages());
    let replay_with_usage = client.chat_stream(&story_with_usage)?;
    assert!(replay_with_usage.header("x-cache").is_some_and(|x| x.starts_with("HIT")));
    assert_eq!(replay_with_usage.usages(), vec![whole.json()["usage"].clone()], "usage of a streamed hit");
    let mut unstreamed_options = story.clone();
    unstreamed_options["stream_options"] = serde_json::json!({"include_usage": true});
    assert_eq!(client.chat(&unstreamed_options)?.status, 400, "stream_options without stream");

    // The edge's own paraphrase matching is off by default: a paraphrase the regional tier matched is
    // kept at the edge under the paraphrase's own key, bound
    // to the matched entry: asked again it is an edge hit, and an invalidation of the matched entry at
    // the core withdraws it.
    let original = request("What is the boiling point of water at sea level?");
    let asked = client.chat(&original)?;
    assert_eq!(asked.header("x-cache"), Some("MISS"), "{:?}", asked.headers);
    let original_key = asked.header("x-cache-key").expect("a key").to_owned();
    let reworded = request("What's the boiling point of water at sea level?");
    let matched = client.chat(&reworded)?;
    assert_eq!(matched.header("x-cache"), Some("HIT-REGIONAL-SEMANTIC"), "{:?}", matched.headers);
    let again = client.chat(&reworded)?;
    assert_eq!(again.header("x-cache"), Some("HIT-EDGE-SEMANTIC"), "{:?}", again.headers);
    assert_eq!(again.header("x-cache-matched-key"), Some(original_key.as_str()));
    assert_eq!(again.header("x-cache-key"), matched.header("x-cache-key"));
    assert_eq!(again.content(), asked.content());
    assert_eq!(mesh.regional_client(0).invalidate(&original_key)?.status, 200);
    let what = "the edge no longer serving a paraphrase of an invalidated entry";
    let reply = poll_every(Duration::from_millis(100), Duration::from_secs(5), what, || {
        let reply = client.chat(&reworded)?;
        Ok((!reply.header("x-cache").unwrap_or_default().starts_with("HIT-EDGE")).then_some(reply))
    })?;
    assert_ne!(reply.header("x-cache"), Some("HIT-REGIONAL-SEMANTIC"), "served the invalidated entry");

    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `n` and `logprobs` through the edge: greedy choices are copies of the cached answer (`hit`); sampled
/// choices are drawn at the pod and never cached; log-probabilities cover every token of the text, whole
/// and streamed.
fn choices_and_log_probabilities(
    client: &ChatClient,
    question: &serde_json::Value,
    hit: &mesh_harness::client::Reply,
) -> anyhow::Result<()> {
    let mut three = question.clone();
    three["n"] = json!(3);
    let copied = client.chat(&three)?;
    assert_eq!(copied.status, 200, "{}", copied.body);
    assert!(copied.header("x-cache").is_some_and(|x| x.starts_with("HIT")), "{:?}", copied.headers);
    let choices = copied.json()["choices"].as_array().cloned().unwrap_or_default();
    assert_eq!(choices.len(), 3, "{}", copied.body);
    for (index, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], json!(index));
        assert_eq!(choice["message"]["content"], hit.json()["choices"][0]["message"]["content"]);
    }
    let one = hit.json()["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    assert_eq!(
        copied.json()["usage"]["completion_tokens"].as_u64(),
        Some(3 * one),
        "usage counts every choice"
    );

    let mut sampled = request("Name one colour of the rainbow.");
    sampled["temperature"] = json!(1.0);
    sampled["seed"] = json!(11);
    sampled["n"] = json!(2);
    let drawn = client.chat(&sampled)?;
    assert_eq!(drawn.status, 200, "{}", drawn.body);
    assert_eq!(drawn.header("x-cache"), Some("MISS"), "{:?}", drawn.headers);
    assert_eq!(drawn.header("cache-control"), Some("no-store"), "{:?}", drawn.headers);
    let choices = drawn.json()["choices"].as_array().cloned().unwrap_or_default();
    assert_eq!(choices.iter().map(|c| c["index"].as_u64()).collect::<Vec<_>>(), [Some(0), Some(1)]);
    assert!(choices.iter().all(|c| c["finish_reason"].is_string() && c["message"]["content"].is_string()));
    let streamed_choices = client.chat_stream(&json_with(&sampled, "stream", json!(true)))?;
    assert!(streamed_choices.finished());
    for index in 0..2 {
        assert_eq!(
            streamed_choices.content_of(index),
            choices[index as usize]["message"]["content"].as_str().unwrap_or_default(),
            "choice {index} streamed as drawn (seeded)"
        );
    }

    let mut logged = request("What is the capital of Italy?");
    logged["logprobs"] = json!(true);
    logged["top_logprobs"] = json!(2);
    let whole = client.chat(&logged)?;
    assert_eq!(whole.status, 200, "{}", whole.body);
    let text = whole.content().unwrap_or_default();
    let tokens = whole.json()["choices"][0]["logprobs"]["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(token_text(&tokens), text, "one entry per token of the text");
    for token in &tokens {
        let top = token["top_logprobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(top.len(), 2, "{token}");
        // Greedy decoding takes the most likely token.
        assert_eq!(top[0]["token"], token["token"], "{token}");
        assert!(token["logprob"].as_f64().is_some_and(|l| l <= 0.0), "{token}");
    }
    let stream = client.chat_stream(&json_with(&logged, "stream", json!(true)))?;
    assert!(stream.finished());
    assert_eq!(stream.content(), text, "greedy: the same answer streamed");
    assert_eq!(token_text(&stream.logprobs_of(0)), text, "streamed chunks carry their tokens");
    let refused = client.chat(&json_with(&question.clone(), "top_logprobs", json!(2)))?;
    assert_eq!(refused.status, 400, "top_logprobs without logprobs: {}", refused.body);
    Ok(())
}

fn json_with(body: &serde_json::Value, field: &str, value: serde_json::Value) -> serde_json::Value {
    let mut body = body.clone();
    body[field] = value;
    body
}

/// The text the tokens' bytes spell.
fn token_text(tokens: &[serde_json::Value]) -> String {
    let bytes: Vec<u8> = tokens
        .iter()
        .flat_map(|t| t["bytes"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
