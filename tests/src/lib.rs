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
