//! Heap allocation for compiled code: `_mlir_memref_to_llvm_alloc`,
//! `_mlir_memref_to_llvm_aligned_alloc` and `_mlir_memref_to_llvm_free`, which
//! `finalize-memref-to-llvm{use-generic-functions}` calls for every `memref.alloc` /
//! `memref.dealloc` left after bufferization (a GEMM's result, a value read by several
//! loop nests, a reduction's accumulator).
//!
//! They serve requests from the runtime's size-class pool (`runtime::buffer`, the one
//! fresh large outputs come from), so a module's large temporaries reuse the same mapped
//! pages call after call. With glibc's `malloc` they did not: the MLP training step frees
//! about 6.6 MB of temporaries per call, more than glibc's trim threshold (twice its
//! dynamic mmap threshold), so the heap top was returned to the kernel at the end of each
//! call and every temporary page faulted again on the next one — 14 % of the step's
//! profile in `exc_page_fault` (perf, `gemm_probe trainp`). Small requests (below
//! `buffer::POOL_MIN_BYTES`) still go to the system allocator.
//!
//! Layout: 16 bytes before the pointer handed out hold the allocation's size class and
//! start, so `free` (which gets only the pointer) can return it. Nothing here panics or
//! unwinds into compiled code: an allocation failure aborts as Rust's allocator does (as
//! `malloc` returning null would crash the compiled code anyway).

use crate::runtime::buffer::{alloc_raw, free_raw, size_class};
use std::ffi::c_void;

/// Bytes of bookkeeping in front of every pointer handed out.
const HEADER: usize = 16;

/// `size` bytes aligned to `align` (a power of two; smaller than 16 is taken as 16).
fn allocate(align: usize, size: usize) -> *mut c_void {
    let align = align.max(HEADER).next_power_of_two();
    let class = size_class(size.saturating_add(HEADER + align));
    let (base, data, _) = alloc_raw(class, false);
    // `data` is 64-byte aligned and `class` bytes are usable from it: the pointer lies at
    // most HEADER + align - 1 bytes past it.
    let p = (data as usize + HEADER).next_multiple_of(align) as *mut usize;
    // SAFETY: p - HEADER >= data, and p + size <= data + class (see above).
    unsafe {
        p.sub(2).write(class);
        p.sub(1).write(base as usize);
    }
    p as *mut c_void
}

/// `_mlir_memref_to_llvm_alloc(size)`: the lowering aligns the result itself.
extern "C" fn mlir_alloc(size: u64) -> *mut c_void {
    allocate(HEADER, size as usize)
}

/// `_mlir_memref_to_llvm_aligned_alloc(alignment, size)`.
extern "C" fn mlir_aligned_alloc(align: u64, size: u64) -> *mut c_void {
    allocate(align as usize, size as usize)
}

/// `_mlir_memref_to_llvm_free(ptr)`: `ptr` came from one of the two above (or is null).
extern "C" fn mlir_free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    let p = ptr as *mut usize;
    // SAFETY: `allocate` wrote the class and start right before the pointer.
    let (class, base) = unsafe { (p.sub(2).read(), p.sub(1).read()) };
    free_raw(base as *mut u8, class);
}

/// The symbols to register with every ExecutionEngine (and ORC link of a cached object).
pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
    vec![
        ("_mlir_memref_to_llvm_alloc".into(), mlir_alloc as *const () as *mut c_void),
        ("_mlir_memref_to_llvm_aligned_alloc".into(), mlir_aligned_alloc as *const () as *mut c_void),
        ("_mlir_memref_to_llvm_free".into(), mlir_free as *const () as *mut c_void),
    ]
}

#[cfg(test)]
mod tests {
    use super::{mlir_aligned_alloc, mlir_alloc, mlir_free};

    #[test]
    fn small_and_large_allocations_are_aligned_usable_and_freed() {
        for size in [0u64, 1, 100, 4096, 60 * 1024, 64 * 1024, 1 << 20, (1 << 20) + 3] {
            for align in [1u64, 16, 64, 128, 4096] {
                let p = if align == 1 { mlir_alloc(size) } else { mlir_aligned_alloc(align, size) };
                assert!(!p.is_null());
                assert_eq!(p as usize % align.max(16) as usize, 0, "size {size} align {align}");
                // SAFETY: `size` bytes are ours.
                unsafe { std::ptr::write_bytes(p as *mut u8, 0xAB, size as usize) };
                mlir_free(p);
            }
        }
        mlir_free(std::ptr::null_mut());
    }
}
