//! The persistent compilation cache (`jax_compilation_cache_dir`) across processes: this
//! test binary re-runs itself as a child (`child_process`, active only with
//! `JAXREPL_PC_DIR` set) that compiles two functions with the cache on and prints its
//! results' bits and the engine's counters. A second child must load both executables
//! from disk (no MLIR pass pipeline runs at all) and give bit-identical results, which
//! also match an f64 reference. A corrupted entry is ignored, recompiled and rewritten;
//! the compile-time and entry-size thresholds keep entries out.

use jax::prelude::*;
use jaxrepl_tests::host_array;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const N: usize = 64;
/// Elements of `g`'s input: above the parallel pipeline's 2^17 (OpenMP code, libomp).
const BIG: usize = 1 << 18;

/// `f(x, w) = sum(tanh(x @ w), axis 1)`: a GEMM runtime call (64³ multiply-adds) and
/// elementwise code.
fn f((x, w): (Array, Array)) -> Array {
    jnp::sum(&x.matmul(&w).tanh(), Some(&[1])).expect("valid axis")
}

/// `g(x) = sin(x * 2 + 1)` on `BIG` elements.
fn g(x: Array) -> Array {
    (x * 2.0 + 1.0).sin()
}

fn f_reference(x: &[f64], w: &[f64]) -> Vec<f64> {
    (0..N)
        .map(|i| (0..N).map(|j| (0..N).map(|k| x[i * N + k] * w[k * N + j]).sum::<f64>().tanh()).sum())
        .collect()
}

fn bits(a: &Array) -> String {
    a.to_vec::<f32>().expect("f32 result").iter().map(|v| format!("{:08x}", v.to_bits())).collect::<Vec<_>>().join(",")
}

/// The child: compiles and runs `f` and `g` with the cache in `JAXREPL_PC_DIR`, then
/// prints `KEY=VALUE` lines. `JAXREPL_PC_MIN_SECS`/`_MIN_BYTES` set the thresholds;
/// `JAXREPL_PC_WAIT` waits for the optimised tiers (tiered compilation compiles them, and
/// writes their entries, on its background worker). `F1`/`G1` are the first calls' results,
/// `F`/`G` those of a call after that (the optimised tier's).
#[test]
fn child_process() {
    let Ok(dir) = std::env::var("JAXREPL_PC_DIR") else { return };
    config::set_cache_dir(&dir).unwrap();
    let min_secs: f64 = std::env::var("JAXREPL_PC_MIN_SECS").map(|v| v.parse().unwrap()).unwrap_or(0.0);
    config::update_float("jax_persistent_cache_min_compile_time_secs", min_secs).unwrap();
    if let Ok(b) = std::env::var("JAXREPL_PC_MIN_BYTES") {
        config::update_int("jax_persistent_cache_min_entry_size_bytes", b.parse().unwrap()).unwrap();
    }
    config::update("jax_log_compiles", true).unwrap();
    let (x, _) = host_array(&[N, N], 1);
    let (w, _) = host_array(&[N, N], 2);
    let (big, _) = host_array(&[BIG], 3);
    let pipelines_before = jax::compile::context::pipeline_runs();
    let jf = jit(f);
    let jg = jit(g);
    let rf1 = jf.call((&x, &w)).unwrap();
    let rg1 = jg.call(&big).unwrap();
    let pipelines = jax::compile::context::pipeline_runs() - pipelines_before;
    let cf = jf.lower((&x, &w)).unwrap().compile().unwrap();
    let cg = jg.lower(&big).unwrap().compile().unwrap();
    let tier = cf.tier();
    if std::env::var_os("JAXREPL_PC_WAIT").is_some() {
        // Tiered: the optimised tier is compiled (and its entry written) in the background.
        assert!(cf.wait_optimized(std::time::Duration::from_secs(120)));
        assert!(cg.wait_optimized(std::time::Duration::from_secs(120)));
    }
    // The results of the code that runs now (the optimised tier).
    let (rf, rg) = (jf.call((&x, &w)).unwrap(), jg.call(&big).unwrap());
    // The first call's results agree (tier 1 may round differently).
    println!();
    println!("F1={}", bits(&rf1));
    println!("G1={}", bits(&rg1));
    // (libtest printed `test child_process ... ` without a newline before the first line.)
    let report = jax::transform::explain::report(&jax::transform::explain::recent());
    println!("F={}", bits(&rf));
    println!("G={}", bits(&rg));
    println!("PIPELINES={pipelines}");
    println!("HITS={}", jax::compile::persistent::hits());
    println!("WRITES={}", jax::compile::persistent::writes());
    println!("TIER={tier}");
    // The inspection views work on a loaded executable too (its LLVM module is rebuilt).
    let asm = cf.as_text_stage(jax::transform::stages::Stage::Asm).unwrap();
    println!("ASM={}", asm.contains("jaxrepl_packed"));
    for line in report.lines().filter(|l| l.contains("| persistent: ")) {
        println!("EXPLAIN={line}");
    }
}

