//! The GEMM runtime symbols compiled code calls for large f32/f64 `dot_general`s:
//! `jaxrepl_gemm_f32` and `jaxrepl_gemm_f64`, both
//! `(lhs: memref<*xT>, rhs: memref<*xT>, out: memref<*xT>, b, m, n, k,
//!   lhs_bs, lhs_rs, lhs_cs, rhs_bs, rhs_rs, rhs_cs: i64)`.
//! An unranked memref reaches us as (rank: i64, desc: *const i64), the ranked descriptor
//! being `[allocated, aligned, offset, sizes[rank], strides[rank]]`.
//!
//! The lowering (`lower::structured`, `Lowerer::dot`) views the lhs as `[b, m, k]` and the
//! rhs as `[b, k, n]` with element strides (batch, row, column) it computes at compile time
//! from the operands' static row-major shapes; the output is a fresh row-major `[b, m, n]`
//! buffer (`memref.alloc`, written here in full). The products run on the `gemm` crate
//! (faer's BLIS-style packed micro-kernels; it detects AVX-512/AVX2/FMA at run time, and
//! splits one product of at least [`GEMM_THREADING_MIN`] multiply-adds over rayon's
//! threads). It replaced `matrixmultiply` after measuring both on this machine (2 cores,
//! AVX-512; `tests/src/bin/gemm_probe.rs rawcmp`): per CPU-second it gave 1.2–1.4× at
//! 256–2048, 1.6× on `[16,512,512]` and 2.2× on `[256,64,64]` batches. Batches of products
//! (several products, or products too small to thread) are instead split over threads
//! here, each product on one thread: no synchronisation inside a product.
//!
//! Invariants: the operand descriptors are contiguous row-major (the lowering asks for
//! identity-layout memrefs; a descriptor that is not is reported as an execution `Error`
//! through [`super::callbacks`] and the output left zero); nothing unwinds into compiled
//! code.

use std::ffi::c_void;

/// Batches with at least this many multiply-adds in all are split over threads (when they
/// have at least two products and each product is small or there are many of them).
const BATCH_SPLIT_MIN: usize = 1 << 20;

/// The `gemm` crate threads one product from this many multiply-adds (its
/// `DEFAULT_THREADING_THRESHOLD`, 48·48·256); smaller products run on one thread.
const GEMM_THREADING_MIN: usize = 48 * 48 * 256;

/// The element types we multiply (`gemm::gemm` is generic over them).
trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

/// `c = a·b` for an `m×k` matrix `a` with element strides (`rsa`, `csa`), a `k×n` matrix
/// `b` likewise, into the row-major `m×n` matrix `c` (not read), on `threads` threads
/// (1: this one).
///
/// # Safety
/// The pointers and strides describe valid, non-overlapping matrices.
#[allow(clippy::too_many_arguments)]
unsafe fn product<T: Elem>(m: usize, k: usize, n: usize, a: *const T, rsa: isize, csa: isize, b: *const T, rsb: isize, csb: isize, c: *mut T, threads: usize) {
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: forwarded caller contract. `gemm` computes dst = α·dst + β·lhs·rhs and does
    // not read dst when `read_dst` is false.
    unsafe { gemm::gemm(m, n, k, c, 1, n as isize, false, a, csa, rsa, b, csb, rsb, T::ZERO, T::ONE, false, false, false, par) }
}

/// A raw pointer that may cross to the batch worker threads (each writes its own batches).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: workers touch disjoint output batches and only read the inputs.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// The pointer (a method, so closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// The element pointer (aligned + offset) and element count of a contiguous row-major
/// memref descriptor, or a message saying why it is not one.
///
/// # Safety
/// `desc` points to a ranked descriptor of `rank` dims.
unsafe fn contiguous<T>(rank: i64, desc: *const i64) -> Result<(*mut T, usize), String> {
    let r = rank.max(0) as usize;
    // SAFETY: a descriptor has 3 + 2·rank words (caller's contract).
    let w = unsafe { std::slice::from_raw_parts(desc, 3 + 2 * r) };
    let (sizes, strides) = (&w[3..3 + r], &w[3 + r..3 + 2 * r]);
    let mut expect = 1i64;
    for d in (0..r).rev() {
        if sizes[d] != 1 && strides[d] != expect {
            return Err(format!("GEMM operand is not contiguous row-major (sizes {sizes:?}, strides {strides:?})"));
        }
        expect *= sizes[d].max(0);
    }
    // SAFETY: offset is within the allocation (MLIR's invariant).
    Ok((unsafe { (w[1] as *mut T).offset(w[2] as isize) }, expect as usize))
}

