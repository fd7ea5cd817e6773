//! Shared helpers for the cross-crate integration tests in `tests/tests/` and the bench binary.

/// Central differences `(f(x + h·eᵢ) − f(x − h·eᵢ)) / 2h` of a scalar function of a vector,
/// with h = 1e-6: the finite-difference reference the gradient tests compare against.
pub fn central_differences(f: impl Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let mut a = x.to_vec();
            let mut b = x.to_vec();
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect()
}

/// `n` deterministic f32 values in about `[lo, hi]` from a 64-bit LCG seeded by `seed` (Knuth's
/// MMIX constants), not on a grid, so sums and products round: the tests' input data.
pub fn lcg_f32(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * (hi - lo) + lo) as f32
        })
        .collect()
}

/// An f32 array of `shape` with [`lcg_f32`] values in about [-1, 1], and those values
/// (rounded to f32) as f64 for the reference.
pub fn host_array(shape: &[usize], seed: u64) -> (jax::prelude::Array, Vec<f64>) {
    let v = lcg_f32(shape.iter().product(), seed, -1.0, 1.0);
    let a = jax::prelude::Array::from_vec(v.clone(), shape).expect("shape matches the data");
    (a, v.iter().map(|&x| x as f64).collect())
}

/// Sets `jax_num_cpu_devices = 8` once per test binary, before the backend starts (so the
/// binary must not touch arrays before calling it), and checks the backend sees 8 devices.
/// Panics when the backend had already started: the test binary is then misbuilt.
pub fn eight_cpu_devices() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        jax::config::update_int("jax_num_cpu_devices", 8).expect("set before the backend starts");
        assert_eq!(jax::sharding::device_count(), 8);
    });
}

/// A process-wide lock for tests that read or set process-wide state (config flags, call
/// counters, per-device memory accounting): hold the guard for the whole test. A test that
/// panicked while holding it does not poison it for the others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `x` placed with `NamedSharding(mesh, spec)` (panics on error: test helper).
pub fn put(x: &jax::prelude::Array, mesh: &jax::prelude::Mesh, spec: jax::prelude::PartitionSpec) -> jax::prelude::Array {
    jax::prelude::device_put(x, jax::prelude::NamedSharding::new(mesh, spec).unwrap()).unwrap()
}

/// Asserts `a` and `b` (f32) have one shape and agree elementwise within `rtol · (1 + |b|)`.
pub fn assert_close_f32(a: &jax::prelude::Array, b: &jax::prelude::Array, rtol: f32) {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!((p - q).abs() <= rtol * (1.0 + q.abs()), "element {i}: {p} vs {q}");
    }
}
