//! The model and one generation: chunked prefill of the prompt, then one token per step.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::{ModelWeights, MAX_SEQ_LEN};

use super::detokenizer::IncrementalDecoder;
use super::request::{FinishReason, GenerationSummary, SamplingParams, Timings};
use super::sampler::Sampler;
use super::stop::StopMatcher;
use super::tokenizer::ChatTokenizer;
use super::weights::{requantize_q4_1, WeightFormat};
use super::InferenceError;

/// Prompt tokens per forward pass. Bounds the attention scores of a long prompt
/// (heads x chunk x context floats) to tens of megabytes.
const PREFILL_CHUNK: usize = 512;

/// The loaded model and its tokenizer.
pub struct Engine {
    /// The weights with an empty KV cache; each generation runs on a clone (the tensors are shared),
    /// so no state (KV cache, causal masks) outlives a request.
    weights: ModelWeights,
    /// The tokenizer from the same GGUF file.
    tokenizer: Arc<ChatTokenizer>,
    /// Usable context window in tokens: the model's, capped by candle's rotary table.
    context: usize,
    /// Where the tensors live (the CPU).
    device: Device,
}

impl Engine {
    /// Loads a GGUF model (Llama architecture) and its tokenizer onto the CPU, holding the linear
    /// weights in `format`.
    pub fn load(path: &Path, format: WeightFormat) -> Result<Self, InferenceError> {
        let io_error = |source| InferenceError::ModelFile { path: path.display().to_string(), source };
        let mut file = File::open(path).map_err(io_error)?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| e.with_path(path))?;
        let tokenizer = Arc::new(ChatTokenizer::from_gguf(&content)?);
        let trained_context = content
            .metadata
            .get("llama.context_length")
            .and_then(|v| v.to_u32().ok())
            .map_or(MAX_SEQ_LEN, |n| n as usize);
        let device = Device::Cpu;
        let weights = match format {
            WeightFormat::AsStored => ModelWeights::from_gguf(content, &mut file, &device)?,
            WeightFormat::Q8_0 => {
                let (content, mut image) = requantize_q4_1(&content, &mut file, &device)?;
                ModelWeights::from_gguf(content, &mut image, &device)?
            }
        };
        Ok(Self { weights, tokenizer, context: trained_context.min(MAX_SEQ_LEN), device })
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Arc<ChatTokenizer> {
        &self.tokenizer
    }

    /// The usable context window (prompt plus generated tokens), in tokens.
    pub fn context_len(&self) -> usize {
        self.context
    }

