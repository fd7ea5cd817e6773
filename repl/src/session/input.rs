//! The engine's input channel (used by `debug::breakpoint!`): the evaluation child asks
//! for one line by printing a stdout line that starts with [`INPUT_MARK`] (the rest is
//! the prompt), then reads the answer from a FIFO in the slot directory, named to it in
//! `JAXREPL_INPUT_FIFO`. The session hands the prompt to the front end's input function
//! (the terminal reads a line; the kernel sends Jupyter's `input_request` when the client
//! allows stdin) and writes the answer, or `\u{4}` for end of input, into the FIFO.

use super::Output;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Must equal `jax::debug::breakpoint::INPUT_MARK`.
pub const INPUT_MARK: &str = "\u{1}jaxrepl-input:";

/// The FIFO of the slot in `slot_dir`.
pub fn fifo_path(slot_dir: &Path) -> PathBuf {
    slot_dir.join("input.fifo")
}

/// Creates the slot's FIFO afresh; `None` if the system refuses.
pub fn make_fifo(slot_dir: &Path) -> Option<PathBuf> {
    let p = fifo_path(slot_dir);
    let _ = std::fs::remove_file(&p);
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path.
    (unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0).then_some(p)
}

/// The prompt, if `out` is an input request of the child.
pub fn request_prompt(out: &Output) -> Option<String> {
    match out {
        Output::Stdout(line) => line.strip_prefix(INPUT_MARK).map(|p| p.trim_end_matches('\n').to_string()),
        _ => None,
    }
}

/// Writes `answer` (one line; `None`: end of input) into the FIFO as soon as the child
/// has opened it (at its first request; it then keeps it open, read-write, for its whole
/// life, so no answer is lost between two requests); gives up after 5 s.
pub fn answer(fifo: &Path, answer: Option<String>) {
    let text = match answer {
        Some(s) => format!("{}\n", s.trim_end_matches(['\n', '\r'])),
        None => "\u{4}\n".to_string(),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Non-blocking: without a reader yet the open fails (ENXIO) instead of hanging.
        match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo) {
            Ok(mut f) => {
                let _ = f.write_all(text.as_bytes());
                return;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return,
        }
    }
}