/// `out[p] = lhs[p] · rhs[p]` for every batch `p`, as described in the module docs.
fn run<T: Elem>(descs: [(i64, *const i64); 3], dims: [i64; 4], strides: [i64; 6]) {
    let result = std::panic::catch_unwind(|| {
        // SAFETY: compiled code passes live descriptors of its three memrefs.
        let (a, _) = unsafe { contiguous::<T>(descs[0].0, descs[0].1) }?;
        // SAFETY: as above.
        let (b, _) = unsafe { contiguous::<T>(descs[1].0, descs[1].1) }?;
        // SAFETY: as above.
        let (c, len) = unsafe { contiguous::<T>(descs[2].0, descs[2].1) }?;
        let [nb, m, n, k] = dims.map(|x| x.max(0) as usize);
        if nb * m * n != len {
            return Err(format!("GEMM output holds {len} elements, not {nb}·{m}·{n}"));
        }
        if len == 0 {
            return Ok(());
        }
        if k == 0 {
            // SAFETY: `c` holds `len` elements.
            unsafe { std::slice::from_raw_parts_mut(c, len) }.fill(T::ZERO);
            return Ok(());
        }
        let [abs, ars, acs, bbs, brs, bcs] = strides.map(|x| x as isize);
        let (a, b, c) = (Ptr(a), Ptr(b), Ptr(c));
        let (split, inner) = threads(nb, m, n, k, super::parallel::num_threads());
        let one = move |p: usize| {
            // SAFETY: the lowering computed these strides from the operands' shapes, so
            // every index stays inside them; batch `p` of the output is written only here.
            unsafe { product(m, k, n, a.get().offset(p as isize * abs), ars, acs, b.get().offset(p as isize * bbs), brs, bcs, c.get().add(p * m * n), inner) }
        };
        if split <= 1 {
            (0..nb).for_each(one);
        } else {
            let chunk = nb.div_ceil(split);
            rayon::scope(|s| {
                for t in 1..split {
                    let one = &one;
                    s.spawn(move |_| (t * chunk..((t + 1) * chunk).min(nb)).for_each(one));
                }
                (0..chunk.min(nb)).for_each(&one);
            });
        }
        Ok(())
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => super::callbacks::fail(msg),
        Err(_) => super::callbacks::fail("the GEMM runtime panicked".into()),
    }
}

/// How to run a batch of `nb` products of `m×k·k×n` on `cores` threads: (the number of
/// parts the batch is split into, each running its products one after another; the
/// threads each product uses). A batch is split, each product on one thread, when it has at
/// least [`BATCH_SPLIT_MIN`] multiply-adds and either its products are too small for
/// `gemm` to thread or there are at least two per thread; otherwise each product is
/// threaded on its own.
fn threads(nb: usize, m: usize, n: usize, k: usize, cores: usize) -> (usize, usize) {
    let each = m.saturating_mul(n).saturating_mul(k);
    if cores > 1 && nb >= 2 && nb.saturating_mul(each) >= BATCH_SPLIT_MIN && (each < GEMM_THREADING_MIN || nb >= 2 * cores) {
        (cores.min(nb), 1)
    } else {
        (1, cores)
    }
}

#[cfg(test)]
mod tests {
    use super::threads;

    #[test]
    fn batch_split_choice() {
        // One large product: threaded inside.
        assert_eq!(threads(1, 1024, 1024, 1024, 2), (1, 2));
        // Many small products: the batch is split, each product on one thread.
        assert_eq!(threads(256, 64, 64, 64, 2), (2, 1));
        assert_eq!(threads(16, 512, 512, 512, 2), (2, 1));
        // Two large products on two cores: each threaded.
        assert_eq!(threads(2, 1024, 1024, 1024, 2), (1, 2));
        // A small batch in all stays on one thread; so does everything on one core.
        assert_eq!(threads(4, 16, 16, 16, 2), (1, 2));
        assert_eq!(threads(256, 64, 64, 64, 1), (1, 1));
        // More threads than products: one part per product.
        assert_eq!(threads(3, 80, 80, 80, 8), (3, 1));
    }
}

macro_rules! gemm_symbol {
    ($f:ident, $t:ty) => {
        #[allow(clippy::too_many_arguments)]
        extern "C" fn $f(
            lr: i64, ld: *const i64, rr: i64, rd: *const i64, or: i64, od: *const i64,
            b: i64, m: i64, n: i64, k: i64,
            lbs: i64, lrs: i64, lcs: i64, rbs: i64, rrs: i64, rcs: i64,
        ) {
            run::<$t>([(lr, ld), (rr, rd), (or, od)], [b, m, n, k], [lbs, lrs, lcs, rbs, rrs, rcs])
        }
    };
}

gemm_symbol!(gemm_f32, f32);
gemm_symbol!(gemm_f64, f64);

/// The symbols to register with every ExecutionEngine.
pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
    vec![
        ("jaxrepl_gemm_f32".into(), gemm_f32 as *const () as *mut c_void),
        ("jaxrepl_gemm_f64".into(), gemm_f64 as *const () as *mut c_void),
    ]
}
