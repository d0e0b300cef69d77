//! Whole and streamed answers: OpenAI's JSON, and the same text both ways at temperature 0.

use shared::openai::ChatCompletion;

use super::client::post;
use super::{question, sse_chunks, Pod, CHAT, MODEL};

const SPIDER: &str = "How many legs does a spider have?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_whole_and_streamed_alike_at_temperature_zero() {
    let pod = Pod::start(None).await;

    let whole = post(pod.addr, CHAT, None, &question(SPIDER, 24, "")).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert!(whole.headers.contains("content-type: application/json"), "{}", whole.headers);
    let completion: ChatCompletion = serde_json::from_str(&whole.body).expect("a chat.completion");
    assert_eq!(completion.object, "chat.completion");
    assert!(completion.id.starts_with("chatcmpl-") && completion.created > 0, "{completion:?}");
    assert_eq!(completion.model, MODEL);
    assert_eq!(completion.choices.len(), 1);
    let choice = &completion.choices[0];
    assert_eq!((choice.index, choice.message.role.as_str()), (0, "assistant"));
    let text = &choice.message.content;
    assert!(text.split_whitespace().count() >= 3 && !text.contains("<|im_"), "{text:?}");
    assert!(["stop", "length"].contains(&choice.finish_reason.as_str()), "{}", choice.finish_reason);
    let usage = completion.usage;
    assert!(usage.prompt_tokens > 10 && (1..=24).contains(&usage.completion_tokens), "{usage:?}");
    assert_eq!(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);

    for (extra, with_usage) in
        [(r#","stream":true,"stream_options":{"include_usage":true}"#, true), (r#","stream":true"#, false)]
    {
        let streamed = post(pod.addr, CHAT, None, &question(SPIDER, 24, extra)).await;
        assert_eq!(streamed.status, 200, "{}", streamed.body);
        assert!(streamed.headers.contains("content-type: text/event-stream"), "{}", streamed.headers);
        let chunks = sse_chunks(&streamed.body);
        let id = &chunks[0].id;
        assert!(id.starts_with("chatcmpl-") && *id != completion.id, "{id}");
        assert!(chunks
            .iter()
            .all(|c| c.object == "chat.completion.chunk" && c.id == *id && c.model == MODEL));
        assert_eq!(chunks[0].choices[0].delta.role.as_deref(), Some("assistant"));
        let streamed_text: String =
            chunks.iter().flat_map(|c| &c.choices).filter_map(|c| c.delta.content.as_deref()).collect();
        assert_eq!(&streamed_text, text, "the stream tells the whole answer's text");
        let finishes: Vec<&str> =
            chunks.iter().flat_map(|c| &c.choices).filter_map(|c| c.finish_reason.as_deref()).collect();
        assert_eq!(finishes, [choice.finish_reason.as_str()]);
        let counted: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
        if with_usage {
            assert_eq!(counted, [usage], "one usage chunk, with the whole answer's counts");
            let last = chunks.last().expect("chunks");
            assert!(last.choices.is_empty() && last.usage.is_some(), "the usage chunk comes last");
        } else {
            assert!(counted.is_empty(), "no usage chunk unless asked for");
        }
    }

    let cut = post(pod.addr, CHAT, None, &question("Tell me about the sea.", 3, "")).await;
    let cut: ChatCompletion = serde_json::from_str(&cut.body).expect("a chat.completion");
    assert_eq!((cut.choices[0].finish_reason.as_str(), cut.usage.completion_tokens), ("length", 3));

    pod.stop().await;
}