struct Child {
    vals: HashMap<String, Vec<String>>,
    stderr: String,
}

impl Child {
    fn one(&self, k: &str) -> &str {
        &self.vals.get(k).unwrap_or_else(|| panic!("child printed no {k}; it printed {:?}\n{}", self.vals.keys(), self.stderr))[0]
    }
    fn num(&self, k: &str) -> u64 {
        self.one(k).parse().unwrap()
    }
}

fn run_child(dir: &Path, env: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_process", "--nocapture", "--test-threads=1"]).env("JAXREPL_PC_DIR", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the test binary runs as a child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let mut vals: HashMap<String, Vec<String>> = HashMap::new();
    for line in stdout.lines() {
        if let Some((k, v)) = line.split_once('=') {
            if k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) && !k.is_empty() {
                vals.entry(k.to_string()).or_default().push(v.to_string());
            }
        }
    }
    Child { vals, stderr }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("jaxrepl-pc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The entries in `dir`: `jit_<name>-<64 hex>-cache` files (no temporaries left).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).map(|r| r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    v.sort();
    v
}

fn check_values(c: &Child) {
    check_values_of(c, "F", "G");
    check_values_of(c, "F1", "G1");
}

fn check_values_of(c: &Child, fk: &str, gk: &str) {
    let (_, xv) = host_array(&[N, N], 1);
    let (_, wv) = host_array(&[N, N], 2);
    let (_, bv) = host_array(&[BIG], 3);
    let got: Vec<f32> = c.one(fk).split(',').map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap())).collect();
    for (i, (a, r)) in got.iter().zip(f_reference(&xv, &wv)).enumerate() {
        assert!((*a as f64 - r).abs() <= 1e-4 * (1.0 + r.abs()), "f[{i}] = {a}, reference {r}");
    }
    let got: Vec<f32> = c.one(gk).split(',').map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap())).collect();
    assert_eq!(got.len(), BIG);
    for (i, (a, x)) in got.iter().zip(&bv).enumerate() {
        let r = (x * 2.0 + 1.0).sin();
        assert!((*a as f64 - r).abs() <= 1e-5, "g[{i}] = {a}, reference {r}");
    }
}

