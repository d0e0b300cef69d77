//! Times single-row decode steps of a GGUF model in process, without the server, the scheduler
//! or a client: the figure to profile the forward pass with (`perf record`).
//!
//! `cargo run --release -p inference-pod --example decode_speed -- MODEL.gguf [STEPS] [f32|f16|int8]`

use std::time::Instant;

use candle_core::quantized::gguf_file;
use inference_pod::model::{Batch, BatchSequence, KvPool, KvPrecision, LlamaModel};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path =
        args.next().ok_or_else(|| anyhow::anyhow!("usage: decode_speed MODEL.gguf [STEPS] [PRECISION]"))?;
    let steps: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(128);
    let precision = match args.next().as_deref() {
        None | Some("f32") => KvPrecision::F32,
        Some("f16") => KvPrecision::F16,
        Some("int8") => KvPrecision::Int8,
        Some(other) => anyhow::bail!("unknown KV precision {other}"),
    };
    let mut reader = std::fs::File::open(&path)?;
    let content = gguf_file::Content::read(&mut reader)?;
    let model = LlamaModel::from_gguf(&content, &mut reader)?;
    let block_size = 16;
    let blocks = steps.div_ceil(block_size);
    let table: Vec<u32> = (0..blocks as u32).collect();
    // The first round pages the weights in; the second is the one to read.
    for round in 0..2 {
        let mut kv = KvPool::new(model.shape(), blocks, block_size, precision);
        let mut token = 1u32;
        let started = Instant::now();
        for position in 0..steps {
            let tokens = [token];
            let mut batch = Batch::default();
            batch.push(BatchSequence { tokens: &tokens, start: position, table: &table, logits: 1 });
            let logits = model.forward(&batch, &mut kv)?;
            token = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap_or(0) as u32;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!("round {round}: {steps} steps in {seconds:.3} s = {:.1} tok/s", steps as f64 / seconds);
    }
    Ok(())
}
