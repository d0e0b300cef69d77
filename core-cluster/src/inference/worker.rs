//! The request queue and the dedicated OS thread that runs the model, one request at a time.
//!
//! The model's forward pass is CPU-bound and parallel inside (candle's thread pool), so it runs on
//! its own thread rather than on the async runtime, and requests take turns in arrival order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::metrics::PodMetrics;
use super::request::{GenerationSummary, SamplingParams};
use super::{Engine, InferenceError};

/// What a queued generation sends back, in order: text pieces, then exactly one `Done` or `Failed`.
#[derive(Debug)]
pub enum GenerationEvent {
    /// More text.
    Text(String),
    /// The generation finished.
    Done(GenerationSummary),
    /// The generation failed; no more events follow.
    Failed(InferenceError),
}

/// How busy the worker is.
#[derive(Debug, Default)]
pub struct Load {
    /// Requests waiting for the model.
    queued: AtomicUsize,
    /// Requests being generated (0 or 1).
    running: AtomicUsize,
}

impl Load {
    /// Requests waiting for the model.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Requests being generated.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

/// A generation waiting for the model.
struct Job {
    /// The templated prompt.
    prompt: Vec<u32>,
    /// How to sample.
    sampling: SamplingParams,
    /// When it was queued.
    enqueued: Instant,
    /// The request's span, so the worker's logs carry its fields.
    span: tracing::Span,
    /// Where events go; closed when the client has gone.
    events: UnboundedSender<GenerationEvent>,
}

/// A handle to the worker thread. The thread exits when every handle is dropped.
#[derive(Clone)]
pub struct Worker {
    /// The queue into the worker thread.
    jobs: mpsc::Sender<Job>,
    /// Queue depth and running count.
    load: Arc<Load>,
    /// Most requests that may wait.
    max_queue: usize,
}

impl Worker {
    /// Starts the worker thread, which owns `engine` from now on.
    pub fn spawn(engine: Arc<Engine>, metrics: Arc<PodMetrics>, max_queue: usize) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let load = Arc::new(Load::default());
        let thread_load = Arc::clone(&load);
        std::thread::Builder::new().name("inference-worker".into()).spawn(move || {
            for job in rx {
                thread_load.queued.fetch_sub(1, Ordering::Relaxed);
                run_job(&engine, &metrics, &thread_load, job);
            }
            tracing::debug!("inference worker stopped");
        })?;
        Ok(Self { jobs, load, max_queue })
    }

    /// Queues a generation; its events arrive on the returned receiver. Dropping the receiver
    /// cancels the generation (before it starts, or at its next piece of text).
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        sampling: SamplingParams,
    ) -> Result<UnboundedReceiver<GenerationEvent>, InferenceError> {
        let max = self.max_queue;
        self.load
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| (q < max).then_some(q + 1))
            .map_err(InferenceError::QueueFull)?;
        let (events, rx) = unbounded_channel();
        let job = Job { prompt, sampling, enqueued: Instant::now(), span: tracing::Span::current(), events };
        if self.jobs.send(job).is_err() {
            self.load.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(InferenceError::NotReady);
        }
        Ok(rx)
    }

    /// Queue depth and running count.
    pub fn load(&self) -> &Arc<Load> {
        &self.load
    }
}

fn run_job(engine: &Engine, metrics: &PodMetrics, load: &Load, job: Job) {
    let Job { prompt, sampling, enqueued, span, events } = job;
    let _entered = span.enter();
    if events.is_closed() {
        metrics.cancelled.inc();
        tracing::debug!("client left before its turn");
        return;
    }
    load.running.fetch_add(1, Ordering::Relaxed);
    let result = engine.generate(&prompt, &sampling, enqueued, &mut |text| {
        events.send(GenerationEvent::Text(text.to_owned())).is_ok()
    });
    load.running.fetch_sub(1, Ordering::Relaxed);
    let event = match result {
        Ok(summary) => {
            metrics.record(&summary);
            GenerationEvent::Done(summary)
        }
        Err(InferenceError::Cancelled) => {
            metrics.cancelled.inc();
            tracing::debug!("client left during generation");
            return;
        }
        Err(e) => {
            metrics.failed.inc();
            GenerationEvent::Failed(e)
        }
    };
    // The client may have gone just now; nothing to do then.
    let _ = events.send(event);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::inference::chat_template::encode_prompt;
    use crate::inference::request::{ChatMessage, FinishReason, Role};
    use crate::inference::test_support::engine;

    fn prompt() -> Vec<u32> {
        encode_prompt(engine().tokenizer(), &[ChatMessage::new(Role::User, "Say hello.")]).expect("prompt")
    }

    #[test]
    fn runs_jobs_in_turn_and_skips_abandoned_ones() {
        let metrics = Arc::new(PodMetrics::default());
        let worker = Worker::spawn(Arc::clone(engine()), Arc::clone(&metrics), 4).expect("spawn");
        let mut first = worker.submit(prompt(), SamplingParams::greedy(3)).expect("submit");
        let second = worker.submit(prompt(), SamplingParams::greedy(3)).expect("submit");
        assert!(worker.load().queued() + worker.load().running() >= 1);
        drop(second);

        let mut done = None;
        while let Some(event) = first.blocking_recv() {
            match event {
                GenerationEvent::Text(t) => assert!(done.is_none() && !t.is_empty()),
                GenerationEvent::Done(summary) => done = Some(summary),
                GenerationEvent::Failed(e) => panic!("{e}"),
            }
        }
        let done = done.expect("Done");
        assert_eq!((done.finish_reason, done.completion_tokens), (FinishReason::Length, 3));

        let deadline = Instant::now() + Duration::from_secs(30);
        while metrics.cancelled.get() == 0 {
            assert!(Instant::now() < deadline, "the abandoned job was never skipped");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(metrics.finished_length.get(), 1);
        assert_eq!((worker.load().queued(), worker.load().running()), (0, 0));
    }

    #[test]
    fn refuses_work_beyond_the_queue_limit() {
        let worker = Worker::spawn(Arc::clone(engine()), Arc::default(), 0).expect("spawn");
        let refused = worker.submit(prompt(), SamplingParams::greedy(1));
        assert!(matches!(refused, Err(InferenceError::QueueFull(0))));
        assert_eq!(worker.load().queued(), 0);
    }
}