#[test]
fn second_process_loads_native_code_without_compiling() {
    let dir = temp_dir("hit");
    let a = run_child(&dir, &[("JAXREPL_PC_WAIT", "1")]);
    check_values(&a);
    assert_eq!((a.num("HITS"), a.num("WRITES")), (0, 2), "{}", a.stderr);
    assert!(a.num("PIPELINES") >= 4);
    let files = entries(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    for (file, name) in files.iter().zip(["jit_f", "jit_g"]) {
        let hex = file.strip_prefix(&format!("{name}-")).and_then(|r| r.strip_suffix("-cache")).unwrap_or_else(|| panic!("{file}"));
        assert!(hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{file}");
        assert!(a.stderr.contains(&format!("PERSISTENT COMPILATION CACHE MISS for '{name}' with key '{name}-{hex}'")), "{}", a.stderr);
        assert!(a.stderr.contains(&format!("Writing {name} to persistent compilation cache with key '{name}-{hex}'")), "{}", a.stderr);
    }
    let explain = &a.vals["EXPLAIN"];
    assert!(explain.iter().all(|l| l.contains("| persistent: miss (no entry jit_")), "{explain:?}");
    // The verdict, given at the first call, is completed once the background tier is done.
    assert!(explain.iter().all(|l| l.contains("compiled in the background: written (")), "{explain:?}");

    let b = run_child(&dir, &[]);
    check_values(&b);
    // Bit-identical to the process that compiled, and no MLIR pipeline ran at all.
    assert_eq!(a.one("F"), b.one("F"));
    assert_eq!(a.one("G"), b.one("G"));
    assert_eq!((b.num("PIPELINES"), b.num("HITS"), b.num("WRITES")), (0, 2, 0), "{}", b.stderr);
    // A hit runs the optimised code from the first call (tiered compilation is skipped).
    assert_eq!(b.num("TIER"), 2);
    assert_eq!((a.one("ASM"), b.one("ASM")), ("true", "true"));
    assert!(b.stderr.contains("Persistent compilation cache hit for 'jit_f' with key 'jit_f-"), "{}", b.stderr);
    // JAX's order: the compile's "Compiling …" and lowering lines, then the hit.
    let at = |s: &str| b.stderr.find(s).unwrap_or_else(|| panic!("{s:?} not in {}", b.stderr));
    assert!(at("Compiling jit(f) with global shapes") < at("Persistent compilation cache hit for 'jit_f'"), "{}", b.stderr);
    assert!(!b.stderr.contains("Finished MLIR compilation"), "{}", b.stderr);
    assert!(!b.stderr.contains("PERSISTENT COMPILATION CACHE MISS"), "{}", b.stderr);
    assert!(b.vals["EXPLAIN"].iter().all(|l| l.contains("| persistent: hit (jit_") && l.contains("no MLIR passes")), "{:?}", b.vals["EXPLAIN"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_entries_are_recompiled_and_rewritten() {
    let dir = temp_dir("corrupt");
    let a = run_child(&dir, &[("JAXREPL_PC_WAIT", "1"), ("JAXREPL_TIERED_COMPILATION", "0")]);
    assert_eq!(a.num("WRITES"), 2, "{}", a.stderr);
    let files = entries(&dir);
    // Truncate f's entry, flip a byte in the middle of g's object.
    let pf = dir.join(&files[0]);
    let bytes = std::fs::read(&pf).unwrap();
    std::fs::write(&pf, &bytes[..bytes.len() / 2]).unwrap();
    let pg = dir.join(&files[1]);
    let mut bytes = std::fs::read(&pg).unwrap();
    let mid = bytes.len() * 3 / 4;
    bytes[mid] ^= 0xff;
    std::fs::write(&pg, &bytes).unwrap();

    let b = run_child(&dir, &[("JAXREPL_PC_WAIT", "1")]);
    check_values(&b);
    assert_eq!((b.num("HITS"), b.num("WRITES")), (0, 2), "{}", b.stderr);
    assert!(b.num("PIPELINES") >= 4);
    assert!(b.stderr.contains("ignoring persistent compilation cache entry") && b.stderr.contains("truncated"), "{}", b.stderr);
    assert!(b.stderr.contains("the object's hash does not match its header"), "{}", b.stderr);
    assert!(b.vals["EXPLAIN"].iter().all(|l| l.contains("ignored: ")), "{:?}", b.vals["EXPLAIN"]);

    // The rewritten entries are whole again.
    let c = run_child(&dir, &[]);
    assert_eq!((c.num("PIPELINES"), c.num("HITS")), (0, 2), "{}", c.stderr);
    assert_eq!(b.one("F"), c.one("F"));
    assert_eq!(b.one("G"), c.one("G"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn thresholds_keep_entries_out() {
    // Compile time: nothing here takes 1000 s.
    let dir = temp_dir("min-time");
    let a = run_child(&dir, &[("JAXREPL_PC_MIN_SECS", "1000"), ("JAXREPL_TIERED_COMPILATION", "0")]);
    check_values(&a);
    assert_eq!(a.num("WRITES"), 0);
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    assert!(
        a.stderr.contains("Not writing persistent cache entry for 'jit_f' because it took < 1000.00 seconds to compile ("),
        "{}",
        a.stderr
    );
    assert!(
        a.vals["EXPLAIN"].iter().all(|l| l.contains("not written: compile took ") && l.ends_with(" s < jax_persistent_cache_min_compile_time_secs (1000.00 s)")),
        "{:?}",
        a.vals["EXPLAIN"]
    );
    // Entry size: both entries are far below 1 GB.
    let b = run_child(&dir, &[("JAXREPL_PC_MIN_BYTES", "1000000000"), ("JAXREPL_TIERED_COMPILATION", "0")]);
    assert_eq!(b.num("WRITES"), 0);
    assert!(entries(&dir).is_empty());
    assert!(b.stderr.contains("is less than jax_persistent_cache_min_entry_size_bytes (1000000000 bytes)"), "{}", b.stderr);
    assert!(
        b.vals["EXPLAIN"].iter().all(|l| l.contains("not written: entry of ") && l.ends_with(" bytes < jax_persistent_cache_min_entry_size_bytes (1000000000 bytes)")),
        "{:?}",
        b.vals["EXPLAIN"]
    );
    // Tiered (the default): the entry would be the optimised tier's, compiled in the
    // background; once it is compiled, `%explain` says it was not written, and why (the
    // fresh user's case: only the cache dir set, every compile quicker than the minimum).
    let c = run_child(&dir, &[("JAXREPL_PC_MIN_SECS", "1000"), ("JAXREPL_PC_WAIT", "1")]);
    check_values(&c);
    assert_eq!(c.num("WRITES"), 0);
    assert!(entries(&dir).is_empty());
    assert!(
        c.vals["EXPLAIN"].iter().all(|l| l.contains("; optimised tier (LLVM O2) compiled in the background: not written: compile took ")
            && l.ends_with(" s < jax_persistent_cache_min_compile_time_secs (1000.00 s)")),
        "{:?}",
        c.vals["EXPLAIN"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_threshold_values_are_value_errors() {
    let e = config::update_str("jax_persistent_cache_min_compile_time_secs", "soon").unwrap_err();
    assert_eq!(e.message, "jax_persistent_cache_min_compile_time_secs must be a number of seconds >= 0, got \"soon\"");
    let e = config::update_float("jax_persistent_cache_min_entry_size_bytes", 1.5).unwrap_err();
    assert_eq!(e.message, "jax_persistent_cache_min_entry_size_bytes takes a whole number of bytes, got 1.5");
}

/// The notebook's flow (201-10) in one process: a write, then, with the executable cache
/// dropped (as in a new process), a redefined function is linked from the entry.
#[test]
fn in_process_hit_after_the_executable_cache_is_dropped() {
    if std::env::var_os("JAXREPL_PC_DIR").is_some() {
        return; // a child runs only `child_process`
    }
    let dir = temp_dir("in-process");
    config::set_cache_dir(dir.to_str().unwrap()).unwrap();
    config::update_float("jax_persistent_cache_min_compile_time_secs", 0.0).unwrap();
    let xs = jnp::arange(8.0);
    let cached = jit(|x: Array| (x.sin() * 2.0 + 1.0).sum()).with_name("cached");
    let first = cached.call(&xs).unwrap();
    assert!(cached.lower(&xs).unwrap().compile().unwrap().wait_optimized(std::time::Duration::from_secs(120)));
    let files = entries(&dir);
    assert!(files.len() == 1 && files[0].starts_with("jit_cached-"), "{files:?}");
    let (hits, pipelines) = (jax::compile::persistent::hits(), jax::compile::context::pipeline_runs());
    jax::transform::pipeline::clear_executable_cache();
    let again = jit(|x: Array| (x.sin() * 2.0 + 1.0).sum()).with_name("cached");
    let second = again.call(&xs).unwrap();
    assert_eq!(jax::compile::persistent::hits(), hits + 1);
    assert_eq!(jax::compile::context::pipeline_runs(), pipelines);
    let want: f64 = (0..8).map(|i| (i as f64).sin() * 2.0 + 1.0).sum();
    let (a, b) = (first.to_vec::<f64>().unwrap()[0], second.to_vec::<f64>().unwrap()[0]);
    assert!((a - want).abs() < 1e-5 && (b - want).abs() < 1e-5, "{a} {b} {want}");
    config::set_cache_dir("").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
