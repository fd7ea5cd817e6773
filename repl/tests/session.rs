//! Drives a real `Session` (a real evcxr child, real rustc) with plain Rust cells; the
//! engine prelude is off, so these tests do not need the engine.
//!
//! `harness = false`: evcxr re-executes this test binary as the evaluation child, so `main`
//! must call `evcxr::runtime_hook()` first, which libtest's generated main would not do.
//! Tests share one session (starting one costs seconds) and run in order.

use jaxrepl::{Completeness, ExecStatus, Output, Session, SessionOptions};
use std::time::{Duration, Instant};

struct Run {
    status: ExecStatus,
    outputs: Vec<Output>,
}

impl Run {
    fn stdout(&self) -> String {
        self.outputs
            .iter()
            .filter_map(|o| if let Output::Stdout(s) = o { Some(s.as_str()) } else { None })
            .collect()
    }
    fn plain(&self) -> Option<String> {
        self.outputs.iter().find_map(|o| match o {
            Output::Display(items) => items.iter().find(|(m, _)| m == "text/plain").map(|(_, d)| d.clone()),
            _ => None,
        })
    }
    fn error(&self) -> Option<(String, String, Vec<String>)> {
        self.outputs.iter().find_map(|o| match o {
            Output::Error { ename, evalue, traceback } => Some((ename.clone(), evalue.clone(), traceback.clone())),
            _ => None,
        })
    }
}

fn run(session: &mut Session, code: &str) -> Run {
    let mut outputs = Vec::new();
    let status = session.execute(code, &mut |o| outputs.push(o));
    Run { status, outputs }
}

fn variables_persist_and_stdout_streams(s: &mut Session) {
    let r = run(s, "let greeting = String::from(\"hello\");\nlet nums: Vec<i64> = vec![1, 2, 3];\nprintln!(\"{greeting} {}\", nums.len());");
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    assert_eq!(r.stdout(), "hello 3\n");
    let r = run(s, "nums.iter().sum::<i64>() * 10");
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    assert_eq!(r.plain().as_deref(), Some("60"));
    let vars = s.variables();
    assert!(vars.contains(&("greeting".to_string(), "String".to_string())), "{vars:?}");
    assert!(vars.iter().any(|(n, t)| n == "nums" && t.contains("Vec")), "{vars:?}");
}

/// The lines of one multi-line print arrive together and go out as one output (one
/// stream message in Jupyter; they were one output per line).
fn a_multi_line_print_is_one_output(s: &mut Session) {
    let r = run(s, "println!(\"{:#?}\", vec![1, 2, 3]);");
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    assert_eq!(r.stdout(), "[\n    1,\n    2,\n    3,\n]\n");
    // The child's reader thread hands the lines over one by one: the first may be taken
    // alone before the rest is there, never five outputs.
    let n = r.outputs.iter().filter(|o| matches!(o, Output::Stdout(_))).count();
    assert!(n <= 2, "{:?}", r.outputs);
}

fn panic_keeps_earlier_non_copy_variables(s: &mut Session) {
    let r = run(s, "let idx = 7;\nlet bad = nums[idx];");
    assert_eq!(r.status, ExecStatus::Error, "{:?}", r.outputs);
    let (ename, evalue, traceback) = r.error().expect("an error output");
    assert_eq!(ename, "Panic");
    assert_eq!(evalue, "index out of bounds: the len is 3 but the index is 7");
    assert_eq!(traceback[0], "panicked at cell:2:15:", "{traceback:?}");
    let r = run(s, "format!(\"{greeting} {:?}\", nums)");
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    assert_eq!(r.plain().as_deref(), Some("\"hello [1, 2, 3]\""));
}