    /// Generates a continuation of `prompt`, handing each piece of text to `on_text` as soon as it
    /// is complete UTF-8 and cannot be part of a stop string.
    ///
    /// `on_text` returns `false` when nobody is listening any more; generation then stops with
    /// [`InferenceError::Cancelled`]. `enqueued` is when the request arrived, for the queue time and TTFT.
    pub fn generate(
        &self,
        prompt: &[u32],
        params: &SamplingParams,
        enqueued: Instant,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerationSummary, InferenceError> {
        if prompt.is_empty() {
            return Err(InferenceError::InvalidRequest("empty prompt".into()));
        }
        if prompt.len() >= self.context {
            return Err(InferenceError::PromptTooLong { prompt_tokens: prompt.len(), context: self.context });
        }
        let start = Instant::now();
        let special = self.tokenizer.special_tokens();
        let mut model = self.weights.clone();
        let mut sampler = Sampler::new(params);

        let mut logits = None;
        for (i, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
            let input = Tensor::new(chunk, &self.device)?.unsqueeze(0)?;
            logits = Some(model.forward(&input, i * PREFILL_CHUNK)?);
        }
        let logits = logits.ok_or_else(|| InferenceError::InvalidRequest("empty prompt".into()))?;
        let mut token = sampler.sample(&logits.squeeze(0)?)?;
        let first_token_at = Instant::now();
        let mut generated: u32 = 1;

        let mut decoder = IncrementalDecoder::new();
        let mut stops = StopMatcher::new(&params.stop);
        let finish_reason = loop {
            if token == special.im_end || token == special.end_of_text {
                break FinishReason::Stop;
            }
            // Other special tokens (`<|im_start|>`, `<file_sep>`, ...) never reach the client.
            if !self.tokenizer.is_special(token) {
                let text = decoder.push(self.tokenizer.token_bytes(token));
                if !text.is_empty() {
                    let scan = stops.push(&text);
                    if !scan.emit.is_empty() && !on_text(&scan.emit) {
                        return Err(InferenceError::Cancelled);
                    }
                    if scan.stopped {
                        break FinishReason::Stop;
                    }
                }
            }
            // `token` sits at this position; feeding it to the model needs a slot in the context.
            let position = prompt.len() + generated as usize - 1;
            if generated >= params.max_tokens || position >= self.context {
                break FinishReason::Length;
            }
            let input = Tensor::new(&[token], &self.device)?.unsqueeze(0)?;
            let logits = model.forward(&input, position)?;
            token = sampler.sample(&logits.squeeze(0)?)?;
            generated += 1;
        };
        // Text held back for a stop string that never came; bytes of a character cut by the end stay unsent.
        let tail = stops.finish();
        if !tail.is_empty() && !on_text(&tail) {
            return Err(InferenceError::Cancelled);
        }

        let end = Instant::now();
        let prefill = first_token_at - start;
        let decode = end - first_token_at;
        tracing::debug!(
            prompt_tokens = prompt.len(),
            completion_tokens = generated,
            prefill_ms = prefill.as_millis() as u64,
            decode_ms = decode.as_millis() as u64,
            "generation finished"
        );
        Ok(GenerationSummary {
            finish_reason,
            prompt_tokens: prompt.len() as u32,
            completion_tokens: generated,
            timings: Timings {
                queue: start.saturating_duration_since(enqueued),
                prefill,
                decode,
                ttft: first_token_at.saturating_duration_since(enqueued),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::chat_template::encode_prompt;
    use crate::inference::request::{ChatMessage, Role};
    use crate::inference::test_support::engine;

    /// Runs a one-user-message chat and returns the text and the summary.
    fn chat(question: &str, params: &SamplingParams) -> (String, GenerationSummary) {
        let engine = engine();
        let prompt =
            encode_prompt(engine.tokenizer(), &[ChatMessage::new(Role::User, question)]).expect("prompt");
        let mut text = String::new();
        let summary = engine
            .generate(&prompt, params, Instant::now(), &mut |piece| {
                text.push_str(piece);
                true
            })
            .expect("generate");
        (text, summary)
    }

    #[test]
    fn greedy_answer_names_paris_and_is_deterministic() {
        let params = SamplingParams::greedy(20);
        let (text, summary) = chat("What is the capital of France?", &params);
        assert!(text.contains("Paris"), "{text:?}");
        assert!(!text.contains("<|im_") && !text.contains('\u{FFFD}'), "{text:?}");
        assert!(summary.completion_tokens <= 20 && summary.prompt_tokens > 10);
        assert!(summary.timings.ttft >= summary.timings.prefill);
        let (again, _) = chat("What is the capital of France?", &params);
        assert_eq!(text, again);
    }

    #[test]
    fn max_tokens_is_honoured() {
        let (text, summary) = chat("Write a long story about a dragon.", &SamplingParams::greedy(5));
        assert_eq!(summary.finish_reason, FinishReason::Length);
        assert_eq!(summary.completion_tokens, 5);
        assert!(!text.is_empty());
    }

    #[test]
    fn a_stop_string_truncates_the_output() {
        let question = "What is the capital of France?";
        let (full, _) = chat(question, &SamplingParams::greedy(20));
        let cut = full.find("Paris").expect("the greedy answer names Paris");
        let params = SamplingParams { stop: vec!["Paris".into()], ..SamplingParams::greedy(20) };
        let (text, summary) = chat(question, &params);
        assert_eq!(text, full[..cut]);
        assert_eq!(summary.finish_reason, FinishReason::Stop);
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let params =
            SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(42), ..SamplingParams::greedy(12) };
        let (first, _) = chat("Tell me a fun fact.", &params);
        let (second, _) = chat("Tell me a fun fact.", &params);
        assert_eq!(first, second);
        assert!(!first.contains("<|im_"));
    }

    #[test]
    fn cancels_when_nobody_listens() {
        let engine = engine();
        let prompt = encode_prompt(engine.tokenizer(), &[ChatMessage::new(Role::User, "Count to ten.")])
            .expect("prompt");
        let result = engine.generate(&prompt, &SamplingParams::greedy(50), Instant::now(), &mut |_| false);
        assert!(matches!(result, Err(InferenceError::Cancelled)));
    }

    #[test]
    fn rejects_a_prompt_longer_than_the_context() {
        let engine = engine();
        let prompt = vec![100u32; engine.context_len()];
        let result = engine.generate(&prompt, &SamplingParams::greedy(1), Instant::now(), &mut |_| true);
        assert!(matches!(result, Err(InferenceError::PromptTooLong { .. })));
    }
}
