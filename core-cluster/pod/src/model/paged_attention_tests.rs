//! Paged attention against plain attention over contiguous keys and values, across precisions, block
//! sizes and kernels.

use super::*;
use crate::model::kv_pool::{KvPool, KvPrecision};
use crate::model::shape::ModelShape;

fn shape() -> ModelShape {
    ModelShape {
        layers: 1,
        hidden: 16,
        heads: 4,
        kv_heads: 2,
        head_dim: 4,
        ffn: 8,
        vocab: 8,
        context: 64,
        norm_eps: 1e-5,
        rope_base: 10_000.0,
    }
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Plain softmax, stable against large scores.
fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in x.iter_mut() {
        *v = (*v - max).exp();
    }
    let sum: f32 = x.iter().sum();
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// The score of query head `q` with key head `kv` at one position: the dot product times `scale`.
fn score(s: &ModelShape, q: &[f32], key: &[f32], kv: usize, scale: f32) -> f32 {
    let hd = s.head_dim;
    q.iter().zip(&key[kv * hd..(kv + 1) * hd]).map(|(a, b)| a * b).sum::<f32>() * scale
}

/// Plain attention over contiguous keys and values, `[position][kv_heads * head_dim]`.
fn reference(
    s: &ModelShape,
    keys: &[Vec<f32>],
    vals: &[Vec<f32>],
    query: &[f32],
    pos: usize,
    scale: f32,
) -> Vec<f32> {
    let hd = s.head_dim;
    let mut out = vec![0.0; s.heads * hd];
    for h in 0..s.heads {
        let kv = h / s.group();
        let q = &query[h * hd..(h + 1) * hd];
        let mut scores: Vec<f32> = (0..=pos).map(|t| score(s, q, &keys[t], kv, scale)).collect();
        softmax(&mut scores);
        for (t, w) in scores.iter().enumerate() {
            for d in 0..hd {
                out[h * hd + d] += w * vals[t][kv * hd + d];
            }
        }
    }
    out
}

fn run(precision: KvPrecision, tolerance: f32) {
    let s = shape();
    let block_size = 4;
    let mut pool = KvPool::new(&s, 8, block_size, precision);
    // Scattered, out-of-order blocks: the table decides where each position lives.
    let table = [5u32, 2, 7, 0];
    let len = 13;
    let keys: Vec<Vec<f32>> = (0..len).map(|t| values(t as u64, s.kv_width())).collect();
    let vals: Vec<Vec<f32>> = (0..len).map(|t| values(100 + t as u64, s.kv_width())).collect();
    for t in 0..len {
        let slot = table[t / block_size] as usize * block_size + t % block_size;
        pool.write(0, slot, &keys[t], &vals[t]);
    }
    let positions = [0usize, 3, 4, 12];
    let queries: Vec<f32> = positions.iter().flat_map(|&p| values(1000 + p as u64, s.hidden)).collect();
    let rows: Vec<AttentionRow<'_>> =
        positions.iter().map(|&p| AttentionRow { position: p, table: &table }).collect();
    let mut out = vec![0.0; positions.len() * s.hidden];
    let attention = AttentionShape { geometry: pool.geometry(), group: s.group(), scale: 0.5 };
    paged_attention(pool.layer(0), attention, &rows, &queries, &mut out);
    for (i, &p) in positions.iter().enumerate() {
        let expected = reference(&s, &keys, &vals, &queries[i * s.hidden..(i + 1) * s.hidden], p, 0.5);
        for (a, b) in out[i * s.hidden..(i + 1) * s.hidden].iter().zip(&expected) {
            assert!((a - b).abs() <= tolerance, "row {i}: {a} vs {b}");
        }
    }
}

#[test]
fn matches_plain_attention_through_a_scattered_block_table() {
    run(KvPrecision::F32, 1e-5);
}

#[test]
fn f16_kv_stays_close_to_plain_attention() {
    run(KvPrecision::F16, 2e-3);
}

#[test]
fn int8_kv_stays_close_to_plain_attention() {
    run(KvPrecision::Int8, 2e-2);
}

/// Many blocks and scores in the hundreds: the running maximum grows from tile to tile, and
/// `e^score` would overflow, so only a correct rescaling of the accumulated output matches. Returns
/// the output.
fn run_long(precision: KvPrecision, block_size: usize) -> Vec<f32> {
    let s = ModelShape { hidden: 128, heads: 8, kv_heads: 2, head_dim: 16, context: 256, ..shape() };
    let (len, scale) = (215usize, 0.25);
    let blocks = len.div_ceil(block_size) + 6;
    // Every block once, out of order (7 is prime to the number of blocks, unless it divides it).
    let blocks = if blocks % 7 == 0 { blocks + 1 } else { blocks };
    let table: Vec<u32> = (0..len.div_ceil(block_size)).map(|i| ((i * 7 + 3) % blocks) as u32).collect();
    let mut pool = KvPool::new(&s, blocks, block_size, precision);
    // Multiples of 1/64 (keys, values) and integers (queries): f16 holds them exactly and every dot product
    // is exact in any order, so the only differences left are the softmax's. The keys grow with the
    // position, so later blocks tend to hold larger scores.
    let grid = |v: Vec<f32>, factor: f32| -> Vec<f32> {
        v.into_iter().map(|x| (x * factor * 64.0).round() / 64.0).collect()
    };
    let keys: Vec<Vec<f32>> =
        (0..len).map(|t| grid(values(t as u64, s.kv_width()), 1.0 + t as f32 / 64.0)).collect();
    let vals: Vec<Vec<f32>> = (0..len).map(|t| grid(values(500 + t as u64, s.kv_width()), 1.0)).collect();
    for t in 0..len {
        let slot = table[t / block_size] as usize * block_size + t % block_size;
        pool.write(0, slot, &keys[t], &vals[t]);
    }
    let positions = [0usize, 15, 16, 100, 214];
    let queries: Vec<f32> = positions
        .iter()
        .flat_map(|&p| values(3000 + p as u64, s.hidden))
        .map(|x| (x * 40.0).round())
        .collect();

    // The premise, on the longest row's first head: its tile maxima rise again and again, and
    // pass 88.7, where `e^x` leaves f32.
    let q = &queries[(positions.len() - 1) * s.hidden..][..s.head_dim];
    let tile_max = |b: usize| {
        (b * TILE..((b + 1) * TILE).min(len))
            .map(|t| score(&s, q, &keys[t], 0, scale))
            .fold(f32::NEG_INFINITY, f32::max)
    };
    let maxima: Vec<f32> = (0..len.div_ceil(TILE)).map(tile_max).collect();
    let rises = (1..maxima.len()).filter(|&b| maxima[..b].iter().all(|&m| maxima[b] > m)).count();
    assert!(rises >= 3, "the maximum rose {rises} times: {maxima:?}");
    assert!(maxima.iter().any(|&m| m > 88.7), "{maxima:?}");

    let rows: Vec<AttentionRow<'_>> =
        positions.iter().map(|&p| AttentionRow { position: p, table: &table }).collect();
    let mut out = vec![0.0; positions.len() * s.hidden];
    let attention = AttentionShape { geometry: pool.geometry(), group: s.group(), scale };
    paged_attention(pool.layer(0), attention, &rows, &queries, &mut out);
    for (i, &p) in positions.iter().enumerate() {
        let expected = reference(&s, &keys, &vals, &queries[i * s.hidden..(i + 1) * s.hidden], p, scale);
        for (a, b) in out[i * s.hidden..(i + 1) * s.hidden].iter().zip(&expected) {
            assert!((a - b).abs() <= 1e-5, "row {i}: {a} vs {b}");
        }
    }
    out
}

#[test]
fn online_softmax_matches_plain_attention_over_many_blocks_of_large_scores() {
    run_long(KvPrecision::F32, 16);
}

#[test]
fn online_softmax_over_f16_blocks_matches_plain_attention() {
    run_long(KvPrecision::F16, 16);
}

#[test]
fn the_block_size_does_not_change_a_single_bit() {
    let sixteen = run_long(KvPrecision::F32, 16);
    for block_size in [4, 8, 32, 48] {
        assert!(run_long(KvPrecision::F32, block_size) == sixteen, "block size {block_size}");
    }
}

/// On a CPU with AVX2, the tests above check that kernel; the portable one, which differs in its
/// rounding (no FMA) and its `f16` widening, must agree too, at the real head size.
#[test]
fn the_portable_kernel_agrees_with_the_detected_one() {
    let s = ModelShape { hidden: 576, heads: 9, kv_heads: 3, head_dim: 64, context: 128, ..shape() };
    let table = [3u32, 0, 6, 1, 7, 2, 5];
    for precision in [KvPrecision::F32, KvPrecision::F16, KvPrecision::Int8] {
        let mut pool = KvPool::new(&s, 8, 16, precision);
        for t in 0..100 {
            let (k, v) = (values(t as u64, s.kv_width()), values(500 + t as u64, s.kv_width()));
            pool.write(0, table[t / 16] as usize * 16 + t % 16, &k, &v);
        }
        let query = values(7, s.hidden);
        let attention = AttentionShape { geometry: pool.geometry(), group: 3, scale: 0.125 };
        let row = AttentionRow { position: 99, table: &table };
        let attend = |kernel: Kernel| {
            let mut out = vec![0.0; 192];
            SCRATCH.with(|scratch| {
                kernel(
                    pool.layer(0),
                    attention,
                    row,
                    1,
                    &query[192..384],
                    &mut out,
                    &mut scratch.borrow_mut(),
                )
            });
            out
        };
        for (a, b) in attend(attend_portable).iter().zip(attend(kernel())) {
            assert!((a - b).abs() <= 1e-6, "{precision:?}: {a} vs {b}");
        }
    }
}

/// Times one decode row behind 1,072 positions with SmolLM2-135M's attention shapes.
#[test]
#[ignore = "a timing, not a check"]
fn attention_speed() {
    let s = ModelShape { hidden: 576, heads: 9, kv_heads: 3, head_dim: 64, context: 2048, ..shape() };
    let (block_size, position) = (16usize, 1071usize);
    let blocks = (position + 1).div_ceil(block_size);
    let table: Vec<u32> = (0..blocks).map(|i| ((i * 7 + 3) % (blocks + 2)) as u32).collect();
    let mut pool = KvPool::new(&s, blocks + 2, block_size, KvPrecision::F16);
    for t in 0..=position {
        let slot = table[t / block_size] as usize * block_size + t % block_size;
        pool.write(0, slot, &values(t as u64, s.kv_width()), &values(9000 + t as u64, s.kv_width()));
    }
    let query = values(7, s.hidden);
    let rows = [AttentionRow { position, table: &table }];
    let attention = AttentionShape { geometry: pool.geometry(), group: s.group(), scale: 0.125 };
    let mut out = vec![0.0; s.hidden];
    let calls = 2000;
    paged_attention(pool.layer(0), attention, &rows, &query, &mut out);
    let start = std::time::Instant::now();
    for _ in 0..calls {
        paged_attention(pool.layer(0), attention, &rows, &query, &mut out);
    }
    let ns = start.elapsed().as_nanos() / calls;
    println!("attention_speed: {ns} ns per call");
}
