//! `memory_stats()` (JAX's keys), live buffers by allocation site and the device memory
//! profile. Own process with one test: the counters are process-wide.

use jax::prelude::*;
use jax::runtime::memory;

/// The bytes a buffer of `n` f32 takes (its pool size class: 4 classes per power of two).
fn class_of(nbytes: usize) -> usize {
    if nbytes < 64 * 1024 {
        return nbytes;
    }
    let top = usize::BITS - 1 - nbytes.leading_zeros();
    let q = 1usize << (top - 2);
    nbytes.div_ceil(q) * q
}

#[test]
fn stats_and_sites_follow_live_buffers() {
    let s0 = memory_stats();
    assert_eq!(s0.bytes_limit, memory::machine_memory_bytes(), "no XLA_CLIENT_MEM_FRACTION: the machine's memory");
    assert!(!s0.preallocate);
    assert_eq!(s0.allocator, "bfc");
    let shown = s0.to_string();
    assert!(shown.starts_with("{'bytes_in_use': ") && shown.contains("'bytes_limit': ") && shown.ends_with("'allocator': 'bfc'}"), "{shown}");

    let n = 1_000_000;
    let host = Array::from_vec(vec![1.5f32; n], &[n]).unwrap();
    let big = class_of(4 * n);
    assert_eq!(big, 4_194_304);
    let s1 = memory_stats();
    assert_eq!(s1.bytes_in_use - s0.bytes_in_use, big);
    assert_eq!(s1.num_allocs - s0.num_allocs, 1);
    assert!(s1.largest_alloc_size >= big && s1.peak_bytes_in_use >= s1.bytes_in_use);

    let f = jit(|x: Array| x * 2.0).with_name("double");
    let y = f.call(&host).unwrap().block_until_ready().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap()[n - 1], 3.0);
    let sites = memory::live_by_site();
    let site = sites.iter().find(|s| s.site == "jit(double)").expect("jit(double) site");
    assert_eq!((site.live_bytes, site.live_buffers), (big, 1));
    assert!(sites.iter().any(|s| s.site == "device_put" && s.live_bytes >= big), "{sites:?}");
    let prof = profiler::device_memory_profile();
    assert!(prof.lines().any(|l| l == format!("{big} 1 jit(double)")), "{prof}");
    let table = jax::magic::memory().0;
    assert!(table.starts_with("memory_stats():\n  bytes_in_use"), "{table}");
    assert!(table.contains("jit(double)") && table.contains("live buffers by site:"), "{table}");

    let peak = memory_stats().peak_bytes_in_use;
    drop(y);
    assert!(memory::live_by_site().iter().all(|s| s.site != "jit(double)"), "freed");
    drop(host);
    let s2 = memory_stats();
    assert_eq!(s2.bytes_in_use, s0.bytes_in_use);
    assert_eq!(s2.peak_bytes_in_use, peak, "the peak stays");
    assert!(s2.pool_bytes >= big, "freed large buffers are pooled: {s2:?}");
    memory::reset_peak();
    assert_eq!(memory_stats().peak_bytes_in_use, s2.bytes_in_use);

    let path = std::env::temp_dir().join(format!("jaxrepl-mem-{}.prof", std::process::id()));
    profiler::save_device_memory_profile(&path).unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().starts_with("# jaxrepl device memory profile"));
    std::fs::remove_file(&path).unwrap();
}
