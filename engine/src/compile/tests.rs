//! Compile-stage tests: real compilation and execution of small modules, timings,
//! error paths, callbacks, analyses.

use super::*;
use crate::ir::DType;
use crate::lower::tests::{sin_x2_plus_1, two_x_plus_y};
use crate::lower::{lower_jaxpr, LowerOptions};

pub(crate) fn buf<T: Copy>(shape: &[usize], d: DType, data: &[T]) -> Buffer {
    Buffer::from_slice(&ShapedArray::new(shape, d), data).unwrap()
}

pub(crate) fn compile_jaxpr(j: &crate::ir::ClosedJaxpr) -> Executable {
    let m = lower_jaxpr(j, "t", &LowerOptions::default()).unwrap();
    compile(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{e}\n--- module ---\n{}", m.text))
}

#[test]
fn runs_two_x_plus_y() {
    let exe = compile_jaxpr(&two_x_plus_y());
    let out = exe.execute(&[&buf(&[], DType::I32, &[3i32]), &buf(&[], DType::I32, &[4i32])]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].as_slice::<i32>().unwrap(), &[10]);
}

#[test]
fn runs_sin_and_reports_times() {
    let n = 1024;
    let exe = compile_jaxpr(&sin_x2_plus_1(n));
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
    let out = exe.execute(&[&buf(&[n], DType::F32, &x)]).unwrap();
    let got = out[0].as_slice::<f32>().unwrap();
    for (i, &g) in got.iter().enumerate() {
        let want = (x[i] as f64).sin() * 2.0 + 1.0;
        assert!((g as f64 - want).abs() < 1e-5, "{i}: {g} vs {want}");
    }
    let t = exe.times();
    eprintln!(
        "sin(x)*2+1 f32[1024]: parse {:.2} ms, passes {:.2} ms, engine {:.2} ms, codegen {:.2} ms, total {:.2} ms",
        t.parse * 1e3,
        t.passes * 1e3,
        t.engine * 1e3,
        t.codegen * 1e3,
        t.total() * 1e3
    );
    assert!(t.total() > 0.0);
    assert!(exe.optimized_ir().contains("scf.for"), "{}", exe.optimized_ir());
    assert!(!exe.optimized_ir().contains("linalg."), "{}", exe.optimized_ir());
    let ll = exe.llvm_ir().unwrap();
    assert!(ll.contains("define void @_mlir_ciface_jaxrepl_entry"), "{ll}");
}
