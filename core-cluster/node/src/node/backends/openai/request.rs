//! The request an OpenAI-compatible server is sent for a generation (`/chat/completions`, or
//! `/completions` for a text completion's raw prompt), and the refusal of what such a server is not
//! asked to do. Only OpenAI's own parameters go out; a request that needs one the API does
//! not have (top-k, vLLM's repetition penalty, generating past the end of the turn) or one this adapter
//! does not relay (several choices, log-probabilities) is refused naming it, never sent without it.

use proto::inference::GenerateRequest;
use serde_json::{json, Value};

use crate::node::error::CoreError;

/// The path, under the backend's `/v1` URL, that answers `request`.
pub fn path(request: &GenerateRequest) -> &'static str {
    if request.raw_prompt {
        "completions"
    } else {
        "chat/completions"
    }
}

/// The JSON body of a streamed call to [`path`] for `request`, naming the model `upstream_model`.
pub fn body(request: &GenerateRequest, upstream_model: &str) -> Result<Value, CoreError> {
    let sampling = request.sampling.clone().unwrap_or_default();
    let refuse = |parameter: &str| {
        Err(CoreError::InvalidArgument(format!(
            "{parameter} is not supported by model {:?}'s OpenAI-compatible backend",
            request.model
        )))
    };
    if sampling.n > 1 {
        return refuse("n > 1");
    }
    if sampling.logprobs || sampling.top_logprobs > 0 {
        return refuse("logprobs");
    }
    if sampling.top_k > 0 {
        return refuse("top_k");
    }
    if sampling.repetition_penalty != 0.0 && sampling.repetition_penalty != 1.0 {
        return refuse("repetition_penalty");
    }
    if sampling.ignore_eos {
        return refuse("ignore_eos");
    }
    let (field, input) = if request.raw_prompt {
        match request.messages.as_slice() {
            [prompt] if prompt.role == "user" => ("prompt", json!(prompt.content)),
            _ => {
                return Err(CoreError::InvalidArgument(
                    "a text completion carries exactly one user message, its prompt".into(),
                ))
            }
        }
    } else {
        let messages: Vec<Value> =
            request.messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
        ("messages", json!(messages))
    };
    let mut body = json!({
        "model": upstream_model,
        field: input,
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": sampling.temperature,
    });
    let fields = body.as_object_mut().expect("a JSON object");
    if sampling.max_tokens > 0 {
        fields.insert("max_tokens".into(), json!(sampling.max_tokens));
    }
    if sampling.top_p > 0.0 && sampling.top_p < 1.0 {
        fields.insert("top_p".into(), json!(sampling.top_p));
    }
    if let Some(seed) = sampling.seed {
        fields.insert("seed".into(), json!(seed));
    }
    if !sampling.stop.is_empty() {
        fields.insert("stop".into(), json!(sampling.stop));
    }
    if sampling.frequency_penalty != 0.0 {
        fields.insert("frequency_penalty".into(), json!(sampling.frequency_penalty));
    }
    if sampling.presence_penalty != 0.0 {
        fields.insert("presence_penalty".into(), json!(sampling.presence_penalty));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::{ChatMessage, Sampling};

    fn request(sampling: Sampling) -> GenerateRequest {
        GenerateRequest {
            model: "m".into(),
            messages: vec![ChatMessage { role: "user".into(), content: "Who wrote Hamlet?".into() }],
            sampling: Some(sampling),
            ..Default::default()
        }
    }

    #[test]
    fn openai_parameters_go_out_and_unset_ones_stay_unset() {
        let sampling = Sampling {
            max_tokens: 32,
            temperature: 0.5,
            top_p: 0.9,
            seed: Some(7),
            stop: vec!["\n".into()],
            ..Default::default()
        };
        let body = body(&request(sampling), "served-name").expect("allowed");
        assert_eq!(body["model"], "served-name");
        assert_eq!(body["messages"][0]["content"], "Who wrote Hamlet?");
        assert_eq!((body["max_tokens"].as_u64(), body["seed"].as_u64()), (Some(32), Some(7)));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(body.get("frequency_penalty").is_none() && body.get("top_k").is_none(), "{body}");
    }

    #[test]
    fn a_raw_prompt_goes_to_the_completions_api_as_it_is() {
        let mut raw = request(Sampling { max_tokens: 8, ..Default::default() });
        raw.raw_prompt = true;
        raw.messages[0].content = "Question: What is the capital of France?\nAnswer:".into();
        let sent = body(&raw, "base").expect("allowed");
        assert_eq!(
            (path(&raw), sent["prompt"].as_str()),
            ("completions", Some(raw.messages[0].content.as_str()))
        );
        assert!(sent.get("messages").is_none(), "{sent}");
        assert_eq!(path(&request(Sampling::default())), "chat/completions");
        raw.messages.push(raw.messages[0].clone());
        assert!(matches!(body(&raw, "base"), Err(CoreError::InvalidArgument(_))));
    }

    #[test]
    fn parameters_the_api_lacks_are_refused_by_name() {
        for (sampling, name) in [
            (Sampling { n: 2, ..Default::default() }, "n > 1"),
            (Sampling { logprobs: true, ..Default::default() }, "logprobs"),
            (Sampling { top_k: 40, ..Default::default() }, "top_k"),
            (Sampling { repetition_penalty: 1.2, ..Default::default() }, "repetition_penalty"),
            (Sampling { ignore_eos: true, ..Default::default() }, "ignore_eos"),
        ] {
            match body(&request(sampling), "m") {
                Err(CoreError::InvalidArgument(message)) => assert!(message.starts_with(name), "{message}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