fn compile_error_names_the_cell_line(s: &mut Session) {
    let r = run(s, "let a = 1;\nlet b = 2;\nlet c: i32 = \"three\";");
    assert_eq!(r.status, ExecStatus::Error);
    let (ename, evalue, traceback) = r.error().expect("an error output");
    assert_eq!(ename, "CompileError");
    assert_eq!(evalue, "mismatched types");
    assert_eq!(traceback[0], "error[E0308]: mismatched types");
    assert_eq!(traceback[1], " --> cell:3:14");
    assert!(traceback.contains(&"3 | let c: i32 = \"three\";".to_string()), "{traceback:?}");
    assert!(traceback.iter().any(|l| l.contains("^^^^^^^ expected `i32`, found `&str`")), "{traceback:?}");
    // The failed cell defined nothing; earlier variables are intact.
    assert!(!s.variables().iter().any(|(n, _)| n == "a" || n == "c"));
    assert_eq!(run(s, "greeting.len()").plain().as_deref(), Some("5"));
}

fn magics_report_errors_without_the_engine(s: &mut Session) {
    let r = run(s, "%nosuch x");
    assert_eq!(r.status, ExecStatus::Error);
    let (ename, evalue, _) = r.error().unwrap();
    assert_eq!(ename, "MagicError");
    assert!(evalue.starts_with("unknown magic `%nosuch` on line 1; the magics are: %jaxpr"), "{evalue}");
    let r = run(s, "%help");
    assert_eq!(r.status, ExecStatus::Ok);
    assert!(r.plain().unwrap().contains("%timeit CALL"));
}

fn abort_reports_lost_variables_and_recovers(s: &mut Session) {
    let r = run(s, "std::process::abort();");
    assert_eq!(r.status, ExecStatus::Error, "{:?}", r.outputs);
    let (ename, evalue, _) = r.error().expect("an error output");
    assert_eq!(ename, "ChildDied");
    assert!(evalue.contains("SIGABRT"), "{evalue}");
    assert!(evalue.ends_with("these variables were lost: greeting, nums"), "{evalue}");
    assert!(s.variables().is_empty(), "{:?}", s.variables());
    let r = run(s, "let again = 41 + 1; again");
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    assert_eq!(r.plain().as_deref(), Some("42"));
    // Our panic hook is installed again in the new child.
    let r = run(s, "panic!(\"boom {}\", again)");
    assert_eq!(r.error().map(|e| (e.0, e.1)), Some(("Panic".to_string(), "boom 42".to_string())));
}

