//! `memrefCopy`, the runtime function MLIR's memref-to-LLVM lowering calls for a
//! `memref.copy` between non-contiguous (strided) memrefs — what bufferization emits for
//! `tensor.insert_slice`/`extract_slice` (concatenate, pad, scans, sorts). MLIR ships it
//! in `libmlir_c_runner_utils`; we provide it ourselves so the ExecutionEngine needs no
//! extra shared library.

use std::ffi::c_void;

#[repr(C)]
struct Unranked {
    rank: i64,
    desc: *const i64,
}

/// Copies `src` to `dst` (same shape, any strides), `elem_size` bytes per element.
///
/// # Safety
/// Called only by compiled code with valid unranked memref descriptors of equal shape.
unsafe extern "C" fn memref_copy(elem_size: i64, src: *const Unranked, dst: *const Unranked) {
    // SAFETY: the caller passes descriptors laid out as MLIR's `{allocated, aligned,
    // offset, sizes[rank], strides[rank]}` with in-bounds strides.
    unsafe {
        let (s, d) = (&*src, &*dst);
        let rank = s.rank as usize;
        let field = |p: *const i64, i: usize| *p.add(i);
        let (sp, dp) = (field(s.desc, 1) as *const u8, field(d.desc, 1) as *mut u8);
        let (so, doff) = (field(s.desc, 2), field(d.desc, 2));
        let sizes: Vec<i64> = (0..rank).map(|i| field(s.desc, 3 + i)).collect();
        let ss: Vec<i64> = (0..rank).map(|i| field(s.desc, 3 + rank + i)).collect();
        let ds: Vec<i64> = (0..rank).map(|i| field(d.desc, 3 + rank + i)).collect();
        if sizes.iter().any(|&n| n == 0) {
            return;
        }
        let es = elem_size as usize;
        let mut idx = vec![0i64; rank];
        loop {
            let so2: i64 = so + idx.iter().zip(&ss).map(|(i, s)| i * s).sum::<i64>();
            let do2: i64 = doff + idx.iter().zip(&ds).map(|(i, s)| i * s).sum::<i64>();
            std::ptr::copy(sp.add(so2 as usize * es), dp.add(do2 as usize * es), es);
            let mut k = rank;
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < sizes[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
    }
}

/// The symbols to register with every ExecutionEngine.
pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
    vec![("memrefCopy".into(), memref_copy as *const () as *mut c_void)]
}
