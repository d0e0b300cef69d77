//! The handle to the step loop's thread: queueing generations and reading how busy it is.
//!
//! The forward pass is CPU-bound and parallel inside (candle's thread pool), so the loop runs on
//! its own OS thread rather than on the async runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

pub use super::generation::GenerationEvent;
use super::load::Load;
use super::metrics::PodMetrics;
use super::request::{Priority, SamplingParams};
use super::step_loop::{Job, LoopConfig, StepLoop};
use super::{Engine, InferenceError};

/// What a caller asks of the worker, besides the prompt.
#[derive(Debug, Clone)]
pub struct Submission {
    /// How to sample.
    pub sampling: SamplingParams,
    /// The tenant, which salts the prefix cache.
    pub tenant: String,
    /// Interactive or batch.
    pub priority: Priority,
    /// Speculate or not; `None` for the pod's default.
    pub speculative: Option<bool>,
}

/// A handle to the step loop. The thread exits when every handle is dropped.
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
    load: Arc<Load>,
    max_queue: usize,
    /// False once the step loop's thread has ended (a panic included).
    alive: Arc<AtomicBool>,
}

/// Clears `alive` when the step loop's thread ends, however it ends: a pod whose loop died must stop
/// saying it is ready.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
        if std::thread::panicking() {
            tracing::error!("the inference step loop panicked; the pod is no longer ready");
        }
    }
}

impl Worker {
    /// Starts the step loop, which owns the KV cache from now on.
    pub fn spawn(
        engine: Arc<Engine>,
        metrics: Arc<PodMetrics>,
        config: LoopConfig,
        max_queue: usize,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let load = Arc::new(Load::default());
        let step_loop = StepLoop::new(engine, config, metrics, Arc::clone(&load));
        let alive = Arc::new(AtomicBool::new(true));
        let guard = AliveGuard(Arc::clone(&alive));
        std::thread::Builder::new().name("inference-steps".into()).spawn(move || {
            let _guard = guard;
            step_loop.run(rx)
        })?;
        Ok(Self { jobs, load, max_queue, alive })
    }

    /// Whether the step loop is still running.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Queues a generation; its events arrive on the returned receiver. Dropping the receiver
    /// cancels the generation (before it starts, or at its next token).
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        submission: Submission,
    ) -> Result<UnboundedReceiver<GenerationEvent>, InferenceError> {
        if !self.is_alive() {
            return Err(InferenceError::NotReady);
        }
        let queued = self.load.queued();
        if queued >= self.max_queue {
            return Err(InferenceError::QueueFull(queued));
        }
        self.load.queued.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = unbounded_channel();
        let Submission { sampling, tenant, priority, speculative } = submission;
        let job = Job {
            prompt,
            sampling,
            tenant,
            priority,
            speculative,
            enqueued: Instant::now(),
            span: tracing::Span::current(),
            events,
        };
        if self.jobs.send(job).is_err() {
            self.load.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(InferenceError::NotReady);
        }
        Ok(rx)
    }

    /// How busy the loop is.
    pub fn load(&self) -> &Arc<Load> {
        &self.load
    }
}

#[cfg(test)]
mod tests;