fn interrupt_of_plain_rust_restarts_the_child(s: &mut Session) {
    let handle = s.interrupt_handle();
    let started = Instant::now();
    let mut outputs = Vec::new();
    // Interrupt once the loop is running (compiling the cell may take a while).
    let status = s.execute("println!(\"spinning\");\nloop { std::hint::spin_loop(); }", &mut |o| {
        if o == Output::Stdout("spinning\n".into()) {
            handle.interrupt();
        }
        outputs.push(o);
    });
    let r = Run { status, outputs };
    assert_eq!(r.status, ExecStatus::Interrupted, "{:?}", r.outputs);
    assert_eq!(r.stdout(), "spinning\n");
    let (ename, evalue, _) = r.error().expect("an error output");
    assert_eq!(ename, "Interrupted");
    assert!(evalue.contains("these variables were lost: again"), "{evalue}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(run(s, "2 * 21").plain().as_deref(), Some("42"));
}

fn completion_and_inspection(s: &mut Session) {
    run(s, "let my_value = 3usize;");
    let c = s.complete("my_v", 4);
    assert_eq!((c.start, c.end), (0, 4));
    assert_eq!(c.matches.first().map(String::as_str), Some("my_value"));
    let c = s.complete("%tim", 4);
    assert_eq!(c.matches, vec!["%time", "%timeit"]);
    assert_eq!(s.inspect("my_value + 1", 2).as_deref(), Some("my_value: usize"));
    // Offsets past the end or inside a character are clamped, never a panic.
    let _ = s.complete("é", 1);
    let _ = s.complete("x", 99);
    let _ = s.inspect("é", 1);
}

fn completeness(s: &mut Session) {
    assert_eq!(s.is_complete("fn f() {"), Completeness::Incomplete("    ".into()));
    assert_eq!(s.is_complete("let s = \"{\";"), Completeness::Complete);
    assert_eq!(s.is_complete("}"), Completeness::Invalid);
    assert_eq!(s.is_complete("%timeit f.call(&x)"), Completeness::Complete);
}

fn second_session_takes_another_slot(s: &mut Session) {
    let mut other = Session::start(SessionOptions { prelude: false, ..SessionOptions::from_env() }).unwrap();
    assert_ne!(other.slot_index(), s.slot_index());
    let r = run(&mut other, "1 + 1");
    assert_eq!(r.plain().as_deref(), Some("2"), "{:?}", r.outputs);
}

fn build_progress_ends_before_the_cells_first_output(s: &mut Session) {
    // Progress at once (JAXREPL_PROGRESS_AFTER_MS=0), so the cell's build shows it.
    // SAFETY: between cells no thread of the session reads the environment.
    unsafe { std::env::set_var("JAXREPL_PROGRESS_AFTER_MS", "0") };
    // A build of ~2 s whatever the machine's caches hold: a constant evaluated by rustc
    // (600k steps) from a seed that differs per run. (A plain cell can build in 0.5 s,
    // between two polls of the progress, and then rightly shows none.)
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let cell = format!(
        "const SLOW: u64 = {{ let mut i = 0u64; let mut s = {seed}u64; \
         while i < 600_000 {{ s = s.wrapping_mul(31).wrapping_add(i); i += 1; }} s }};\n\
         println!(\"printed\"); 40 + 2 + SLOW * 0"
    );
    let r = run(s, &cell);
    unsafe { std::env::remove_var("JAXREPL_PROGRESS_AFTER_MS") };
    assert_eq!(r.status, ExecStatus::Ok, "{:?}", r.outputs);
    let at = |f: &dyn Fn(&Output) -> bool| r.outputs.iter().position(f);
    let shown = at(&|o| matches!(o, Output::Progress { done: false, .. }));
    let done = at(&|o| matches!(o, Output::Progress { done: true, .. }));
    let printed = at(&|o| matches!(o, Output::Stdout(_)));
    assert!(shown.is_some() && printed.is_some(), "{:?}", r.outputs);
    // The build's progress ends before the printed line (a notebook can then remove it
    // instead of keeping an emptied display above the output).
    assert!(done.is_some() && done < printed, "{:?}", r.outputs);
    assert_eq!(r.stdout(), "printed\n");
    assert_eq!(r.plain().as_deref(), Some("42"));
}

fn main() {
    evcxr::runtime_hook();
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jaxrepl-session-tests");
    // SAFETY: no other threads exist yet.
    unsafe { std::env::set_var("JAXREPL_CACHE_DIR", &cache) };
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let opts = SessionOptions { prelude: false, ..SessionOptions::from_env() };
    let mut session = Session::start(opts).expect("session starts");
    let tests: &[(&str, fn(&mut Session))] = &[
        ("variables_persist_and_stdout_streams", variables_persist_and_stdout_streams),
        ("a_multi_line_print_is_one_output", a_multi_line_print_is_one_output),
        ("panic_keeps_earlier_non_copy_variables", panic_keeps_earlier_non_copy_variables),
        ("compile_error_names_the_cell_line", compile_error_names_the_cell_line),
        ("magics_report_errors_without_the_engine", magics_report_errors_without_the_engine),
        ("abort_reports_lost_variables_and_recovers", abort_reports_lost_variables_and_recovers),
        ("interrupt_of_plain_rust_restarts_the_child", interrupt_of_plain_rust_restarts_the_child),
        ("completion_and_inspection", completion_and_inspection),
        ("completeness", completeness),
        ("build_progress_ends_before_the_cells_first_output", build_progress_ends_before_the_cells_first_output),
        ("second_session_takes_another_slot", second_session_takes_another_slot),
    ];
    let mut failed = Vec::new();
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t0 = Instant::now();
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&mut session))).is_ok();
        println!("test {name} ... {} ({:.1} s)", if ok { "ok" } else { "FAILED" }, t0.elapsed().as_secs_f64());
        if !ok {
            failed.push(*name);
        }
    }
    if failed.is_empty() {
        println!("test result: ok");
    } else {
        println!("test result: FAILED: {}", failed.join(", "));
        std::process::exit(1);
    }
}
