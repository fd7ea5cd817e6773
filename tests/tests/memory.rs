//! Host memory over many calls: RSS stays flat over 100k cached jitted calls, and large
//! fresh outputs are served from the buffer pool (own process: both read process-wide
//! state, so this file has one test).

use jax::prelude::*;
use jax::runtime::buffer::pool_stats;

/// Resident set size in bytes, from /proc/self/statm (pages × 4 KiB page size).
fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = s.split_whitespace().nth(1).expect("resident field").parse().expect("number");
    pages * 4096
}

#[test]
fn calls_leave_rss_flat_and_large_outputs_reuse_pooled_buffers() {
    // 100k cached calls of a small jitted function (and the eager op on its result).
    let f = jit(|(x, y): (Array, Array)| x * 2.0 + y);
    let x = jnp::arange(8.0);
    let y = jnp::ones(&[8], DType::F32);
    for _ in 0..2000 {
        f.call((&x, &y)).unwrap().sin().block_until_ready().unwrap();
    }
    let before = rss_bytes();
    let mut last = None;
    for _ in 0..100_000 {
        last = Some(f.call((&x, &y)).unwrap().sin());
    }
    let want: Vec<f32> = (0..8).map(|i| (i as f32 * 2.0 + 1.0).sin()).collect();
    let got = last.unwrap().to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 8 << 20, "RSS grew by {} KiB over 100k calls", grown >> 10);

    // A fresh 4 MB output per call comes from the pool after the first call.
    let g = jit(|x: Array| x * 3.0);
    let big = jnp::arange(1_000_000.0);
    let first = g.call(&big).unwrap().block_until_ready().unwrap();
    drop(first);
    let s0 = pool_stats();
    for i in 0..20 {
        let out = g.call(&big).unwrap();
        if i == 19 {
            assert_eq!(out.to_vec::<f32>().unwrap()[999_999], 2_999_997.0);
        }
    }
    let s1 = pool_stats();
    assert!(s1.hits - s0.hits >= 20, "{s0:?} -> {s1:?}");
    assert_eq!(s1.misses, s0.misses, "{s0:?} -> {s1:?}");
    assert!(s1.retained_bytes <= s1.limit_bytes);
}
